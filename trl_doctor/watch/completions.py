"""A job's completions, where they are at hand (issue 61): the text the policy generated, read by the watch's
completion rules (trl_doctor.facts.completions).

Where they come from:
- inside the job (DoctorCallback(watch=True)): the trainer's own record of its newest generation batch, TRL's
  `_logs` (prompt, completion, per-function rewards, advantages: GRPOTrainer and RLOOTrainer keep it whether or not
  log_completions is on), read at each log;
- TRL's `log_completions=True` files: `<output_dir>/completions/completions_<step>.parquet` (trl >= 1.10);
- the trackers' copies of that table: trackio's `completions` value (a "trackio.table" in the metrics row) and
  wandb's (a "table-file" whose rows are in the run's files/media/table/*.table.json).

A History keeps the first batches it met (the run's start, the reference a drift is measured from) and the newest.
Every text is cut to MAX_TEXT characters; a store's table is read to MAX_ROWS rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

MAX_TEXT = 4000  # characters of a completion kept (its end, where a loop shows)
MAX_ROWS = 512  # rows read of one table
KEEP_FIRST, KEEP_LAST = 2, 6  # batches kept: the run's first ones and its newest


class Completion(NamedTuple):
    step: int | None
    prompt: str
    text: str
    rewards: dict[str, float]


def text_of(value: Any) -> str:
    """A prompt's or completion's text: a string as it is; a conversation (TRL's conversational format: a list of
    {"role", "content"} messages) its last message's content, content parts' text joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        content = value.get("content", value.get("text", ""))
        if isinstance(content, list):
            return " ".join(text_of(part) for part in content if isinstance(part, (dict, str)))
        return content if isinstance(content, str) else ""
    if isinstance(value, (list, tuple)) and value:
        return text_of(value[-1])
    try:  # numpy arrays of messages (a parquet's list column)
        items = list(value)
    except TypeError:
        return ""
    return text_of(items) if items and not isinstance(value, (bytes, str)) else ""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[-MAX_TEXT:]


def from_rows(rows: list[dict], step: int | None) -> list[Completion]:
    """Completions from a table's rows ({"step", "prompt", "completion", <reward function>: value, "advantage"})."""
    out = []
    for row in rows[:MAX_ROWS]:
        if not isinstance(row, dict) or "completion" not in row:
            continue
        rewards = {str(k): float(v) for k, v in row.items()
                   if k not in ("step", "prompt", "completion", "advantage", "image") and _number(v)}
        at = row.get("step", step)
        out.append(Completion(int(at) if isinstance(at, (int, float)) and _number(at) else step,
                              _cut(text_of(row.get("prompt", ""))),
                              _cut(text_of(row["completion"])), rewards))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def from_table_value(value: Any, step: int | None, media: Path | None = None) -> list[Completion]:
    """A tracker's logged `completions` value: trackio's {"_type": "trackio.table", "_value": [row, ...]}, or wandb's
    {"_type": "table-file", "path": "media/table/...json"} resolved under the run's `media` folder."""
    if not isinstance(value, dict):
        return []
    kind = value.get("_type")
    if kind == "trackio.table" and isinstance(value.get("_value"), list):
        return from_rows(value["_value"], step)
    if kind in ("table-file", "table") and media is not None and isinstance(value.get("path"), str):
        path = (media / value["path"]).resolve()
        if media.resolve() not in path.parents or not path.is_file() or path.stat().st_size > (64 << 20):
            return []
        try:
            table = json.loads(path.read_text(encoding="utf-8", errors="replace"))
            columns, data = table["columns"], table["data"]
            return from_rows([dict(zip(columns, row)) for row in data[:MAX_ROWS]], step)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return []
    return []


def from_trainer(trainer: Any, step: int) -> list[Completion]:
    """The newest generation batch a TRL trainer keeps in `_logs` (GRPOTrainer, RLOOTrainer), at this log's step."""
    logs = getattr(trainer, "_logs", None)
    if not isinstance(logs, dict) or "completion" not in logs:
        return []
    try:
        prompts, completions = list(logs.get("prompt") or ()), list(logs["completion"])
        rewards = {str(name): list(values) for name, values in dict(logs.get("rewards") or {}).items()}
    except (TypeError, ValueError):
        return []
    rows = []
    for i, completion in enumerate(completions[:MAX_ROWS]):
        row = {"completion": completion, "prompt": prompts[i] if i < len(prompts) else ""}
        row.update({name: values[i] for name, values in rewards.items() if i < len(values)})
        rows.append(row)
    return from_rows(rows, step)


def parquet_folder(folder: Path) -> list[Completion]:
    """TRL's `<output_dir>/completions/completions_<step>.parquet` files: the first batches and the newest (pyarrow,
    which `datasets` brings, reads them; without it, none)."""
    files = sorted(folder.glob("completions_*.parquet"))
    if not files:
        return []
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return []
    chosen = files if len(files) <= KEEP_FIRST + KEEP_LAST else files[:KEEP_FIRST] + files[-KEEP_LAST:]
    out: list[Completion] = []
    for path in chosen:
        try:
            rows = pq.read_table(path).slice(0, MAX_ROWS).to_pylist()
        except Exception:  # a file the job is writing, or not a parquet: not this table's evidence
            continue
        tail = path.stem.rsplit("_", 1)[-1]
        out += from_rows(rows, int(tail) if tail.isdigit() else None)
    return out


def completions_folder(source: Path) -> Path | None:
    """The `completions/` folder TRL writes beside a job's output: at PATH (the output folder), or above the
    trainer_state.json or checkpoint a watch was given."""
    for folder in (source, *list(source.parents)[:2]):
        candidate = folder / "completions"
        if candidate.is_dir():
            return candidate
    return None


def keep(batches: list[Completion]) -> list[Completion]:
    """The completions of the first KEEP_FIRST steps and the newest KEEP_LAST steps, oldest first."""
    steps = sorted({c.step for c in batches if c.step is not None})
    if len(steps) <= KEEP_FIRST + KEEP_LAST:
        return batches
    kept = set(steps[:KEEP_FIRST] + steps[-KEEP_LAST:])
    return [c for c in batches if c.step in kept or c.step is None]
