"""The printing process cannot be frozen by the user's code. SIGSTOP cannot be caught, and the worker's code may send it
to its parent (`os.kill(os.getppid(), signal.SIGSTOP)`), the printing process, which then waits forever for a worker
it can no longer time out (issue 31).

`guarded()` starts a guard for the block: a small process in a session of its own (so a signal to the check's
process group misses it) that looks at the printing process every GUARD_POLL_S and resumes it (SIGCONT) when it finds
it stopped, writing a byte on its pipe first. The printing process's own SIGCONT handler then counts the stop (a
SIGCONT without that byte is someone else's), and the supervisor stops the worker and fails the user code it was
running (`stops()` says how many there were).

A terminal's job control still works: Ctrl-Z (SIGTSTP), and SIGTTIN/SIGTTOU for a background job, tell the guard to
let the stop stand, then stop the process as their default would; without a terminal there is no job control to
honour, and those signals are ignored in the block. A signal the caller set to be ignored stays ignored. Without
/proc (not Linux) there is no guard.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

GUARD_POLL_S = 0.05
JOB_CONTROL = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)

# The guard's whole program: run with `python -S -c` (no site: it starts in milliseconds). Its stdin is a pipe from
# the printing process: "p" lets a stop stand (job control), "r" watches again; end of file or a new parent ends it.
_GUARD = r"""
import os, select, signal, sys, time
pid, poll = int(sys.argv[1]), float(sys.argv[2])
paused = False
while os.getppid() == pid:
    ready, _, _ = select.select([0], [], [], poll)
    if ready:
        data = os.read(0, 64)
        if not data:
            break
        paused = data.decode()[-1] == "p"
    if paused:
        continue
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        break
    if state == "T":
        if select.select([0], [], [], 0)[0]:
            continue  # a "p" sent before a job-control stop, not read yet: read it first (the stop stands)
        os.write(1, b"c")  # first: the resumed process counts a SIGCONT only with this byte waiting
        os.kill(pid, signal.SIGCONT)
"""

_state: dict[str, Any] = {"stops": 0, "paused": False, "guard": None, "resumed_at": 0.0}


def stops() -> int:
    """How many times the guard found this process stopped by a signal that was not job control, and resumed it."""
    return _state["stops"]


def resumed_at() -> float:
    """When the guard last resumed this process (time.monotonic())."""
    return _state["resumed_at"]


def _on_continue(signum, frame) -> None:
    """A SIGCONT the guard sent (it wrote a byte first) counts a stop; one from anyone else (`kill -CONT`, a shell's
    `bg` on a running check) is not a stop of the user code's making."""
    guard = _state["guard"]
    try:
        sent = guard is not None and bool(os.read(guard.stdout.fileno(), 64))
    except (BlockingIOError, OSError, ValueError):
        sent = False
    if sent and not _state["paused"]:
        _state["stops"] += 1
        _state["resumed_at"] = time.monotonic()


def _tell(guard: subprocess.Popen | None, what: bytes) -> None:
    try:
        if guard is not None:
            assert guard.stdin is not None  # started with stdin=PIPE
            guard.stdin.write(what)
            guard.stdin.flush()
    except OSError:
        pass


def _interactive() -> bool:
    try:
        return os.isatty(sys.stdin.fileno()) or os.isatty(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def _on_job_control(signum, frame) -> None:
    """Ctrl-Z and its kin in a terminal: the stop stands (the guard is told), as the default would have it."""
    if not _interactive():
        return
    guard = _state["guard"]
    _state["paused"] = True
    _tell(guard, b"p")
    signal.signal(signum, signal.SIG_DFL)
    try:
        os.kill(os.getpid(), signum)  # stopped here until the shell's `fg` or `bg`
    finally:
        signal.signal(signum, _on_job_control)
        _state["paused"] = False
        _tell(guard, b"r")


@contextmanager
def guarded() -> Iterator[None]:
    """A guard for this block (main thread, Linux); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread() or not os.path.exists(f"/proc/{os.getpid()}/stat"):
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGCONT, *JOB_CONTROL)}
    for signum in JOB_CONTROL:
        if previous[signum] is not signal.SIG_IGN:
            signal.signal(signum, _on_job_control)
    signal.signal(signal.SIGCONT, _on_continue)
    try:
        guard = subprocess.Popen([sys.executable, "-S", "-c", _GUARD, str(os.getpid()), str(GUARD_POLL_S)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 start_new_session=True, close_fds=True)
        assert guard.stdout is not None  # stdout=PIPE
        os.set_blocking(guard.stdout.fileno(), False)
    except OSError:
        guard = None
    _state["guard"] = guard
    try:
        yield
    finally:
        _state["guard"] = None
        if guard is not None:
            assert guard.stdin is not None and guard.stdout is not None  # both PIPE
            try:
                guard.stdin.close()  # end of file: it exits
            except OSError:
                pass
            guard.stdout.close()
            try:
                guard.wait(timeout=2)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
