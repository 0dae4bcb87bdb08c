"""A running job's TensorBoard event files, as transformers' TensorBoardCallback writes them (`report_to:
tensorboard`): `OUTPUT_DIR/runs/<date>_<host>/events.out.tfevents.*`, flushed at every log, one `train/<metric>`
scalar per logged value at the step it was logged. Unlike trainer_state.json (written at each save: every 500 steps
by default), they hold every log from the job's first, so `trl-doctor watch OUTPUT_DIR --follow` judges a job before
its first checkpoint.

A file is TFRecord frames (length, its CRC, the data, its CRC), each data an `Event` message that tensorboard's own
protobuf class parses (tensorboard.compat.proto.event_pb2; tensorboard is what writes these files, so it is there
where they are). The frames are cut here: tensorboard's Python record reader checks both CRCs of every record in
Python (15 s for a 20,000-step file), this reads the same file in under a second. A file cut mid-record (the job is
writing it) is read up to its last whole record, and the rest when it grows. A frame whose length is not plausible
ends the reading with the file named (InputError): every file under a watched folder is hostile.

One run at a time: a folder with several runs (a job launched twice into one output_dir) is judged on its newest.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from trl_doctor.errors import InputError

EVENTS = "events.out.tfevents."
ARGS = "args/text_summary"  # TensorBoardCallback.on_train_begin: add_text("args", args.to_json_string())
MAX_RECORD = 64 << 20  # a scalar event is ~50 bytes; a record claiming more is not a log's
SUMMARY = frozenset(("train_runtime", "train_loss", "train_samples_per_second", "train_steps_per_second", "total_flos"))
_SKIPPED = ("eval/", "test/")  # transformers' rewrite_logs: eval_* and test_* rows are not training logs


def is_event_file(path: Path) -> bool:
    return path.name.startswith(EVENTS)


def run_folders(folder: Path) -> list[Path]:
    """The folders holding event files (`folder` itself, an output folder's `runs/*`, a `runs` folder's children),
    oldest run first."""
    found = []
    children = sorted(folder.glob("*")) if folder.name == "runs" else []
    for candidate in (folder, *sorted(folder.glob("runs/*")), *children):
        try:
            if candidate.is_dir() and any(p.name.startswith(EVENTS) for p in candidate.iterdir()):
                found.append(candidate)
        except OSError:
            continue
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=_newest_mtime)


def newest_events(folder: Path, run: str | None = None) -> Path | None:
    """The newest event file of the run `run` names (its folder's name), else of the newest run, under `folder`;
    None when there is none (InputError when `run` names none of several)."""
    runs = run_folders(folder)
    if not runs:
        return None
    chosen = runs[-1]
    if run is not None:
        named = [r for r in runs if r.name == run]
        if not named:
            if len(runs) == 1 and runs[0] == folder:
                return None
            listed = ", ".join(r.name for r in runs[-10:])
            raise InputError(f"{folder}: no TensorBoard run named {run!r} (its runs: {listed})")
        chosen = named[-1]
    files = sorted((p for p in chosen.iterdir() if p.name.startswith(EVENTS) and p.is_file()), key=lambda p: p.name)
    return files[-1] if files else None


def runs_of(events: Path) -> tuple:
    """The run an event file is (its folder) and every run beside it under the same runs/ folder, oldest first
    (trl_doctor.watch.stores.Run)."""
    from trl_doctor.watch.runinfo import Run

    folder = events.parent
    siblings = run_folders(folder.parent) if folder.parent.name == "runs" else [folder]
    runs = [Run(p.name, p.name, _newest_mtime(p)) for p in siblings]
    return Run(folder.name, folder.name, _newest_mtime(folder)), runs


def _newest_mtime(folder: Path) -> float:
    try:
        return max(p.stat().st_mtime for p in folder.iterdir() if p.name.startswith(EVENTS))
    except (OSError, ValueError):
        return 0.0


class EventReader:
    """Reads one event file into a History as it grows: `feed(data)` takes the bytes past what it has read; rows are
    the scalars of one step, a row added when its first value arrives and completed by the values of the same step
    that follow (History.amend_last)."""

    def __init__(self, history, path: Path):
        from tensorboard.compat.proto.event_pb2 import Event  # noqa: F401  (fails here, said by `reader`)

        self.history, self.path = history, path
        self._tags: dict[str, str | None] = {}  # a tag -> the metric it is (None: not a training log's)
        self.offset = 0  # bytes of the file consumed (whole records)
        self._buffer = b""
        self._step: int | None = None  # the step of the history's newest row from this file
        self._fast: dict[bytes, str | None] = {}  # a scalar's tag, as bytes -> the metric it is

    def feed(self, data: bytes) -> bool:
        """Take the file's next bytes; True when a row was added or completed, or the run logged its summary."""
        from tensorboard.compat.proto.event_pb2 import Event

        buffer = self._buffer + data if self._buffer else data
        unpack, parse = struct.unpack_from, Event.FromString
        pos, size, changed = 0, len(buffer), False
        row: dict[str, float]
        step, row = None, {}  # the step being read and its values (torch writes one scalar an event)
        tags, fast_tags, to_float = self._tags, self._fast, _FLOAT
        last_raw, event_step = None, None
        while pos + 12 <= size:
            start = pos
            # the scalars from here on, back to back (see _SCALAR); finditer only where one starts here, so that a
            # file of other records is never searched to its end at each of them
            for m in _SCALAR.finditer(buffer, pos) if _SCALAR.match(buffer, pos) else ():
                raw_step, tag_length, raw_tag, raw_value = m.groups()
                end = m.end()
                if m.start() != pos or end - pos != buffer[pos] + 16 or tag_length[0] != len(raw_tag):
                    break  # not the next record, or lengths that do not add up: read below, as an Event
                pos = end
                if raw_step != last_raw:  # a step's scalars come together: its varint read once
                    last_raw, event_step = raw_step, _varint(raw_step)
                if event_step != step:
                    changed |= self._row(step, row)
                    step, row = event_step, {}
                name = fast_tags.get(raw_tag, "")
                if name == "":
                    name = self._name(raw_tag.decode("utf-8", "replace"))
                    if len(fast_tags) < 100_000:
                        fast_tags[raw_tag] = name
                if name is None:
                    continue
                if name in SUMMARY:
                    self.history.ended = changed = True
                    continue
                row[name] = to_float(raw_value)[0]
            if pos > start:
                continue
            (length,) = unpack("<Q", buffer, pos)
            if length > MAX_RECORD:
                raise InputError(f"{self.path}: not a TensorBoard event file (a record of {length} bytes at byte "
                                 f"{self.offset + pos})")
            end = pos + 12 + length
            if end + 4 > size:
                break  # the record is still being written
            try:
                event = parse(buffer[pos + 12:end])
            except Exception:  # protobuf's DecodeError: a damaged record
                raise InputError(f"{self.path}: not a TensorBoard event file (a record that is no Event at byte "
                                 f"{self.offset + pos})") from None
            pos = end + 4
            values = event.summary.value  # empty for the file's version record and other non-summary events
            if not values:
                continue
            if event.step != step:
                changed |= self._row(step, row)
                step, row = event.step, {}
            for value in values:
                if value.tag == ARGS:
                    self._arguments(value)
                    continue
                name = tags.get(value.tag, "")
                if name == "":
                    name = self._name(value.tag)
                if name is None:
                    continue
                if name in SUMMARY:
                    self.history.ended = changed = True
                    continue
                number = value.simple_value if value.WhichOneof("value") == "simple_value" else _scalar(value)
                if number is not None:
                    row[name] = number
        changed |= self._row(step, row)
        self.offset += pos
        self._buffer = buffer[pos:]
        return changed

    def _arguments(self, value) -> None:
        """The job's TrainingArguments, which TensorBoardCallback writes as JSON text when training begins: its
        max_steps and logging interval (a job stopped early still had steps to go), and its settings for the rules."""
        import json

        text = value.tensor.string_val[0] if value.tensor.string_val else b""
        if not text or len(text) > 1 << 20:
            return
        try:
            args = json.loads(text)
        except (ValueError, RecursionError, UnicodeDecodeError):
            return
        self.history.take_args(args)

    def _name(self, tag: str) -> str | None:
        """The metric a tag holds (`train/loss` -> `loss`, made canonical as a logged row's keys are), a SUMMARY
        name as it is, None for an evaluation's or what is no metric; remembered for the file."""
        name = None if tag.startswith(_SKIPPED) else (tag[6:] if tag.startswith("train/") else tag)
        if name is not None and name not in SUMMARY:
            name = self.history.metric_of(name) or None
        if len(self._tags) < 100_000:
            self._tags[tag] = name
        return name

    def _row(self, step: int | None, values: dict[str, float]) -> bool:
        """Add one step's values as a log, or to the newest log when it is the same step's (read in two parts)."""
        if step is None or not values:
            return False
        if step == self._step and self.history.logs:
            self.history.amend_last(values)
            return True
        if self.history.add_metrics(values, int(step)) is None:
            return False
        self._step = step
        return True


# A scalar event as torch's SummaryWriter writes it (`add_scalar`: one Summary.Value with a simple_value), framed:
# length (8: under 256 for such a record; the whole match is that length + 16) and its CRC (4), then Event{wall_time
# (field 1, fixed64), step (2, varint), summary (5){value (1){tag (1), simple_value (2, fixed32)}}}, then the data's
# CRC (4). A run of them back to back is found by one search and each read without building an Event, its frame's
# length and its tag's length checked against the bytes (500,000 records in under half the time); any other record
# (the version record, the args text, a tensor scalar, a record another writer laid out otherwise) goes through
# tensorboard's Event.
_FRAME = (rb"[\x10-\xff]\x00{7}.{4}\x09.{8}\x10([\x80-\xff]{0,9}[\x00-\x7f])\x2a[\x00-\x7f]\x0a[\x00-\x7f]"
          rb"\x0a([\x01-\x7f])([^\x00-\x1f]{1,127})\x15(.{4}).{4}")
_SCALAR = re.compile(rb"(?s)" + _FRAME)
_FLOAT = struct.Struct("<f").unpack


def _varint(data: bytes) -> int:
    out = 0
    for shift, byte in enumerate(data):
        out |= (byte & 0x7F) << (7 * shift)
    return out


def _scalar(value) -> float | None:
    """A summary value's number: `simple_value` (torch's SummaryWriter, tensorboardX), or a scalar tensor (TF 2)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        tensor = value.tensor
        if tensor.float_val:
            return float(tensor.float_val[0])
        if tensor.double_val:
            return float(tensor.double_val[0])
        if len(tensor.tensor_content) in (4, 8):
            return struct.unpack("<f" if len(tensor.tensor_content) == 4 else "<d", tensor.tensor_content)[0]
    return None


def reader(history, path: Path) -> EventReader:
    """An EventReader for `path`; InputError saying what to install where tensorboard is missing."""
    try:
        return EventReader(history, path)
    except ImportError:
        raise InputError(f"{path}: a TensorBoard event file; reading it needs tensorboard (pip install "
                         "\"trl-doctor[watch]\", or tensorboard itself)") from None


def read_into(history, path: Path, max_bytes: int):
    """`history` (a new trl_doctor.watch.history.History) with the event file at `path` read into it."""
    from trl_doctor.watch import read_bytes

    events = reader(history, path)
    events.feed(read_bytes(path, max_bytes))
    if not history.logs:
        raise InputError(f"{path}: no training log in this TensorBoard event file yet (the job logs every "
                         "logging_steps steps)")
    return history
