"""A model folder's weight files, read from their headers only: which checkpoint format it holds, and whether
every file the checkpoint names is there, whole and consistent. No tensor is loaded and no pickle is opened.

A safetensors file is 8 bytes (the header's length N, little-endian), N bytes of JSON naming each tensor's dtype,
shape and [begin, end) byte range in the data that follows. A file cut short by a failed copy or download still
has its header: the largest end offset says how long the file must be."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

MAX_HEADER = 100 * 2**20  # safetensors refuses headers past 100 MB
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E8M0": 1}


@dataclass
class Weights:
    """What a model folder holds: `format` is "safetensors", "sharded safetensors", "pickle" (pytorch_model*.bin,
    never opened here) or "none"; `problems` lists (file, what is wrong) for files that are missing or broken."""

    folder: Path
    format: str
    files: list[Path] = field(default_factory=list)
    tensors: int = 0
    nbytes: int = 0
    problems: list[tuple[Path, str]] = field(default_factory=list)


def weights(folder: Path) -> Weights:
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return _sharded(folder, index)
    single = folder / "model.safetensors"
    if single.exists():
        out = Weights(folder, "safetensors", [single])
        _read_into(out, single)
        return out
    pickles = sorted(folder.glob("pytorch_model*.bin")) + sorted(folder.glob("pytorch_model.bin.index.json"))
    if pickles:
        return Weights(folder, "pickle", pickles)
    others = sorted(folder.glob("*.safetensors"))
    if others:  # a checkpoint saved under another name (consolidated.safetensors, ...)
        out = Weights(folder, "safetensors", others)
        for f in others:
            _read_into(out, f)
        return out
    return Weights(folder, "none")


def _sharded(folder: Path, index: Path) -> Weights:
    out = Weights(folder, "sharded safetensors", [index])
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        out.problems.append((index, f"unreadable index: {type(exc).__name__}: {exc}"))
        return out
    for name in shards:
        shard = folder / str(name)
        out.files.append(shard)
        if not shard.is_file():
            out.problems.append((shard, f"missing: {index.name} maps tensors to it (an interrupted download or copy)"))
            continue
        _read_into(out, shard)
    return out


def _read_into(out: Weights, path: Path) -> None:
    problem = _check_file(out, path)
    if problem:
        out.problems.append((path, problem))


def _check_file(out: Weights, path: Path) -> str | None:
    """Why `path` is not a whole safetensors file (None when it is); counts its tensors and bytes into `out`."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{size} bytes: too short to be a safetensors file"
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or n > size - 8:
                return f"not a safetensors file, or cut short: its header claims {n:,} bytes of a {size:,}-byte file"
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    except (UnicodeDecodeError, ValueError):
        return "not a safetensors file: its header is not JSON"
    if not isinstance(header, dict):
        return "not a safetensors file: its header is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = info["data_offsets"]
            expected = prod(info["shape"]) * DTYPE_BYTES.get(info["dtype"], 0)
        except (KeyError, TypeError, ValueError):
            return f"tensor {name!r} has no valid dtype, shape and data_offsets in the header"
        if DTYPE_BYTES.get(info["dtype"]) and stop - begin != expected:
            return f"tensor {name!r} spans {stop - begin:,} bytes, but its shape and dtype need {expected:,}"
        end = max(end, stop)
        out.tensors += 1
    need = 8 + n + end
    if size < need:
        return f"cut short: {size:,} of {need:,} bytes (its header describes {out.tensors} tensors)"
    out.nbytes += end
    return None
