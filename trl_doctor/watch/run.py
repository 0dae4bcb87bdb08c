"""`trl-doctor watch PATH`: judge a job's logged metrics from the outside, once or following the job as it logs.

The history is read once (history.read); with --follow the file is read on from where it ended (a printed log, JSON
lines and TensorBoard event files grow; a trainer_state.json, or a folder's newest checkpoint, is read again when it
changes), each new log judged, until the job logs its summary, a rule fails at `fail_on`, or the user stops it. An
output folder with no log yet (the watch started with the job) is waited on until its first log appears.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl_doctor.errors import InputError
from trl_doctor.types import Status, exit_status


@dataclass
class Watch:
    """What `trl-doctor watch` was asked (the CLI's options, the project config's thresholds)."""

    path: Path
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "fail"
    trainer: str | None = None
    config: Path | None = None
    release: str | None = None
    gpus: int | None = None  # --target's GPU count: what a finding's cost is in GPU-hours
    run: str | None = None  # --run: the run of a store (trackio, wandb, MLflow, TensorBoard's runs/) to judge
    thresholds: dict = field(default_factory=dict)
    preflight: dict = field(default_factory=dict)
    settings: list = field(default_factory=list)


def recipe(path: Path | None) -> dict:
    """The top-level keys of a recipe (YAML or JSON) given with --config: what the job ran with (beta, fp16, ...)."""
    if path is None:
        return {}
    import yaml

    from trl_doctor.context.config import MAX_CONFIG_BYTES

    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"{path}: larger than any recipe")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML or JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a recipe (a mapping of keys to values)")
    return {str(k): v for k, v in data.items()}


def preflight_report(path: Path | None) -> dict:
    """A `trl-doctor check --format json` report's verdicts by rule slug: the watch names them (never-terminating
    names eos-termination's)."""
    if path is None:
        return {}
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {r["rule"]: {"status": r["status"], "message": r["message"]} for r in data["results"]}
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{path}: not a trl-doctor JSON report (`trl-doctor check --format json`)") from None


def context(asked: Watch, history, running: bool = False):
    from trl_doctor.watch.context import WatchContext

    settings = {**getattr(history, "args", {}), **recipe(asked.config)}  # the job's own arguments, a recipe over them
    if asked.gpus and not history.gpus:
        history.gpus = asked.gpus
    interval = settings.get("logging_steps")
    if history.logging_steps is None and isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1:
        history.logging_steps = interval  # a printed log carries no step: the recipe says how many a log covers
    return WatchContext(history, asked.trainer, settings, thresholds=asked.thresholds,
                        preflight=asked.preflight, release=asked.release, running=running)


def judge_once(asked: Watch, history, rules: list, running: bool = False):
    from trl_doctor.watch.judge import judge, report

    ctx = context(asked, history, running)
    return report(ctx, judge(ctx, rules), asked.settings + run_settings(history, asked.run), asked.fail_on)


def run_settings(history, named: str | None) -> list[dict]:
    """The run judged, where the store or folder holds several: named by --run, or the newest (the others listed)."""
    runs, run = history.runs, history.run
    if run is None or len(runs) < 2:
        return []
    if named is not None:
        return [{"setting": "run", "value": run.label(), "source": "command line"}]
    others = ", ".join(r.label() for r in runs if r != run)
    return [{"setting": "run", "value": f"{run.label()}: the newest of {len(runs)} (--run NAME judges another: "
             f"{others})", "source": str(history.source)}]


def follow(asked: Watch, rules: list, show: Callable[[str], None], interval: float = 2.0,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
           idle_exit: float | None = None):
    """Judge PATH's logs as the job writes them; each rule's verdict is shown when it changes. Returns the last
    report and the history it judged: at the job's end (its summary logged), at the first failure at `fail_on`, or
    after `idle_exit` seconds without a new log (None: wait until stopped)."""
    from trl_doctor.watch import history as hist

    source = _first_log(asked.path, clock, sleep, interval, idle_exit, asked.run)
    tail = _StoreTail(source, asked.run) if not isinstance(source, Path) else _Tail(source)
    history = tail.history()
    last: dict[str, str] = {}
    quiet_since = clock()
    report = None
    while True:
        if isinstance(tail, _Tail) and asked.path.is_dir():  # its newest checkpoint's state moves as the job saves
            try:
                newest = hist.find_log(asked.path, asked.run)
            except InputError:
                newest = tail.path
            if newest != tail.path:
                tail = _Tail(newest)
        if tail.grew():
            history = tail.history()
            quiet_since = clock()
            if history.logs:
                report = judge_once(asked, history, rules, running=not history.ended)
                for r in report.results:
                    if _news(last.get(r.id), r.status):
                        show(f"{history.logs[-1].at}: {r.id} {r.rule} {r.status.value}: {r.message}")
                    last[r.id] = r.status
                if history.ended or exit_status(report.results, asked.fail_on):
                    return report, history
        if idle_exit is not None and clock() - quiet_since >= idle_exit:
            if report is None:
                raise InputError(f"{tail.path}: no logged metrics appeared in {idle_exit:g} s")
            return report, history
        sleep(interval)


