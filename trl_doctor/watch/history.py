"""A job's logged metrics, read from what a job leaves: TensorBoard event files (an output folder's `runs/*`, written
at every log: trl_doctor.watch.tensorboard), `trainer_state.json` (an output folder's, a checkpoint's, or the file
itself), a bare JSON list of log rows (`trainer.state.log_history` as people save and share it), a log of the printed
`{'loss': ...}` lines (transformers prints one per log), or JSON lines.

Every file under a watched folder is hostile: it is read as text with a size limit, parsed with `json` or
`ast.literal_eval` (never run), and a file that is not a log is refused in one line naming it (InputError, exit 2).

The metric names are the ones the release that wrote the log used; `canonical` maps the renamings of one quantity
(`completion_length` before `completions/mean_length`, `rewards/<f>` before `rewards/<f>/mean`, a tracker's `train/`
prefix) onto today's name, so the rules read one name per quantity.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from trl_doctor.errors import InputError
from trl_doctor.facts.metrics import Point

MAX_BYTES = 1 << 30  # a 20,000-step trainer_state.json is ~20 MB; past 1 GiB it is not a log
STATE = "trainer_state.json"

# where a renaming happened, today's name (trl_doctor.facts.metrics reads these)
_RENAMED = {
    "completion_length": "completions/mean_length",  # trl <= 0.16
    "clip_ratio": "clip_ratio/region_mean",  # trl 0.17-0.19: one clip ratio
}
_REWARD_MEAN = re.compile(r"^rewards/(?P<f>[^/]+)$")  # trl <= 0.16: rewards/<f> is the mean


class Log(NamedTuple):
    """One logged row: its number in the log (1-based), the optimizer step when the log says it, the metrics, and
    how a finding names it (`at`: `step 40`, or `log 4` for a printed log that carries no step)."""

    number: int
    step: int | None
    values: dict[str, float]
    at: str


@dataclass
class History:
    """The training rows of one job, oldest first, with what the file says of the run (max_steps, logging_steps)."""

    source: Path
    kind: str  # "trainer_state", "printed" or "jsonl"
    logs: list[Log] = field(default_factory=list)
    max_steps: int | None = None
    logging_steps: int | None = None
    ended: bool = False  # the job logged its summary (train_runtime): no steps remain
    args: dict[str, Any] = field(default_factory=dict)  # the job's own arguments, where the log holds them (TensorBoard)
    gpus: int | None = None  # the GPUs the job trains on (the callback's world size on CUDA, watch --target)
    run: Any = None  # the run judged, where the log is one of several (trl_doctor.watch.stores.Run)
    runs: list = field(default_factory=list)  # every run of the store or folder, oldest first
    # the job's completions where at hand (trl_doctor.watch.completions): its first batches and its newest
    completions: list = field(default_factory=list)
    media: Path | None = None  # where a tracker keeps the files its logged tables point to (wandb's run files)
    _tables: set = field(default_factory=set)  # the tables taken, by (step, hash or path)
    _columns: dict[str, list] = field(default_factory=dict)  # name -> its Points, made when first read
    _names: set[str] = field(default_factory=set)

    def names(self) -> set[str]:
        return set(self._names)

    def steps_per_log(self) -> int:
        """The optimizer steps one log covers: the commonest gap between the newest logged steps (what the job did:
        TRL's PPOTrainer logs every update whatever its logging_steps says), else logging_steps where the job says it
        (its state, its arguments, a recipe: a printed log carries no step), else 1."""
        recent = [log.step for log in self.logs[-51:] if log.step is not None]
        gaps = sorted(b - a for a, b in zip(recent, recent[1:]) if b > a)
        if gaps:
            return gaps[len(gaps) // 2]
        if self.logging_steps and self.logging_steps >= 1:
            return int(self.logging_steps)
        if len(recent) == 1 and self.logs[0].number == 1 and 1 <= recent[0] <= 1000:
            return recent[0]  # a job's first log comes logging_steps steps after step 0
        return 1

    def view(self, first: int, last: int) -> "History":
        """The first `first` and the last `last` logs (all of them when there are no more): what a job's watch judges
        each log, so that its cost does not grow with the run (a failure is flagged within `last` logs of its start)."""
        if len(self.logs) <= first + last:
            return self
        seen = History(self.source, self.kind, self.logs[:first] + self.logs[-last:], self.max_steps,
                       self.logging_steps, self.ended)
        seen._names, seen.args, seen.gpus, seen.run, seen.runs = self._names, self.args, self.gpus, self.run, self.runs
        seen.completions = self.completions
        return seen

    def upto(self, count: int) -> "History":
        """The history as it stood when its `count`-th log arrived (the whole of it for its own length): what a
        follower judges for each of several logs that reached it at once, so a finding names the log it was first
        decided at, not the newest of the batch."""
        if count >= len(self.logs):
            return self
        seen = History(self.source, self.kind, self.logs[:count], self.max_steps, self.logging_steps, False)
        seen._names, seen.args, seen.gpus, seen.run, seen.runs = self._names, self.args, self.gpus, self.run, self.runs
        last = self.logs[count - 1].step if count else None  # the completions logged by then
        seen.completions = [c for c in self.completions if last is None or c.step is None or c.step <= last]
        return seen

    def column(self, name: str) -> list:
        """The metric's values (trl_doctor.facts.metrics.Point), oldest first: made when a rule first reads it and
        extended with the rows added since, so a rule reads a column in time proportional to what is new."""
        if name not in self._names:
            return []
        points = self._columns.setdefault(name, [])
        done = points[-1].number if points else 0
        if not done or (done <= len(self.logs) and self.logs[done - 1].number == done):
            start = done  # the whole log: log k is at index k - 1
        else:  # a view: its logs are not numbered from 1 on
            start = next((i for i, log in enumerate(self.logs) if log.number > done), len(self.logs))
        new = tuple.__new__  # Point(...) without its Python-level __new__: 240k of them for a 20,000-step log
        points.extend([new(Point, (log.at, log.number, log.step, value)) for log in self.logs[start:]
                       if (value := log.values.get(name)) is not None])
        return points

    def take_args(self, args: Any) -> None:
        """The job's own TrainingArguments, as its tracker keeps them (TensorBoard's args text, trackio's and wandb's
        run config, MLflow's params): its max_steps and logging interval (a job stopped early still had steps to go),
        and its settings for the rules (beta, mask_truncated_completions...). Strings a tracker stored read back."""
        if not isinstance(args, dict):
            return
        kept = {}
        for key, value in list(args.items())[:2000]:
            if isinstance(key, str) and not key.startswith("_"):
                value = _setting(value)
                if isinstance(value, (int, float, str, bool)):
                    kept[key] = value
        self.args = kept
        steps, every = kept.get("max_steps"), _int(kept.get("logging_steps"))
        if isinstance(steps, int) and not isinstance(steps, bool) and 0 < steps < 1 << 62 and self.max_steps is None:
            self.max_steps = steps
        if (every is not None and every >= 1
                and str(kept.get("logging_strategy", "steps")).split(".")[-1].lower() == "steps"
                and self.logging_steps is None):
            self.logging_steps = int(every)

    def amend_last(self, values: dict[str, float]) -> None:
        """Add values to the newest log (a TensorBoard step whose scalars arrived in two reads)."""
        last = self.logs[-1]
        self.logs[-1] = last._replace(values={**last.values, **values})
        self._names.update(values)
        self._columns.clear()  # made again from the logs when next read

    @staticmethod
    def metric_of(key: str) -> str:
        """The metric a logged key is (its canonical name), "" for a key that is none (a step, an evaluation's)."""
        name = _KEYS.get(key)
        return _metric(key) if name is None else name

    def add_metrics(self, values: dict[str, float], step: int) -> Log | None:
        """Append a log whose values are already metrics (floats under names `metric_of` gave): a TensorBoard step,
        read without the row checks `add` makes of a logged dict. None when it holds only bookkeeping."""
        if not values.keys() - _BOOKKEEPING:
            return None
        log = Log(len(self.logs) + 1, step, values, f"step {step}")
        self.logs.append(log)
        self._names.update(values)
        return log

    def add(self, raw: dict[str, Any], step: int | None = None) -> Log | None:
        """Append one logged dict (a training row; an eval or summary row is not one): None when it is not. A
        tracker's row holding TRL's `completions` table adds them to `completions`."""
        if isinstance(raw, dict) and (isinstance(raw.get("completions"), dict) or "completions/_type" in raw):
            self._take_table(raw)
        values = training_values(raw)
        if values is None:
            if isinstance(raw, dict) and ("train_runtime" in raw or self.logs and _summary_left(raw)):
                self.ended = True
            return None
        if step is None:
            # a tracker's row carries the trainer's step as train/global_step (its own `step` counts its log calls)
            s = raw.get("train/global_step", raw.get("global_step", raw.get("step")))
            step = _step(s)
        number = len(self.logs) + 1
        log = Log(number, step, values, f"step {step}" if step is not None else f"log {number}")
        self.logs.append(log)
        self._names.update(values)
        return log


    def _take_table(self, raw: dict) -> None:
        from trl_doctor.watch.completions import from_table_value, keep

        at = _step(raw.get("train/global_step", raw.get("global_step", raw.get("step", raw.get("_step")))))
        table = raw.get("completions")
        if not isinstance(table, dict):  # wandb's record of it, flattened: completions/_type, completions/path, ...
            table = {k[len("completions/"):]: v for k, v in raw.items() if isinstance(k, str) and k.startswith("completions/")}
        mark = table.get("sha256") or table.get("path")
        if mark is not None:  # the same table logged twice (TRL's last log, and the summary's)
            if (at, mark) in self._tables:
                return
            self._tables.add((at, mark))
        found = from_table_value(table, at, self.media)
        if found:
            self.completions = keep(self.completions + found)

    def take_completions(self, found: list) -> None:
        """Completions read beside the log (TRL's parquet files) or from the live trainer."""
        from trl_doctor.watch.completions import keep

        if found:
            self.completions = keep(self.completions + list(found))


def _step(value: Any) -> int | None:
    """A row's logged step as an int; None for what is none (a bool, inf, NaN, an integer past any job's steps)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    step = int(value)
    return step if -(1 << 62) < step < 1 << 62 else None


_LEFT_OF_SUMMARY = frozenset(("train/epoch", "train/global_step", "step", "timestamp", "_step", "_runtime",
                              "_timestamp"))


def _summary_left(raw: dict) -> bool:
    """What transformers' trackio and wandb callbacks log of the job's summary once its single-value scalars
    (train_runtime...) are kept out: {"train/epoch": e, "train/global_step": s}, a row of nothing else."""
    return "train/epoch" in raw and "train/global_step" in raw and raw.keys() <= _LEFT_OF_SUMMARY


def _setting(value: Any) -> Any:
    """A setting as a tracker may store it: MLflow's params are strings ("10", "0.04", "True", "None")."""
    if not isinstance(value, str) or len(value) > 200:
        return value
    text = value.strip()
    if text in ("True", "False", "true", "false"):
        return text.lower() == "true"
    if text in ("None", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
        return number if math.isfinite(number) else value
    except ValueError:
        return value


_CANONICAL: dict[str, str] = {}


def canonical(name: str) -> str:
    """Today's name of a logged quantity."""
    found = _CANONICAL.get(name)
    if found is None:
        found = _CANONICAL[name] = _canonical(name) if len(_CANONICAL) < 100_000 else name
    return found


def _canonical(name: str) -> str:
    if name.startswith("train/"):
        name = name[len("train/"):]
    if name in _RENAMED:
        return _RENAMED[name]
    m = _REWARD_MEAN.match(name)
    if m:
        return f"rewards/{m['f']}/mean"
    return name


_SUMMARY = frozenset(("train_runtime", "train_loss", "train_samples_per_second", "total_flos"))
# not a training metric: an evaluation's, a tracker's own bookkeeping (wandb's _step, _runtime, _timestamp), TRL's
# profiling timings (logged to wandb and trackio as rows of their own), a tracker's system metrics
_NOT_METRICS = ("eval_", "eval/", "test/", "_", "profiling/", "system/", "train/profiling/")
# a row holding only these is not a log (the trackers' rows at a job's end: {"train/epoch", "train/global_step"})
_BOOKKEEPING = frozenset(("epoch",))
_KEYS: dict[Any, str] = {}  # a logged key -> the metric it is ("" for a key that is none: step, eval_*)
_PLANS: dict[tuple, tuple] = {}  # a row's keys, in order -> its (key, metric) pairs
_BIG = 1 << 1000  # an integer past this is no float (float() raises): the slow path reads it as no value


def training_values(raw: dict[str, Any]) -> dict[str, float] | None:
    """The numeric metrics of one training log row (names made canonical; numbers printed as strings read back),
    or None for a row that is not a training log: an evaluation's (`eval_*`), the run's summary (`train_runtime`)."""
    if not isinstance(raw, dict) or not _SUMMARY.isdisjoint(raw):
        return None
    # the common row: the keys of a row met before, in the same order, each a JSON number (a bool, a string or a new
    # set of keys falls to the loop below)
    try:
        plan = _PLANS.get(tuple(raw))
    except TypeError:
        plan = None
    if plan is None and len(_PLANS) < 1_000 and all(isinstance(k, str) for k in raw):
        plan = _PLANS[tuple(raw)] = tuple((k, m) for k in raw if (m := _KEYS.get(k) if k in _KEYS else _metric(k)))
    if plan is not None:
        out = {}
        for key, name in plan:
            value = raw[key]
            kind = type(value)
            if kind is float:
                out[name] = value
            elif kind is int and -_BIG < value < _BIG:
                out[name] = float(value)
            else:
                break
        else:
            return out if out.keys() - _BOOKKEEPING else None
    out = {}
    for key, value in raw.items():
        name = _KEYS.get(key) if isinstance(key, str) else None
        if name is None:
            name = _metric(key)
        if not name:
            continue
        number = _number(value)
        if number is not None:
            out[name] = number
    return out if out.keys() - _BOOKKEEPING else None


def _metric(key: Any) -> str:
    name = "" if not isinstance(key, str) or key.startswith(_NOT_METRICS) or key in ("step", "epoch_step") \
        else canonical(key)
    if name in ("global_step", "step"):  # a tracker's copy of the step (train/global_step): the row's step
        name = ""
    if len(_KEYS) < 100_000:
        _KEYS[key] = name
    return name


def _number(value: Any) -> float | None:
    """A logged value as a float; None where it is none (a bool, None, text) or no float holds it (an integer of
    hundreds of digits: the job's text, read as no value rather than a crash)."""
    if type(value) is float:
        return value
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str) and len(value) < 100:  # transformers 5 prints numbers as strings: {'loss': '0.1234'}
            return float(value.strip())
    except (ValueError, OverflowError):
        return None
    return None


# -- reading ------------------------------------------------------------------------------------------------------
def find_log(path: Path, run: str | None = None) -> Path:
    """The file to read for PATH: the file itself, or for a folder the TensorBoard event file of the run `run` names
    (its folder under runs/), else of the newest run (written at every log, so the freshest while the job runs),
    else its trainer_state.json (the folder's own, else its newest checkpoint's); InputError naming PATH when there
    is none."""
    if path.is_dir():
        from trl_doctor.watch.tensorboard import newest_events

        events = newest_events(path, run)
        if events is not None:
            return events
        own = path / STATE
        checkpoints = sorted((p for p in path.glob("checkpoint-*") if (p / STATE).is_file()),
                             key=lambda p: _step_of(p.name))
        candidates = ([own] if own.is_file() else []) + [p / STATE for p in checkpoints]
        if not candidates:
            raise InputError(f"{path}: no {STATE} in this folder or its checkpoint-* folders, and no TensorBoard "
                             "events under runs/ (give the job's output folder, a checkpoint, a trainer_state.json, "
                             "TensorBoard's log folder or a log of its printed lines)")
        return max(candidates, key=lambda p: (_logged_steps(p), p.stat().st_mtime))
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    return path


def _step_of(name: str) -> int:
    """checkpoint-N's N; -1 for a folder whose tail is not ASCII digits (`checkpoint-③` is str.isdigit's, not int's)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) < 19 else -1


def _logged_steps(path: Path) -> int:
    """The checkpoint's step from its folder name (the output folder's own state counts as the newest)."""
    return 1 << 62 if path.parent.name and not path.parent.name.startswith("checkpoint-") else _step_of(path.parent.name)


def read(path: str | Path, run: str | None = None) -> History:
    """The History in the log `find_log` finds at PATH (a tracker's store is trl_doctor.watch.source's to read)."""
    from trl_doctor.watch import tensorboard

    path = find_log(Path(path), run)
    if tensorboard.is_event_file(path):
        history = tensorboard.read_into(History(path, "tensorboard"), path, MAX_BYTES)
        history.run, history.runs = tensorboard.runs_of(path)
        return history
    history = _read_file(path)
    from trl_doctor.watch.completions import completions_folder, parquet_folder

    folder = completions_folder(path.parent)
    if folder is not None:
        history.take_completions(parquet_folder(folder))
    return history


def _read_file(path: Path) -> History:
    text = _text(path)
    stripped = text.lstrip()
    if stripped.startswith("{") and '"log_history"' in stripped[:2_000_000]:
        return _from_state(path, text)
    if stripped.startswith("["):
        return _from_rows(path, text)
    if path.suffix.lower() == ".csv":
        return _from_csv(path, text)
    history = History(path, "printed")
    history.kind = read_lines(history, text.splitlines())
    if not history.logs:
        raise InputError(f"{path}: no logged metrics found (expected a {STATE}, or lines like "
                         "{'loss': 0.12, 'grad_norm': 0.5, ...} as transformers prints them, or JSON lines)")
    return history


def _text(path: Path) -> str:
    from trl_doctor.watch import read_bytes

    return read_bytes(path, MAX_BYTES).decode("utf-8", errors="replace")


def _from_state(path: Path, text: str) -> History:
    try:
        state = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    logs = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(logs, list):
        raise InputError(f"{path}: no log_history list: not a {STATE} a transformers Trainer wrote")
    history = History(path, "trainer_state", max_steps=_int(state.get("max_steps")),
                      logging_steps=_int(state.get("logging_steps")))
    for row in logs:
        if isinstance(row, dict):
            history.add(row)
    if not history.logs:
        raise InputError(f"{path}: its log_history holds no training log yet (the job logs every logging_steps steps)")
    return history


def _from_rows(path: Path, text: str) -> History:
    """A bare JSON list of log rows: `trainer.state.log_history` dumped as it is (how people save and share it)."""
    try:
        rows = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    history = History(path, "log_history")
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict):
            history.add(row)
    if not history.logs:
        raise InputError(f"{path}: a JSON list without a training log row (expected log_history's rows: "
                         "{\"loss\": ..., \"step\": ...})")
    return history


_STEP_COLUMNS = ("step", "Step", "train/global_step", "global_step", "_step")
_EXPORT = re.compile(r"^.+ - (?P<metric>.+?)(?P<bound>__MIN|__MAX)?$")  # wandb's "Download CSV": "<run> - <metric>"


def _from_csv(path: Path, text: str) -> History:
    """A CSV of log rows: `pandas.DataFrame(trainer.state.log_history).to_csv(...)` as people save it (an index column,
    empty cells where a row lacks a metric), or wandb's "Download CSV" of a run's charts (`Step`, `<run> - <metric>`
    columns, their `__MIN`/`__MAX` left out). A row's step is its step column's."""
    import csv

    try:
        reader = csv.reader(text.splitlines())
        header = next(reader, None)
    except csv.Error as exc:
        raise InputError(f"{path}: not a CSV file: {exc}") from None
    if not header or len(header) > 10_000:
        raise InputError(f"{path}: a CSV file without a header row of metric names")
    names: list[str | None] = []
    for column in header:
        column = column.strip()
        m = _EXPORT.match(column)
        if m and m["bound"]:
            names.append(None)
        else:
            names.append(m["metric"] if m else column)
    step_at = next((i for i, n in enumerate(names) if n in _STEP_COLUMNS), None)
    history = History(path, "csv")
    try:
        for cells in reader:
            row = {n: c for n, c in zip(names, cells) if n and c.strip() != "" and n not in _STEP_COLUMNS}
            step = _number(cells[step_at]) if step_at is not None and step_at < len(cells) else None
            history.add(row, step=int(step) if step is not None and math.isfinite(step) else None)
    except csv.Error as exc:
        raise InputError(f"{path}: not a CSV file: {exc}") from None
    if not history.logs:
        raise InputError(f"{path}: a CSV file without a training log row (expected columns such as loss, reward, "
                         "step)")
    return history


def _int(value: Any) -> int | None:
    return _step(value)


_DICT = re.compile(r"\{['\"][^{}]*\}")
_BARE = re.compile(r"(?<![\w'\"])(-?)(nan|inf|NaN|Infinity|-Infinity)(?![\w'\"])")


def read_lines(history: History, lines: Iterable[str]) -> str:
    """Add every logged dict found in `lines` (transformers' printed dicts, possibly after a progress bar on the same
    line, or JSON lines) to `history`; returns the kind: "jsonl" when the rows were JSON, else "printed"."""
    kind = "printed"
    for line in lines:
        for match in _DICT.finditer(line):
            row = parse_row(match.group(0))
            if row is not None and _logged_row(row):
                if match.group(0).startswith('{"'):
                    kind = "jsonl"
                history.add(row)
    return kind


# what a trainer's log row holds (transformers' Trainer.log adds `epoch` to every row it logs in training; TRL's
# trainers and their subclasses log these names): a dict printed among the logs that holds none of them is the job's
# other output, a warning's or a tokenizer's ("Updated tokens: {'<think>': 151665}"), not a log
_LOG_KEYS = frozenset(("loss", "grad_norm", "learning_rate", "epoch", "reward", "reward_std", "kl", "entropy",
                       "num_tokens", "frac_reward_zero_std", "completions/mean_length", "step", "global_step"))
_LOG_PREFIXES = ("rewards/", "completions/", "clip_ratio", "objective/", "policy/", "val/", "loss/", "train/",
                 "eval_", "eval/", "train_")


def _logged_row(row: dict) -> bool:
    """Whether a dict found in a printed log is one of the trainer's log rows (a training, evaluation or summary
    row), by its keys."""
    for key in row:
        if isinstance(key, str) and (canonical(key) in _LOG_KEYS or key.startswith(_LOG_PREFIXES)):
            return True
    return False


def parse_row(text: str) -> dict | None:
    """One printed or JSON dict as data (never evaluated as code): `nan`/`inf` as printed by Python read as floats."""
    if len(text) > 100_000:
        return None
    if text.startswith('{"'):
        try:
            row = json.loads(text)
            return row if isinstance(row, dict) else None
        except ValueError:
            pass
    marked = _BARE.sub(lambda m: f"'{m.group(1)}{m.group(2).lower().replace('infinity', 'inf')}'", text)
    try:
        row = ast.literal_eval(marked)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return row if isinstance(row, dict) else None
