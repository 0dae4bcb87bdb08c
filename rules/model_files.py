"""TD017 model-files: every model the trainer loads has its weights, whole.

What it does
    For the policy, `reward_model_name_or_path`, `reward_model_path`, `value_model_path` and
    `sft_model_path` (local folders or cached snapshots) it finds the weights (the safetensors
    index and its shards, `model.safetensors`, `pytorch_model*.bin`, never opened) and reads each
    safetensors header only: every tensor's byte range must fit its shape and dtype and the file. A
    140 GB checkpoint takes milliseconds. A broken or missing file fails; no weights at all warns
    (a config-only copy is normal off the launch machine).

Why is this bad?
    The other rules build models on the meta device or as a tiny twin and never read the weights;
    the job does, at start-up, after its processes started, its GPUs are held and vLLM began
    loading: a cut-short file stops `from_pretrained` with "SafetensorError: Error while
    deserializing header: MetadataIncompleteBuffer" (or "incomplete metadata, file not fully
    covered"); a missing shard with "OSError: ... does not appear to have a file named
    model-00002-of-00004.safetensors"; a folder with no weights (a tokenizer-only save, a
    `--include "*.json"` download) with "does not appear to have a file named model.safetensors".

Example
    model_name_or_path: qwen2-truncated  # model.safetensors cut short
    -> fail: the policy's weights in .../qwen2-truncated are broken: model.safetensors: cut short:
       59,232 of 118,464 bytes (its header describes 26 tensors): from_pretrained stops at
       start-up, after the job has taken its GPUs

Fix safety
    No automatic fix (the doctor never downloads or rewrites weights): a manual fix names the file
    to copy or download again (`huggingface-cli download REPO --include FILE`, or the copy
    command's source).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

from trl_doctor import ASYNC_GRPO, fail, InputError, manual, passed, rule, skip, TRAINERS, warn
from trl_doctor.facts.inputs.models import resolve_artifact

OTHER_MODELS = (("reward_model_name_or_path", "reward model"), ("reward_model_path", "reward model"),
                ("value_model_path", "value model"), ("sft_model_path", "SFT model"))


@rule(
    id="TD017",
    slug="model-files",
    title="Every model the trainer loads has its weights, and no weight file is cut short",
    trainers=(*TRAINERS, ASYNC_GRPO),
    fixable="never",
    static_skip="it reads the weights' headers against the model",
)
def check(ctx):
    folders = _folders(ctx)
    if not folders:
        yield skip("no model folder to read: the trainer's models come from the script's own objects")
        return
    for role, folder in folders:
        yield _judge(role, folder)


def _folders(ctx) -> list[tuple[str, Path]]:
    cfg = ctx.config
    out: list[tuple[str, Path]] = []
    if cfg.model.path.is_dir():
        out.append(("policy", cfg.model.path))
    for key, role in OTHER_MODELS:
        ref = cfg.get(key)  # a path as the file writes it (relative to the file)
        if not isinstance(ref, str) or not ref:
            continue
        try:
            folder = resolve_artifact(ref, cfg.base_dir, str(cfg.path), key, need="config.json").path
        except InputError:
            continue  # not here (a hub id the launch downloads): nothing to read
        if folder.is_dir() and all(folder != f for _, f in out):
            out.append((role, folder))
    return out


def _judge(role: str, folder: Path):
    w = weights(folder)
    details = {"folder": str(folder), "format": w.format, "files": [f.name for f in w.files]}
    if w.problems:
        listed = "; ".join(f"{p.name}: {why}" for p, why in w.problems[:3])
        more = f" (and {len(w.problems) - 3} more)" if len(w.problems) > 3 else ""
        return fail(f"the {role}'s weights in {folder} are broken: {listed}{more}: from_pretrained stops at "
                    "start-up, after the job has taken its GPUs", fix=manual(
                        f"copy or download again: {', '.join(p.name for p, _ in w.problems)} (e.g. "
                        f"`huggingface-cli download REPO --include {w.problems[0][0].name}`)"), **details)
    if w.format == "none":
        return warn(f"the {role} folder {folder} holds no weights (no model.safetensors, shards or "
                    "pytorch_model.bin): the launch fails in from_pretrained unless the launch machine's copy has "
                    "them", fix=manual("copy the checkpoint's weight files into the folder (or point the config at "
                                       "the full checkpoint)"), **details)
    if w.format == "pickle":
        return passed(f"the {role} has pickle weights ({', '.join(f.name for f in w.files)}), not opened by the "
                      "doctor", **details)
    details["tensors"] = w.tensors
    return passed(f"the {role}'s {w.format} weights are whole: {w.tensors} tensors, {w.nbytes / 2**20:,.1f} MiB "
                  f"in {len([f for f in w.files if f.suffix == '.safetensors'])} file(s)", **details)


# -- a model folder's weight files, read from their headers ------------------------------------------------------
# A model folder's weight files, read from their headers only: which checkpoint format it holds, and whether
# every file the checkpoint names is there, whole and consistent. No tensor is loaded and no pickle is opened.
#
# A safetensors file is 8 bytes (the header's length N, little-endian), N bytes of JSON naming each tensor's dtype,
# shape and [begin, end) byte range in the data that follows. A file cut short by a failed copy or download still
# has its header: the largest end offset says how long the file must be.

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
