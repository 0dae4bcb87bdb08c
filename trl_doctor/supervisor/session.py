"""The printing process's side of a check: start the one heavy worker, read its results as they stream in,
and supervise it. This module imports no torch, transformers or TRL.

Isolation: the worker runs the user's code (reward functions, chat templates, the trainer). When the
trainer run outlives --smoke-timeout the worker is killed; when the worker dies (a segfault, the kernel's
out-of-memory killer) the results it already streamed are kept. A run that hung or died is handed, as a
`RunResult`, to a fresh worker that reports the rules still to run (the smoke step then fails with the
cause); a worker that dies outside the trainer run gives the rule it was running an `error` and the next
worker goes on after it.

The user's code (importing a reward module, calling a reward function, rendering a chat template) runs inside
the worker's fence (trl_doctor.runtime.fence): a fence that outlives its limit (--user-code-timeout) is stopped, and a
worker that dies inside a fence gives the rule it was running a `fail` naming the code and the cause; the next
worker is told (`Request.failed`) not to run that code again. What the worker prints goes to its log, which is
kept under LOG_CAP bytes (its start and its end).
"""

from __future__ import annotations

import dataclasses
import os
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trl_doctor.supervisor import causes as _causes
from trl_doctor.supervisor import guard as _guard
from trl_doctor.supervisor import interrupt as _interrupt
from trl_doctor.runtime import tmp as _tmp
from trl_doctor.runtime import tree as _tree
from trl_doctor.errors import InputError
from trl_doctor.protocol import (CHANNEL_LOST, BadInput, CaptureAgain, Captured, Done, Message, Request, RuleResult, RuleStart,
                                 TrainerRun, TrainerRunEnd, TrainerStage, UserCode, UserCodeEnd, WillRun, read_message)
from trl_doctor.types import Result, Status
from trl_doctor.options import Options

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters in what the user's code printed
POLL_S = 0.25  # how often the supervisor looks at the clock while the worker is quiet
LOG_TAIL_LINES = 15
FENCE_TAIL_LINES = 30  # what the user's code printed, or the Python stack of its crash (the innermost frame first)
LOG_TAIL_BYTES = 64 * 1024  # a log tail is read from at most this many bytes at the log's end
LOG_LINE_CHARS = 500  # a longer line of a log tail keeps its start and its end
LOG_CAP = 16 << 20  # a worker's log beyond this many bytes keeps its first and last LOG_KEEP bytes
LOG_KEEP = 1 << 20
MAX_WORKERS = 6  # fresh workers one check may start after deaths (each death moves the check forward)
EXIT_GRACE_S = 1.0  # a worker whose channel closed has this long to exit before it counts as still running


@dataclass
class _Run:
    """The trainer run in progress, as the worker announced it."""

    details: dict
    limit: float
    started: float
    log_offset: int
    trainer: str = ""
    stage: str | None = None


@dataclass
class _Fence:
    """User code the worker announced it runs (trl_doctor.runtime.fence)."""

    what: str
    key: str
    limit: float
    started: float
    log_offset: int
    timed_out: bool = False
    froze: bool = False  # it stopped the printing process (SIGSTOP), which the guard resumed
    began: float | None = None  # the worker's clock (UserCode.at), and when it ended (UserCodeEnd.at)
    ended: float | None = None


@dataclass
class _Watch:
    """What the supervisor knows about one worker."""

    current: str | None = None  # the rule it is running
    heard: bool = False  # it sent at least one message
    run: _Run | None = None
    fences: list[_Fence] = field(default_factory=list)  # the user code running now, innermost last
    done: bool = False
    captured: Captured | None = None  # a launch command's script built its trainer
    capture_again: CaptureAgain | None = None  # the script is to be captured again at world size 1 (a fresh worker)
    on_capture: Callable[[dict], None] | None = None
    on_will_run: Callable[[dict], None] | None = None
    buffer: bytes = b""
    results: list[Result] = field(default_factory=list)
    broken: str | None = None  # a channel line that is not the protocol's: what it was and why it was refused
    channel_closed: bool = False  # the channel closed while the worker still ran (its code closed the descriptor)
    froze: bool = False  # outside the user's code, something in the worker stopped the printing process (SIGSTOP)
    closed: list[_Fence] = field(default_factory=list)  # the user code that ended since the supervisor last looked


