"""The printing process's side of a check: start the one heavy worker, read its results as they stream in,
and supervise it. This module imports no torch, transformers or TRL.

Isolation: the worker runs the user's code (reward functions, chat templates, the trainer). When the
trainer run outlives --smoke-timeout the worker is killed; when the worker dies (a segfault, the kernel's
out-of-memory killer) the results it already streamed are kept. A run that hung or died is handed, as a
`RunResult`, to a fresh worker that reports the rules still to run (the smoke step then fails with the
cause); a worker that dies outside the trainer run gives the rule it was running an `error` and the next
worker goes on after it.

The user's code (importing a reward module, calling a reward function, rendering a chat template) runs inside
the worker's fence (trl_doctor._fence): a fence that outlives its limit (--user-code-timeout) is stopped, and a
worker that dies inside a fence gives the rule it was running a `fail` naming the code and the cause; the next
worker is told (`Request.failed`) not to run that code again. What the worker prints goes to its log, which is
kept under LOG_CAP bytes (its start and its end).
"""

from __future__ import annotations

import dataclasses
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ._errors import InputError
from ._protocol import Request, decode_result, read_message
from ._types import Result, Status

POLL_S = 0.25  # how often the supervisor looks at the clock while the worker is quiet
LOG_TAIL_LINES = 15
FENCE_TAIL_LINES = 30  # what the user's code printed, or the Python stack of its crash (the innermost frame first)
LOG_TAIL_BYTES = 64 * 1024  # a log tail is read from at most this many bytes at the log's end
LOG_LINE_CHARS = 500  # a longer line of a log tail keeps its start and its end
LOG_CAP = 16 << 20  # a worker's log beyond this many bytes keeps its first and last LOG_KEEP bytes
LOG_KEEP = 1 << 20
MAX_WORKERS = 6  # fresh workers one check may start after deaths (each death moves the check forward)


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
    """User code the worker announced it runs (trl_doctor._fence)."""

    what: str
    key: str
    limit: float
    started: float
    log_offset: int
    timed_out: bool = False


@dataclass
class _Watch:
    """What the supervisor knows about one worker."""

    current: str | None = None  # the rule it is running
    heard: bool = False  # it sent at least one message
    run: _Run | None = None
    fences: list[_Fence] = field(default_factory=list)  # the user code running now, innermost last
    done: bool = False
    captured: dict | None = None  # a launch command's script built its trainer (the `captured` message)
    on_capture: Callable[[dict], None] | None = None
    buffer: bytes = b""
    results: list[Result] = field(default_factory=list)


class Worker:
    """A started worker: its channel (read end), its log file, and how to stop it and collect its status."""

    def __init__(self, channel: int, log_path: Path, proc: Any):
        self.channel = channel
        self.log_path = log_path
        self.proc = proc  # a subprocess.Popen, or the fork server's handle with the same kill/wait/poll

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def finish(self, graceful: bool) -> None:
        """Let a worker that reported `done` clean up its temporary folder; stop any other at once."""
        if graceful:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.proc.wait()
        self.close()

    def wait(self) -> int:
        return self.proc.wait()

    def close(self) -> None:
        try:
            os.close(self.channel)
        except OSError:
            pass