_ALARM = (Status.WARN, Status.FAIL, Status.ERROR)


def _news(before: Status | None, now: Status) -> bool:
    """Whether a rule's verdict is worth a line: it became a warn, fail or error, or it left one (the job recovered).
    A pass or skip that stays one, or turns into the other, is not news; the report at the end has every verdict."""
    if before == now:
        return False
    return now in _ALARM or before in _ALARM


def _first_log(path: Path, clock, sleep, interval: float, idle_exit: float | None, run: str | None = None):
    """The log to follow in `path` (a tracker's store, or a log file's path); for a folder with none yet (a job that
    has not logged), waiting for it."""
    from trl_doctor.watch import history as hist
    from trl_doctor.watch.stores import Pending, open_store

    start = clock()
    while True:
        try:
            if _begun(path):  # a file its writer has just made (a SQLite database before its header) is waited on
                store = open_store(path)
                return store if store is not None else hist.find_log(path, run)
            raise Pending(f"{path}: nothing in it yet")
        except InputError as exc:
            if path.exists() and not path.is_dir() and not isinstance(exc, Pending):
                raise
            if idle_exit is not None and clock() - start >= idle_exit:
                raise InputError(f"{path}: no log appeared in {idle_exit:g} s (a trainer_state.json, TensorBoard "
                                 "events under runs/)") from None
        sleep(interval)


def _begun(path) -> bool:
    """Whether PATH has something to read: a folder, or a file past SQLite's 100-byte header (shorter, its writer has
    only just made it, and what it is cannot be told yet)."""
    try:
        return not isinstance(path, Path) or path.is_dir() or path.stat().st_size >= 100
    except OSError:
        return False


class _Tail:
    """A log file read on from where it ended: printed lines and JSON lines are appended to; a trainer_state.json is
    rewritten whole at each save (read again when its size or time changes)."""

    def __init__(self, path: Path):
        from trl_doctor.watch import history as hist

        from trl_doctor.watch import tensorboard

        self.path = path
        self.offset = 0
        self.stamp: tuple | None = None
        self.whole = path.name == hist.STATE
        self._history = hist.History(path, "printed")
        self._partial = ""
        self._events = None
        if tensorboard.is_event_file(path):
            self._history = hist.History(path, "tensorboard")
            self._events = tensorboard.reader(self._history, path)

    def grew(self) -> bool:
        try:
            st = self.path.stat()
        except OSError:
            return False
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp == self.stamp:
            return False
        self.stamp = stamp
        if self.whole:
            from trl_doctor.watch import history as hist

            try:
                self._history = hist.read(self.path)
            except InputError:
                return False  # a state being rewritten, or with no training log yet
            return True
        return self._read_on(st.st_size)

    def _read_on(self, size: int) -> bool:
        from trl_doctor.watch import history as hist

        if size < self.offset:  # rotated or truncated: read it again from the start
            self.__init__(self.path)
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(min(size - self.offset, hist.MAX_BYTES))
        self.offset += len(chunk)
        if self._events is not None:
            return self._events.feed(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()  # a line still being written
        before = len(self._history.logs)
        hist.read_lines(self._history, (line.replace("\r", "\n") for line in lines))
        return len(self._history.logs) > before or self._history.ended

    def history(self):
        return self._history


class _StoreTail:
    """A tracker's store, its run read again whenever the store changes (trackio's and MLflow's databases, a wandb
    run's file; a file store or a server at every look). The run is the one `--run` names, else the newest when the
    watch first finds one, and stays that run."""

    def __init__(self, store, run: str | None):
        from trl_doctor.watch import history as hist

        from trl_doctor.watch.stores import where

        self.store, self.run, self.path = store, run, where(store)
        self.stamp: object = object()
        self._history = hist.History(self.path, store.kind)

    def grew(self) -> bool:
        from trl_doctor.watch import stores

        stamp = self.store.stamp()
        if stamp is not None and stamp == self.stamp:
            return False
        self.stamp = stamp
        try:
            run, runs = stores.choose(self.store, self.run)
            history = stores.read_run(self.store, run, runs)
        except InputError:
            if self.run is not None and self._history.logs:
                raise  # the run was read before: what is wrong now is said
            return False  # no run, or no log, yet
        finally:
            self.store.close()
        self.run = run.id
        before = (len(self._history.logs), self._history.ended)
        self._history = history
        return (len(history.logs), history.ended) != before

    def history(self):
        return self._history