class Worker:
    """A started worker: its channel (read end), its log file, how to stop it (its whole process tree: the worker runs
    in a process group of its own, every process it starts carries its check's tag, see trl_doctor.runtime.tree), and its
    exit status."""

    def __init__(self, channel: int, log_path: Path, proc: Any, tag: str | None = None):
        self.channel = channel
        self.log_path = log_path
        self.proc = proc  # a subprocess.Popen, or the fork server's handle with the same kill/wait/poll
        self.tag = tag
        self.oom_before = _causes.oom_kills()
        self.oom_after: int | None = None
        self.ended: list[str] = []  # processes of the check ended after the worker (described)

    def kill(self) -> None:
        """Stop the worker and its descendants now (they are still its descendants while it lives: it is a subreaper)."""
        if self.proc.poll() is None:
            for pid in _tree.descendants(self.proc.pid):
                _kill(pid)
            _tree.end(self.proc.pid, None)  # its process group
            self.proc.kill()

    def finish(self, graceful: bool) -> None:
        """Let a worker that reported `done` end its own processes and exit; stop any other at once. Then end every
        process left of the check (its group, its tag) and close the channel."""
        if graceful:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.proc.wait()
        self.oom_after = _causes.oom_kills()
        self.ended = [_tree.describe(pid) for pid in _tree.tagged(self.tag)] if self.tag else []
        _tree.end(self.proc.pid, self.tag)
        self.close()

    def wait(self) -> int:
        return self.proc.wait()

    def how(self, code: int | None) -> str:
        """How the worker ended, in words (the kernel's OOM record read around it)."""
        return _causes.how(code, self.oom_before, self.oom_after)

    def close(self) -> None:
        try:
            os.close(self.channel)
        except OSError:
            pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except OSError:
        pass


def _pipe() -> tuple[int, int]:
    """The channel: a pipe whose ends are never descriptors 0-2 (a CLI started with a standard stream closed would
    otherwise hand the worker its channel as its stdout) and are inherited by nothing but the worker."""
    import fcntl

    ends = []
    for fd in os.pipe():
        if fd < 3:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = moved
        ends.append(fd)
    return ends[0], ends[1]


def worker_environment(folder: "_tmp.CheckFolder | None") -> dict[str, str]:
    """The worker's environment: the caller's, the check's tag, and its TMPDIR inside the check's folder (what the
    user's code writes to a temporary file goes when the check ends)."""
    env = dict(os.environ)
    if folder is not None:
        env.update({_tree.TAG_ENV: folder.tag, _tmp.DIR_ENV: str(folder.path), "TMPDIR": str(folder.tmp)})
    return env


