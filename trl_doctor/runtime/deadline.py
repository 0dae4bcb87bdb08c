"""A time limit for user code that runs on the main thread, where the trainer runs it.

The user's code must run on the main thread: a reward function that uses math_verify (most math recipes) times
its parsing with signal.alarm, which Python allows on the main thread only ("Math-Verify 'parse' function doesn't
support threaded environment"). A call there can still hang, so `deadline(seconds)` interrupts it:

- a watchdog thread waits out the limit, then sends the main thread a signal of the doctor's own (SIGUSR2, the
  user's handler saved and restored around the block) whose handler raises `Overrun`;
- the timer is not SIGALRM/ITIMER_REAL: that one timer is the user's code's to use, and math_verify's
  `signal.alarm(0)` after each parse would silently cancel a limit kept there;
- the signal interrupts a blocking call (time.sleep, a socket read), and it is sent again every second in case
  the code swallowed the first `Overrun` (a bare `except:`);
- `Overrun` derives from BaseException, so `except Exception` in the user's code (math_verify has one) does not
  swallow it.

Code stuck in C that never returns to the interpreter, or that swallows every interruption, cannot be stopped
this way: in the check's worker the supervisor's hard limit (trl_doctor.runtime.fence) stops the whole worker first (the
caller's deadline there is the fence's limit plus a grace period). Off the main thread no Python signal
handler can run, and `deadline` sets no limit (`on_main_thread()` says which).

This module is light: no torch, transformers or TRL.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

SIGNAL = getattr(signal, "SIGUSR2", None)
RESEND_S = 1.0  # how often an ignored interruption is repeated


class Overrun(BaseException):
    """The block ran past its deadline."""


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class deadline:
    """`with deadline(seconds) as limit:` raises `Overrun` in the block once it has run `seconds` (main thread
    only; elsewhere, no limit). `limit.expired` turns True once the time is up, even when the code caught the
    `Overrun` or ended just then. A class, not a generator: the handler knows this module's frames, so the
    clean-up in `__exit__` is never interrupted."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.expired = False
        self._armed = False
        self._done = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> "deadline":
        if SIGNAL is None or not on_main_thread() or self.seconds <= 0:
            return self
        self._previous = signal.getsignal(SIGNAL)
        signal.signal(SIGNAL, self._handler)
        self._armed = True
        self._watchdog = threading.Thread(target=self._watch, name="trl-doctor-deadline", daemon=True)
        self._watchdog.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._watchdog is None:
            return
        self._armed = False
        self._done.set()
        self._watchdog.join()
        assert SIGNAL is not None  # a watchdog starts only with a signal to send
        # the watchdog has ended, so every signal it sent is already delivered: `_handler` (a no-op now) takes it
        # before the user's handler is back
        if signal.getsignal(SIGNAL) == self._handler:  # a handler the block installed itself is the block's to keep
            signal.signal(SIGNAL, self._previous if self._previous is not None else signal.SIG_IGN)

    def _handler(self, signum, frame) -> None:
        if not self._armed or (frame is not None and frame.f_code.co_filename == __file__):
            return  # ours, arriving as the block ends: the clean-up must run whole
        if self.expired:
            raise Overrun(f"ran past its limit of {self.seconds:g} s")
        if callable(self._previous):  # a SIGUSR2 that is not ours: the user's handler still gets it
            self._previous(signum, frame)

    def _watch(self) -> None:
        if self._done.wait(self.seconds):
            return
        self.expired = True
        main = threading.main_thread().ident
        assert main is not None and SIGNAL is not None  # the main thread runs; a watchdog starts only with a signal
        while self._armed:
            signal.pthread_kill(main, SIGNAL)
            if self._done.wait(RESEND_S):
                return