def start_worker(request: Request, log_path: Path) -> Worker:
    """A fresh worker for `request`: forked from a warm fork server when one serves this environment, else a
    new `python -P -m trl_doctor._worker` process (-P: no folder of the user's, such as a `json.py` beside the
    config, shadows a module the worker imports)."""
    from . import _forkserver

    read_end, write_end = os.pipe()
    try:
        with open(log_path, "ab") as log:
            proc = _forkserver.spawn(request, write_end, log.fileno())
            if proc is None:
                env = dict(os.environ, TRL_DOCTOR_CHANNEL_FD=str(write_end), PYTHONUNBUFFERED="1")
                proc = subprocess.Popen(safe_python("trl_doctor._worker"), stdin=subprocess.PIPE,
                                        stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_end,), env=env)
                try:
                    proc.stdin.write(request.to_json().encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass  # it died while starting: its status and log say why
    finally:
        os.close(write_end)
    return Worker(read_end, log_path, proc)


def safe_python(module: str) -> list[str]:
    """`python -P -m MODULE`: -P (Python 3.11+) keeps the current folder off sys.path; on 3.10 the same by hand."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", f"import sys; del sys.path[0]; import runpy; runpy.run_module({module!r}, "
                                  "run_name='__main__', alter_sys=True)"]


def run_check(config: Path | None, rules: list, options: Any, on_result: Callable[[Result], None] | None = None,
              on_progress: Callable[[str], None] | None = None,
              on_capture: Callable[[dict], None] | None = None) -> list[Result]:
    """Every rule's Result, in run order; `on_result` sees each as soon as it is known. Raises InputError.

    With `options.launch` (a launch command) there is no config file: the worker runs the command until its script
    builds the trainer, and `on_capture` sees what was captured (once, before any result)."""
    from ._registry import run_order

    ordered = run_order(rules)
    by_id = {r.id: r for r in ordered}
    results: dict[str, Result] = {}
    handed: dict | None = None  # a trainer run that hung or died, for the next worker
    failed: dict[str, str] = {}  # user code that ended a worker: {fence key: cause}, for the next workers

    def accept(r: Result) -> None:
        results[r.id] = r
        if on_result is not None:
            on_result(r)

    with tempfile.TemporaryDirectory(prefix="trl-doctor-session-") as tmp:
        for attempt in range(MAX_WORKERS):
            opts = dataclasses.replace(options, trainer_run=handed) if handed else options
            request = Request(str(Path(config).resolve()) if config is not None else "", tuple(r.id for r in ordered),
                              dataclasses.asdict(opts), done=tuple(results), failed=dict(failed))
            worker = start_worker(request, Path(tmp) / f"worker-{attempt}.log")
            watch = _Watch(on_capture=on_capture)
            try:
                _supervise(worker, watch, accept, on_progress, by_id, _capture_limit(options))
            finally:
                worker.finish(graceful=watch.done)
            if watch.captured is not None:
                on_capture = None  # a fresh worker captures again; the report shows the first capture
            if watch.done or len(results) == len(ordered):
                break
            code = worker.wait()
            if watch.fences and not (watch.run is not None and watch.run.details.get("timed_out")):
                fence = watch.fences[-1]  # the user's code ended the worker, or overran its limit
                victim = watch.current or next(r.id for r in ordered if r.id not in results)
                result = _fenced(by_id[victim], fence, code, worker)
                failed[fence.key] = result.message
                accept(result)
                continue
            if watch.run is not None:  # the trainer run hung or died: the next worker reports it
                handed = _stopped_run(watch.run, code, worker)
                continue
            if not watch.heard:  # it died before it said anything: a broken environment, not one rule's doing
                for r in ordered:
                    if r.id not in results:
                        accept(_died(r, code, worker, f"not run: the check's worker process died at start-up "
                                                       f"({_how(code)}); its log is in the details"))
                break
            victim = watch.current or next(r.id for r in ordered if r.id not in results)
            accept(_died(by_id[victim], code, worker))
        else:
            for r in ordered:
                if r.id not in results:
                    accept(_died(r, None, None, f"not run: the worker died {MAX_WORKERS} times in this check"))
    return [results[r.id] for r in ordered if r.id in results]


def _capture_limit(options: Any) -> float | None:
    """How long a launch command may take to build its trainer before the supervisor stops it: the worker's
    own watchdog (which names where the script was) gets a head start."""
    if getattr(options, "launch", None) is None:
        return None
    return float(options.script_timeout) + 30.0


def _supervise(worker: Worker, watch: _Watch, accept: Callable[[Result], None], on_progress, by_id: dict,
               capture_limit: float | None = None) -> None:
    """Read the worker's messages until it is done, closes its channel, or overruns a time limit."""
    started = checked = time.monotonic()
    while True:
        if capture_limit is not None and watch.captured is None and time.monotonic() - started > capture_limit:
            worker.kill()
            raise InputError(f"the launch command did not construct a TRL trainer within {capture_limit - 30:g}s "
                             "(--script-timeout), and its worker did not answer")
        ready, _, _ = select.select([worker.channel], [], [], POLL_S)
        if ready:
            chunk = os.read(worker.channel, 1 << 16)
            if not chunk:
                return  # the worker closed its channel: it finished or died
            watch.buffer += chunk
            *lines, watch.buffer = watch.buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    _handle(read_message(line.decode("utf-8")), watch, worker, accept, on_progress, by_id)
            if watch.done:
                return
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            _cap_log(worker.log_path, watch)
        if _overran(watch, worker, on_progress):
            return


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


def _handle(msg: dict, watch: _Watch, worker: Worker, accept, on_progress, by_id: dict) -> None:
    kind = msg["kind"]
    watch.heard = True
    if kind == "captured":
        watch.captured = {k: v for k, v in msg.items() if k not in ("version", "kind")}
        if watch.on_capture is not None:
            watch.on_capture(watch.captured)
        if on_progress is not None:
            on_progress(f"captured {watch.captured.get('trainer_class')} at {watch.captured.get('constructed_at')}")
    elif kind == "rule-start":
        watch.current = msg["id"]
        rule = by_id.get(msg["id"])
        if on_progress is not None and rule is not None:
            on_progress(f"checking {rule.id} {rule.slug}...")
    elif kind == "result":
        accept(decode_result(msg["result"]))
        watch.current = None
        watch.fences.clear()
    elif kind == "user-code":
        offset = msg.get("log_offset")  # the worker's own: what it wrote before the supervisor reads this is its code's
        watch.fences.append(_Fence(str(msg.get("what") or "the user's code"), str(msg.get("key") or msg.get("what")),
                                   float(msg.get("limit") or 60.0), time.monotonic(),
                                   int(offset) if offset is not None else _size(worker.log_path)))
    elif kind == "user-code-end":
        if watch.fences:
            watch.fences.pop()
    elif kind == "trainer-run":
        watch.run = _Run(dict(msg.get("details") or {}), float(msg.get("limit") or 300.0), time.monotonic(),
                         _size(worker.log_path), str(msg.get("trainer") or ""))
    elif kind == "trainer-stage" and watch.run is not None:
        watch.run.stage = msg.get("name")
    elif kind == "trainer-run-end":
        watch.run = None
    elif kind == "input-error":
        worker.kill()
        raise InputError(msg["message"])
    elif kind == "done":
        watch.done = True


def _stopped_run(run: _Run, code: int, worker: Worker) -> dict:
    from .trainer_run.protocol import RunResult

    timed_out = run.details.pop("timed_out", False)
    details = dict(run.details, wall_s=round(time.monotonic() - run.started, 2))
    tail = _tail(worker.log_path, run.log_offset)
    if timed_out:
        return RunResult("timeout", details, log_tail=tail, last_stage=run.stage, limit=run.limit).to_json()
    return RunResult("crashed", details, log_tail=tail, last_stage=run.stage, code=code).to_json()


def _fenced(rule, fence: _Fence, code: int, worker: Worker) -> Result:
    """The rule's result when the user's code it ran ended the worker (or was stopped at its limit)."""
    if fence.timed_out:
        cause = f"did not finish within {fence.limit:g} s (--user-code-timeout): stopped"
    else:
        cause = f"ended the check's worker: {_how(code)}"
    tail = _tail(worker.log_path, fence.log_offset, FENCE_TAIL_LINES).splitlines()  # a crash's Python stack too
    details = {"user code": fence.what, "log_tail": "\n".join(x for x in tail if not x.startswith("Extension modules:")),
               "next": "the rules after this one ran in a fresh worker, which does not run this code again"}
    return Result(rule.id, rule.slug, rule.title, Status.FAIL, f"{fence.what} {cause}", details, None,
                  round(time.monotonic() - fence.started, 3))


def _died(rule, code: int | None, worker: Worker | None, message: str | None = None) -> Result:
    how = _how(code)
    details = {"log_tail": _tail(worker.log_path, 0)} if worker is not None else {}
    return Result(rule.id, rule.slug, rule.title, Status.ERROR,
                  message or f"the check's worker process died ({how}) while running this rule", details, None, 0.0)


def _how(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (": the kernel's out-of-memory killer sends it" if -code == 9 else "")
    return f"exit status {code}"


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