def start_worker(request: Request, log_path: Path, folder: "_tmp.CheckFolder | None" = None) -> Worker:
    """A fresh worker for `request`, in a session of its own: forked from a warm fork server when one serves this
    environment, else a new `python -P -m trl_doctor.worker.main` process (-P: no folder of the user's, such as a `json.py`
    beside the config, shadows a module the worker imports)."""
    from trl_doctor.supervisor import forkserver as _forkserver
    from trl_doctor.worker.main import CHANNEL_ENV

    read_end, write_end = _pipe()
    env = worker_environment(folder)
    try:
        with open(log_path, "ab") as log:
            proc: Any = _forkserver.spawn(request, write_end, log.fileno(), env)  # a Popen, or the handle (see Worker)
            if proc is None:
                env = _forkserver.without_server(env)
                env.update({CHANNEL_ENV: str(write_end), "PYTHONUNBUFFERED": "1"})
                proc = subprocess.Popen(safe_python("trl_doctor.worker.main"), stdin=subprocess.PIPE, stdout=log,
                                        stderr=subprocess.STDOUT, pass_fds=(write_end,), env=env,
                                        start_new_session=True)
                try:
                    proc.stdin.write(request.to_json().encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass  # it died while starting: its status and log say why
    finally:
        os.close(write_end)
    return Worker(read_end, log_path, proc, folder.tag if folder is not None else None)


def safe_python(module: str) -> list[str]:
    """`python -P -m MODULE`: -P (Python 3.11+) keeps the current folder off sys.path; on 3.10 the same by hand."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", f"import sys; del sys.path[0]; import runpy; runpy.run_module({module!r}, "
                                  "run_name='__main__', alter_sys=True)"]


def run_check(config: Path | None, rules: list, options: Options, on_result: Callable[[Result], None] | None = None,
              on_progress: Callable[[str], None] | None = None,
              on_capture: Callable[[dict], None] | None = None,
              on_will_run: Callable[[dict], None] | None = None) -> list[Result]:
    """Every rule's Result, in run order; `on_result` sees each as soon as it is known. Raises InputError, and
    KeyboardInterrupt (trl_doctor.supervisor.interrupt.Stopped for SIGTERM/SIGHUP) after ending the worker's processes and
    removing the check's folder.

    With `options.launch` (a launch command) there is no config file: the worker runs the command until its script
    builds the trainer, and `on_capture` sees what was captured (once, before any result). `on_will_run` sees what
    will run (trl_doctor.facts.launch.will_run), once, before any result, where the worker can say.

    `on_result` may raise trl_doctor.supervisor.failfast.Stopped (--fail-fast): the worker is stopped at once, wherever it is,
    and every rule not reported yet is a `skip` "not run: --fail-fast"."""
    from trl_doctor.registry import run_order

    from trl_doctor.supervisor import failfast as _failfast

    check = _Check(run_order(rules), options, on_result, on_progress, on_capture, on_will_run)
    with _interrupt.stop_on_signals(), _guard.guarded(), _tmp.check_folder() as folder:
        try:
            for attempt in range(MAX_WORKERS):
                if check.run_worker(config, folder, attempt):
                    break
            else:
                check.missing(f"not run: the worker died {MAX_WORKERS} times in this check")
        except _failfast.Stopped:  # --fail-fast: run_worker has already stopped the worker's whole tree
            for r in check.ordered:
                if r.id not in check.results:
                    check.accept(_failfast.not_run(r))
    return check.ordered_results()


class _Check:
    """One check's progress across its workers: the results so far, and what the next worker is told."""

    def __init__(self, ordered: list, options: Options, on_result, on_progress, on_capture, on_will_run=None):
        self.ordered, self.options = ordered, options
        self.by_id = {r.id: r for r in ordered}
        self.results: dict[str, Result] = {}
        self.handed: dict | None = None  # a trainer run that hung or died, for the next worker
        self.failed: dict[str, str] = {}  # user code that ended a worker: {fence key: cause}, for the next workers
        self.on_result, self.on_progress, self.on_capture = on_result, on_progress, on_capture
        self.on_will_run = on_will_run

    def accept(self, r: Result) -> None:
        self.results[r.id] = r
        if self.on_result is not None:
            self.on_result(r)

    def ordered_results(self) -> list[Result]:
        return [self.results[r.id] for r in self.ordered if r.id in self.results]

    def _will_run(self, plan: dict) -> None:
        """The first worker's word on what will run; a later worker's (a resumed check) is not repeated."""
        seen, self.on_will_run = self.on_will_run, None
        if seen is not None:
            seen(plan)

    def missing(self, message: str, worker: "Worker | None" = None, code: int | None = None) -> None:
        """Every rule not reported yet is an `error` saying why: a report with rules missing is never a pass."""
        for r in self.ordered:
            if r.id not in self.results:
                self.accept(_died(r, code, worker, message))

    def next_victim(self, watch: _Watch) -> str:
        return watch.current or next(r.id for r in self.ordered if r.id not in self.results)

    def run_worker(self, config: Path | None, folder: _tmp.CheckFolder, attempt: int) -> bool:
        """Run one worker to its end; whether the check is over."""
        opts = dataclasses.replace(self.options, trainer_run=self.handed) if self.handed else self.options
        request = Request(str(Path(config).resolve()) if config is not None else "", tuple(r.id for r in self.ordered),
                          opts, done=tuple(self.results), failed=dict(self.failed))
        worker = start_worker(request, folder.path / f"worker-{attempt}.log", folder)
        watch = _Watch(on_capture=self.on_capture, on_will_run=self._will_run)
        try:
            _supervise(worker, watch, self.accept, self.on_progress, self.by_id, _capture_limit(self.options))
        finally:
            with _interrupt.held():
                worker.finish(graceful=watch.done and not watch.broken)
        if watch.captured is not None:
            self.on_capture = None  # a fresh worker captures again; the report shows the first capture
        if watch.capture_again is not None and watch.captured is None and self.options.one_process_why is None:
            self.options = dataclasses.replace(self.options, one_process_why=watch.capture_again.why)
            return False  # the next worker runs the script at world size 1
        froze = watch.froze or any(f.froze for f in watch.fences)
        if len(self.results) == len(self.ordered) and not froze:
            return True
        if watch.done and not watch.broken and not froze:
            self.missing("not reported: the check's worker said it was done without this rule's result", worker)
            return True
        return self._after_death(worker, watch)

    def _after_death(self, worker: "Worker", watch: _Watch) -> bool:
        """Account for a worker that ended before it was done; whether the check is over."""
        code = worker.wait()
        if watch.fences and not (watch.run is not None and watch.run.details.get("timed_out")):
            fence = watch.fences[-1]  # the user's code ended the worker, broke its channel, or overran its limit
            result = _fenced(self.by_id[self.next_victim(watch)], fence, _cause(watch, code, worker), worker)
            self.failed[fence.key] = result.message
            self.accept(result)
            return False
        if watch.run is not None and not (watch.broken or watch.froze):  # the trainer run hung or died: the next worker reports it
            self.handed = _stopped_run(watch.run, code, worker)
            return False
        if self.options.launch is not None and watch.captured is None:  # the script ended the process itself
            raise InputError(_ended_before_trainer(worker, code))
        if not watch.heard:  # it died before it said anything: a broken environment, not one rule's doing
            self.missing(f"not run: the check's worker process died at start-up ({worker.how(code)}); its log is in "
                         "the details", worker, code)
            return True
        self.accept(_died(self.by_id[self.next_victim(watch)], code, worker, _death(watch, code, worker)))
        return False


def _ended_before_trainer(worker: "Worker", code: int | None) -> str:
    """A launch whose script ended its process (os._exit, a signal, the OOM killer) before constructing a trainer:
    nothing to judge, so the one line of exit 2, with the script's last output."""
    last = next((line for line in reversed(_tail(worker.log_path, 0).splitlines()) if line.strip()), "")
    said = f"; its last output: {last.strip()[:200]}" if last else ""
    return (f"the launch command's script ended its process ({worker.how(code)}) before constructing a TRL trainer "
            f"(os._exit, or a signal): there is no trainer to check{said}")


def _cause(watch: _Watch, code: int | None, worker: "Worker") -> str:
    """Why the worker ended, in the words of a rule's message ('ended the check's worker: killed by SIGSEGV')."""
    if watch.fences and watch.fences[-1].timed_out:
        return f"did not finish within {watch.fences[-1].limit:g} s (--user-code-timeout): stopped"
    if watch.fences and watch.fences[-1].froze:
        return FROZE
    if watch.broken:
        return f"broke the worker's channel to trl-doctor: {watch.broken}; the worker was stopped"
    if watch.channel_closed or code == CHANNEL_LOST:
        return ("closed the worker's channel to trl-doctor (a file descriptor the worker inherited, not one of the "
                "user's code); the worker was stopped")
    return f"ended the check's worker: {worker.how(code)}"


def _capture_limit(options: Options) -> float | None:
    """How long a launch command may take to build its trainer before the supervisor stops it: the worker's
    own watchdog (which names where the script was) gets a head start."""
    if options.launch is None:
        return None
    return float(options.script_timeout) + 30.0


def _supervise(worker: Worker, watch: _Watch, accept: Callable[[Result], None], on_progress, by_id: dict,
               capture_limit: float | None = None) -> None:
    """Read the worker's messages until it is done, closes its channel, or overruns a time limit."""
    started = checked = time.monotonic()
    stops = _guard.stops()
    while True:
        watch.closed.clear()
        if capture_limit is not None and watch.captured is None and time.monotonic() - started > capture_limit:
            worker.kill()
            raise InputError(f"the launch command did not construct a TRL trainer within {capture_limit - 30:g}s "
                             "(--script-timeout), and its worker did not answer")
        ready, _, _ = select.select([worker.channel], [], [], POLL_S)
        if _guard.stops() > stops:  # the worker stopped this process and the guard resumed it: nothing more is taken
            _froze(worker, watch, accept, on_progress, by_id)
            return
        if not ready and worker.proc.poll() is not None:
            ready = [worker.channel]  # it exited, but a process it forked holds the channel open: read what it sent
            exited = True
        else:
            exited = False
        if ready:
            chunk = _read_available(worker.channel) if exited else os.read(worker.channel, 1 << 16)
            if not chunk:  # the worker closed its channel: it finished or died, or its code closed the descriptor
                watch.channel_closed = not exited and _still_running(worker)
                return
            watch.buffer += chunk
            *lines, watch.buffer = watch.buffer.split(b"\n")
            for line in lines:
                if line.strip() and not _read_line(line, watch, worker, accept, on_progress, by_id):
                    return
            if watch.done:
                return
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            _cap_log(worker.log_path, watch)
        if _overran(watch, worker, on_progress):
            return


def _read_line(line: bytes, watch: _Watch, worker: Worker, accept, on_progress, by_id: dict) -> bool:
    """Handle one channel line; False (the worker stopped, `watch.broken` says why) when it is not the protocol's."""
    try:
        msg = read_message(line.decode("utf-8"))
        _handle(msg, watch, worker, accept, on_progress, by_id)
    except InputError:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # JSON, UTF-8, a version or kind refused, a field missing
        text = line[:120].decode("utf-8", "replace")
        watch.broken = f"{text!r}{'...' if len(line) > 120 else ''}: {type(exc).__name__}: {str(exc)[:200]}"
        worker.kill()
        return False
    return True


def _froze(worker: Worker, watch: _Watch, accept, on_progress, by_id: dict) -> None:
    """The printing process was stopped (SIGSTOP) and resumed by its guard: stop the worker and blame the user code
    that ran when it was stopped (at most a guard's poll before it was resumed, on the machine's one monotonic clock):
    one that ended since the supervisor last looked, or the one open now."""
    _drain(worker, watch, accept, on_progress, by_id)
    worker.kill()
    stopped = _guard.resumed_at() - 2 * _guard.GUARD_POLL_S
    during = [f for f in watch.closed if f.ended is None or f.ended >= stopped]
    if during:
        watch.fences = [during[0]]
    if watch.fences:
        watch.fences[-1].froze = True
    else:
        watch.froze = True


def _drain(worker: Worker, watch: _Watch, accept, on_progress, by_id: dict) -> None:
    """Read the whole lines the channel holds now, handling only the user code's start and end: the worker is to be
    stopped, and what else it said (a result the user's code may have shaped) is not taken."""
    while True:
        chunk = _read_available(worker.channel)
        if not chunk:
            return
        watch.buffer += chunk
        *lines, watch.buffer = watch.buffer.split(b"\n")
        for line in lines:
            try:
                msg = read_message(line.decode("utf-8")) if line.strip() else None
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                continue
            if isinstance(msg, (UserCode, UserCodeEnd)):
                _handle(msg, watch, worker, accept, on_progress, by_id)


def _read_available(fd: int) -> bytes:
    """What the channel holds now, without waiting for an end a forked process may never give."""
    ready, _, _ = select.select([fd], [], [], 0)
    return os.read(fd, 1 << 16) if ready else b""


def _still_running(worker: Worker) -> bool:
    """Whether the worker still runs EXIT_GRACE_S after its channel closed (a dying one is gone by then)."""
    try:
        worker.proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        return True
    return False


def _overran(watch: _Watch, worker: Worker, on_progress) -> bool:
    """Stop the worker when the user's code it runs (its innermost fence) or its trainer run is past its limit."""
    fence = watch.fences[-1] if watch.fences else None
    if fence is not None:
        elapsed = time.monotonic() - fence.started
        if elapsed >= fence.limit:
            worker.kill()
            fence.timed_out = True
            return True
        if on_progress is not None and elapsed >= 2:
            on_progress(f"{fence.what} ({elapsed:.0f}s of {fence.limit:g}s)")
    run = watch.run
    if run is not None:
        elapsed = time.monotonic() - run.started
        if elapsed >= run.limit:
            worker.kill()
            run.details["timed_out"] = True
            return True
        if on_progress is not None and fence is None:
            on_progress(f"{run.trainer.upper()} trainer run: {run.stage or 'starting'} "
                        f"({elapsed:.0f}s of {run.limit:g}s)")
    return False


def _handle(msg: Message, watch: _Watch, worker: Worker, accept, on_progress, by_id: dict) -> None:
    watch.heard = True
    match msg:
        case Captured():
            watch.captured = msg
            if watch.on_capture is not None:
                watch.on_capture(msg.as_dict())
            if on_progress is not None:
                on_progress(f"captured {msg.trainer_class} at {msg.constructed_at}")
        case RuleStart(id=rule_id):
            watch.current = rule_id
            rule = by_id.get(rule_id)
            if on_progress is not None and rule is not None:
                on_progress(f"checking {rule.id} {rule.slug}...")
        case RuleResult(result=result):
            accept(result)
            watch.current = None
            watch.fences.clear()
        case UserCode():
            # the worker's own log offset: what it wrote before the supervisor reads this line is its code's
            offset = msg.log_offset if msg.log_offset is not None else _size(worker.log_path)
            watch.fences.append(_Fence(msg.what, msg.key, msg.limit, time.monotonic(), offset, began=msg.at))
        case UserCodeEnd():
            if watch.fences:
                watch.closed.append(dataclasses.replace(watch.fences.pop(), ended=msg.at))
        case TrainerRun():
            watch.run = _Run(dict(msg.details), msg.limit, time.monotonic(), _size(worker.log_path), msg.trainer)
        case TrainerStage(name=name):
            if watch.run is not None:
                watch.run.stage = name
        case TrainerRunEnd():
            watch.run = None
        case BadInput(message=text):
            worker.kill()
            raise InputError(text)
        case CaptureAgain():
            watch.capture_again = msg
        case WillRun():
            if watch.on_will_run is not None:
                watch.on_will_run(msg.as_dict())
        case Done():
            watch.done = True


def _stopped_run(run: _Run, code: int, worker: Worker) -> dict:
    from trl_doctor.facts.trainer_run.protocol import RunResult

    timed_out = run.details.pop("timed_out", False)
    details = dict(run.details, wall_s=round(time.monotonic() - run.started, 2))
    tail = _tail(worker.log_path, run.log_offset)
    if timed_out:
        return RunResult("timeout", details, log_tail=tail, last_stage=run.stage, limit=run.limit).to_json()
    return RunResult("crashed", details, log_tail=tail, last_stage=run.stage, code=code, cause=worker.how(code)).to_json()


def _fenced(rule, fence: _Fence, cause: str, worker: Worker) -> Result:
    """The rule's result when the user's code it ran ended the worker (or was stopped at its limit)."""
    tail = _tail(worker.log_path, fence.log_offset, FENCE_TAIL_LINES).splitlines()  # a crash's Python stack too
    details: dict[str, Any] = {"user code": fence.what, "log_tail": "\n".join(x for x in tail if not x.startswith("Extension modules:")),
               "next": "the rules after this one ran in a fresh worker, which does not run this code again"}
    if worker.ended:
        details["processes ended with the worker"] = worker.ended
    return Result(rule.id, rule.slug, rule.title, Status.FAIL, f"{fence.what} {cause}", details, None,
                  round(time.monotonic() - fence.started, 3))


def _died(rule, code: int | None, worker: Worker | None, message: str) -> Result:
    details: dict[str, Any] = {"log_tail": _tail(worker.log_path, 0)} if worker is not None else {}
    if worker is not None and worker.ended:
        details["processes ended with the worker"] = worker.ended
    return Result(rule.id, rule.slug, rule.title, Status.ERROR, message, details, None, 0.0)


FROZE = ("stopped trl-doctor's own process (SIGSTOP); the check's guard resumed it and the worker was stopped")


def _death(watch: _Watch, code: int | None, worker: Worker) -> str:
    """Why a worker ended outside the user's code, as a rule's message."""
    if watch.froze:
        return f"the check's worker {FROZE}"
    if watch.broken:
        return (f"the check's worker wrote a line that is not trl-doctor's protocol while running this rule "
                f"({watch.broken}): it was stopped")
    if watch.channel_closed or code == CHANNEL_LOST:
        return "the check's worker lost its channel to trl-doctor while running this rule: it was stopped"
    return f"the check's worker process died ({worker.how(code)}) while running this rule"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, offset: int, lines: int = LOG_TAIL_LINES) -> str:
    """The log's last `lines` lines after `offset` (read from its last LOG_TAIL_BYTES, long lines shortened)."""
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            fh.seek(max(offset, end - LOG_TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    half = LOG_LINE_CHARS // 2
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)  # a report format may not carry them (XML)
    return "\n".join(line if len(line) <= LOG_LINE_CHARS else f"{line[:half]} [... {len(line) - 2 * half} characters ...] "
                     f"{line[-half:]}" for line in text.splitlines()[-lines:])


def _cap_log(path: Path, watch: _Watch) -> None:
    """Keep a flooded log (user code printing without end) within LOG_CAP: its first and last LOG_KEEP bytes.
    The worker appends (O_APPEND), so it goes on writing at the new end; what it writes meanwhile may be lost."""
    size = _size(path)
    if size <= LOG_CAP:
        return
    with open(path, "r+b") as fh:
        fh.seek(size - LOG_KEEP)
        end = fh.read(LOG_KEEP)
        fh.seek(LOG_KEEP)
        fh.write(f"\n[trl-doctor: {size - 2 * LOG_KEEP} bytes of output left out]\n".encode() + end)
        fh.truncate()
    for mark in watch.fences + ([watch.run] if watch.run is not None else []):
        mark.log_offset = min(mark.log_offset, LOG_KEEP)
