"""Running a piece of the repository's data as code (a chat template) under `check --static`, bounded: a forked
child of this process, under an address-space limit (trl_doctor.runtime.limits, as the full check's worker), stopped
after a wall-time budget, its answer capped. A fork without exec costs a few milliseconds, so a healthy template pays
almost nothing; a template that loops without end, or asks for gigabytes, costs at most the budget and is one line.

Where the platform has no fork (Windows), the function runs in this process, unbounded."""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Callable

SECONDS = 5.0  # wall time one render may take (--user-code-timeout lowers it)
MEMORY = 512 * 2**20  # address space one render may add to this process's
OUTPUT = 1 * 2**20  # characters one render may produce


class Overrun(Exception):
    """The bounded call ran out of time, memory or output, or ended its process: the message says which."""


class Raised(Exception):
    """The bounded call raised: the message is its `Type: message`."""


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def run(fn: Callable[[], str], what: str, seconds: float = SECONDS, memory: int = MEMORY, output: int = OUTPUT) -> str:
    """fn()'s text, computed in a forked child bounded by `seconds`, `memory` more bytes of address space and
    `output` characters. Raises Raised (fn raised) or Overrun (`what` overran a bound, or its process died)."""
    if not hasattr(os, "fork"):
        return _in_process(fn, output)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        _child(fn, w, memory, output)
    os.close(w)
    try:
        kind, body = _read(r, pid, what, seconds, output)
    finally:
        os.close(r)
        _reap(pid)
    if kind == b"ok":
        return body
    if kind == b"mem":
        raise Overrun(f"{what} needed more than the {memory // 2**20} MiB of memory --static allows")
    if kind == b"out":
        raise Overrun(f"{what} produced more than the {output // 2**20} MiB of text --static reads")
    raise Raised(body)


def _in_process(fn: Callable[[], str], output: int) -> str:
    try:
        text = fn()
    except Exception as exc:
        raise Raised(f"{type(exc).__name__}: {exc}") from None
    if len(text) > output:
        raise Overrun(f"the text produced is longer than the {output // 2**20} MiB --static reads")
    return text


def _child(fn: Callable[[], str], w: int, memory: int, output: int) -> None:
    try:
        from trl_doctor.runtime.limits import apply_memory_limit

        signal.signal(signal.SIGINT, signal.SIG_DFL)
        base = _address_space()
        if base is not None:
            apply_memory_limit(base + memory)
        try:
            text = fn()
            answer = b"out\n" if len(text) > output else b"ok\n" + text.encode("utf-8", "surrogatepass")
        except MemoryError:
            answer = b"mem\n"
        except OutputCap:
            answer = b"out\n"
        except BaseException as exc:  # noqa: BLE001 - the parent reports what the code raised
            answer = b"err\n" + f"{type(exc).__name__}: {exc}"[:2000].encode("utf-8", "replace")
        view = memoryview(answer)
        while view:
            view = view[os.write(w, view):]
    except BaseException:  # noqa: BLE001 - the child must never go back into the caller's code
        pass
    finally:
        os._exit(0)


class OutputCap(Exception):
    """Raised by fn (in the child) when what it produces passes the output cap."""


def _read(r: int, pid: int, what: str, seconds: float, output: int) -> tuple[bytes, str]:
    deadline = time.monotonic() + seconds
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        ready = select.select([r], [], [], max(left, 0))[0] if left > 0 else []
        if not ready:
            _kill(pid)
            raise Overrun(f"{what} did not finish within {seconds:g} s (the time --static gives it)")
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > 4 * output + 16:
            _kill(pid)
            return b"out", ""
    data = b"".join(chunks)
    kind, _, body = data.partition(b"\n")
    if kind not in (b"ok", b"err", b"mem", b"out"):
        raise Overrun(f"{what} ended the process that ran it ({_how_it_ended(pid)})")
    return kind, body.decode("utf-8", "surrogatepass" if kind == b"ok" else "replace")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _how_it_ended(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "gone"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
