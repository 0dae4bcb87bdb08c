"""A wandb run folder as the job writes it, offline (`WANDB_MODE=offline`: `wandb/offline-run-<date>-<id>/`) or
online (`wandb/run-<date>-<id>/`): its `run-<id>.wandb` file is the run's transaction log, every record the run
sent, appended as the job runs. A record is wandb's own protobuf `Record` (wandb.proto.wandb_internal_pb2, the class
wandb writes it with): its `history` records are the `wandb.log` rows (transformers' WandbCallback logs each
training log as `train/<metric>` with `train/global_step`; TRL's profiling timings are rows of their own), its
`run` record names the run, its `exit` record says the job ended; config records (the model's config dict) are not
rows.

The file is LevelDB's log format (wandb's own "leveldb log datastore": 32 KiB blocks of records, each a 7-byte header,
crc32, length, type; a record cut across blocks is FIRST, MIDDLE..., LAST). wandb 0.30 dropped its Python reader of
it (wandb.sdk.internal.datastore; the Go core writes the file), and that reader opened the file for writing; the
blocks are cut here, read-only, and a record still being written ends the reading until the file grows.

A `wandb` folder (or a project folder holding one) is a store of every run in it, the `latest-run` link aside.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from trl_doctor.errors import InputError
from trl_doctor.watch.stores import Run, Store

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)  # ident, magic, version
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_BYTES = 1 << 30
_CRC = {t: zlib.crc32(bytes([t])) & 0xFFFFFFFF for t in (FULL, FIRST, MIDDLE, LAST)}


def find(folder: Path) -> "WandbStore | None":
    """The wandb runs in `folder`: a run folder, a `wandb` folder, or the folder a job ran in (its `wandb/`)."""
    for base in (folder, folder / "wandb"):
        try:
            if any(base.glob("run-*.wandb")):
                return WandbStore(base.parent, [base])
            runs = sorted(p for p in base.glob("*run-*") if p.is_dir() and not p.is_symlink()
                          and any(p.glob("run-*.wandb")))
        except OSError:
            continue
        if runs:
            return WandbStore(base, runs)
    return None


class WandbStore(Store):
    kind = "wandb"

    def __init__(self, location: Path, folders: list[Path]):
        super().__init__(str(location))
        self.folders = folders
        self._files: dict[str, Path] = {}
        self._records: dict[Path, tuple] = {}

    def _file(self, folder: Path) -> Path:
        files = sorted(folder.glob("run-*.wandb"))
        if not files:
            raise InputError(f"{folder}: no run-*.wandb file in this wandb run folder")
        return files[-1]

    def stamp(self) -> object:
        stamps: list[tuple[int, int] | None] = []
        for folder in self.folders:
            try:
                st = self._file(folder).stat()
                stamps.append((st.st_size, st.st_mtime_ns))
            except (OSError, InputError):
                stamps.append(None)
        return tuple(stamps)

    def runs(self) -> list[Run]:
        runs = []
        for folder in self.folders:
            path = self._file(folder)
            name, ident, started, ended = None, path.stem.removeprefix("run-"), 0.0, False
            for record in _records(path, kinds=("run", "exit")):
                kind = record.WhichOneof("record_type")
                if kind == "run":
                    name = record.run.display_name or None
                    ident = record.run.run_id or ident
                    started = float(record.run.start_time.seconds) or started
                elif kind == "exit":
                    ended = True
            run = Run(name or ident, ident, started or _mtime(path), ended)
            self._files[run.id] = path
            runs.append(run)
        return sorted(runs, key=lambda r: r.started)

    def args(self, run: Run) -> dict:
        """The run's config records (WandbCallback's config update: the TrainingArguments and the model's config)."""
        config: dict = {}
        for record in _records(self._files[run.id], kinds=("config",)):
            for item in record.config.update:
                key = item.key or "/".join(item.nested_key)
                try:
                    value = json.loads(item.value_json) if len(item.value_json) < (1 << 20) else None
                except (ValueError, RecursionError):
                    continue
                config[key] = value.get("value", value) if isinstance(value, dict) and "value" in value else value
            if len(config) > 5000:
                break
        return config

    def media(self, run: Run) -> Path:
        """The run's files folder: a logged table's rows are its media/table/*.table.json (TRL's `completions`)."""
        return self._files[run.id].parent / "files"

    def rows(self, run: Run):
        path = self._files[run.id]
        for record in _records(path, kinds=("history",)):
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                try:
                    row[key] = json.loads(item.value_json)
                except (ValueError, RecursionError):
                    continue
            if row:
                yield row


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _records(path: Path, kinds: tuple[str, ...]):
    """The file's whole records of these kinds, as wandb's protobuf Records."""
    try:
        from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined, unused-ignore]  # protobuf makes it at import (a wandb with stubs has it)
    except ImportError:
        raise InputError(f"{path}: a wandb run; reading it needs wandb (pip install \"trl-doctor[watch]\", or wandb "
                         "itself)") from None
    for data in frames(path):
        try:
            record = Record.FromString(data)
        except Exception:  # protobuf's DecodeError: a damaged record
            raise InputError(f"{path}: not a wandb run file (a record that is no wandb Record)") from None
        if record.WhichOneof("record_type") in kinds:
            yield record


def frames(path: Path):
    """The data of each whole record in a wandb transaction log (LevelDB's log format), read-only."""
    from trl_doctor.watch import read_bytes

    data = read_bytes(path, MAX_BYTES, "run's log")
    if not data.startswith(HEADER):
        raise InputError(f"{path}: not a wandb run file (no ':W&B' header)")
    pos, size, pending = len(HEADER), len(data), None
    while pos + 7 <= size:
        left = BLOCK - pos % BLOCK
        if left < 7:  # the block's zero padding
            pos += left
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0:  # preallocated zeros: the end of what is written
            return
        end = pos + 7 + length
        if end > size:
            return  # the record is still being written
        chunk = data[pos + 7:end]
        if kind not in _CRC or length > left - 7 or zlib.crc32(chunk, _CRC[kind]) & 0xFFFFFFFF != crc:
            raise InputError(f"{path}: not a wandb run file (a damaged record at byte {pos})")
        pos = end
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = [chunk]
        elif pending is not None:
            pending.append(chunk)
            if kind == LAST:
                yield b"".join(pending)
                pending = None
