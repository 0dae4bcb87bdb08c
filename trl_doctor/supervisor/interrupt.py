"""Signals to the printing process end the check cleanly: SIGINT (Ctrl-C) raises KeyboardInterrupt as always, and
SIGTERM and SIGHUP (a CI job cancelled, a closed terminal) raise `Stopped`, a KeyboardInterrupt too, so the same
`finally` blocks run: the worker's process tree is ended (trl_doctor.runtime.tree) and the check's folder removed
(trl_doctor.runtime.tmp). The command line then exits 128 + the signal's number (130 for Ctrl-C), with nothing left behind.

While that clean-up runs, `held()` holds those signals back, so a second Ctrl-C cannot cut it short.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGTERM, signal.SIGHUP)
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The check was stopped by a signal other than SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a process a signal ended."""
    return 128 + (exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT))


def signal_name(exc: KeyboardInterrupt) -> str:
    return signal.Signals(exc.signum).name if isinstance(exc, Stopped) else "SIGINT"


def _raise(signum, frame) -> None:
    raise Stopped(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Stopped` in this block (main thread only; elsewhere a no-op). A signal the caller
    set to be ignored (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in HANDLED:
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:
            continue
        previous[signum] = current
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back in this block; one that arrived meanwhile is delivered after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
