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
from typing import IO, Callable

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
    from trl_doctor.context.config import load_raw

    return load_raw(path)  # check's own reader: a regular file of bounded size, UTF-8, its nesting bounded


def preflight_report(path: Path | None) -> dict:
    """A `trl-doctor check --format json` report's verdicts by rule slug: the watch names them (never-terminating
    names eos-termination's)."""
    if path is None:
        return {}
    from trl_doctor.context.inputs import read_json_file

    data = read_json_file(path, "trl-doctor JSON report", limit=64 * 2**20)  # a regular file, bounded, nesting too
    try:
        return {str(r["rule"]): {"status": str(r["status"]), "message": str(r["message"])} for r in data["results"]}
    except (KeyError, TypeError):
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
    last: dict[str, Status] = {}
    judged = 0  # the logs judged so far
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
            for count in _catch_up(judged, len(history.logs)):
                seen = history.upto(count)
                report = judge_once(asked, seen, rules, running=not seen.ended)
                for r in report.results:
                    if _news(last.get(r.id), r.status):
                        show(f"{seen.logs[-1].at}: {r.id} {r.rule} {r.status.value}: {r.message}")
                    last[r.id] = r.status
                if seen.ended or exit_status(report.results, asked.fail_on):
                    return report, seen
            judged = len(history.logs)
        if idle_exit is not None and clock() - quiet_since >= idle_exit:
            if report is None:
                raise InputError(f"{tail.path}: no logged metrics appeared in {idle_exit:g} s")
            return report, history
        sleep(interval)


# Logs that reach the follower together (a tracker that writes in batches: trackio 0.43 sends its every 0.5 s; a
# loaded machine's follower looks late) are judged one by one, each as the history stood at it, up to this many: a
# finding names the log it was first decided at. A follower started on a job that has logged more is judged as of now.
CATCH_UP = 50


def _catch_up(judged: int, logs: int) -> range:
    """The history lengths to judge now: each log that arrived since the `judged` first, at most CATCH_UP of them (the
    newest); none when nothing arrived (the job's summary alone: the whole history is judged once more)."""
    if logs == 0:
        return range(0)
    if judged == 0 and logs > CATCH_UP:
        return range(logs, logs + 1)
    return range(max(judged + 1, logs - CATCH_UP + 1, 1), logs + 1) if logs > judged else range(logs, logs + 1)


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
    """A log file read on from where it ended, as `tail -F` follows one: printed lines and JSON lines are appended to;
    a log rotated by rename (a new file at the path) is read to its end and then the new file from its start; one
    truncated in place (copytruncate) is read again from its start; the history goes on across both. Memory stays
    bounded whatever the writer does: the file is read in chunks of CHUNK bytes, and a line longer than MAX_LINE (no
    log row is) is dropped up to its newline. A trainer_state.json is rewritten whole at each save (read again when
    its size or time changes)."""

    CHUNK = 4 << 20
    MAX_LINE = 1 << 20

    def __init__(self, path: Path):
        from trl_doctor.watch import history as hist
        from trl_doctor.watch import tensorboard

        self.path = path
        self.stamp: tuple | None = None
        self.whole = path.name == hist.STATE
        self._history = hist.History(path, "printed")
        self._events = None
        if tensorboard.is_event_file(path):
            self._history = hist.History(path, "tensorboard")
            self._events = tensorboard.reader(self._history, path)
        self._file: IO[bytes] | None = None  # the file being read (held open: after a rename it is still the old one)
        self._id: tuple | None = None  # its (device, inode)
        self._partial = ""
        self._dropping = False  # inside a line longer than MAX_LINE, up to its newline

    def grew(self) -> bool:
        try:
            st = self.path.stat()
        except OSError:
            return self._drain() if self._file is not None else False  # moved away, its successor not yet made
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
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
        news = False
        if self._file is not None and self._id != (st.st_dev, st.st_ino):
            news = self._drain()  # rotated by rename: the old file's last lines first
            self._close()
        if self._file is None and not self._open():
            return news
        assert self._file is not None  # open
        if st.st_size < self._file.tell():  # truncated in place: what is there now is new
            self._file.seek(0)
            self._partial, self._dropping = "", False
            if self._events is not None:
                self._events = self._restart_events()
        return self._drain() or news

    def _open(self) -> bool:
        import os

        try:
            self._file = open(self.path, "rb")
        except OSError:
            return False
        st = os.fstat(self._file.fileno())
        self._id = (st.st_dev, st.st_ino)
        return True

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._partial, self._dropping = None, "", False
        if self._events is not None:
            self._events = self._restart_events()

    def _restart_events(self):
        from trl_doctor.watch import tensorboard

        return tensorboard.reader(self._history, self.path)

    def _drain(self) -> bool:
        """Read what the open file holds past where it was read to, a chunk at a time; whether a log (or the job's
        end) arrived."""
        assert self._file is not None  # its callers hold it open
        news = False
        while True:
            try:
                chunk = self._file.read(self.CHUNK)
            except OSError:
                return news
            if not chunk:
                return news
            news = self._feed(chunk) or news

    def _feed(self, chunk: bytes) -> bool:
        from trl_doctor.watch import history as hist

        if self._events is not None:
            return self._events.feed(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        partial = lines.pop()  # a line still being written
        if self._dropping and lines:  # the end of an overlong line: dropped with it
            lines.pop(0)
            self._dropping = False
        if len(partial) > self.MAX_LINE:
            partial, self._dropping = "", True
        self._partial = "" if self._dropping else partial
        before = (len(self._history.logs), self._history.ended)
        hist.read_lines(self._history, (line.replace("\r", "\n") for line in lines))
        return (len(self._history.logs), self._history.ended) != before

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
