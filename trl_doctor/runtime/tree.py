"""The check's processes: the worker and everything it (the user's code) starts, found and ended as one tree.

The worker runs in a session (and process group) of its own, so one `killpg` ends it and the children that stayed
in its group. A child that left the group (`setsid`, a daemon's double fork) is still found by its tag: every worker
runs with TAG_ENV=<the check's tag> in its environment, which each process it starts inherits, and `tagged(tag)`
reads /proc/*/environ for it (a process's environment as it was started: a forked copy of the worker shows the tag,
an exec'ed child shows the environment it was given). While it lives, the worker is also a child subreaper
(PR_SET_CHILD_SUBREAPER), so a double-forked daemon stays its descendant and a fence can name what the user's code
left running (`descendants`).

Linux only (/proc, prctl); elsewhere every function finds nothing and `end` only kills the group. This module is light:
no torch, transformers or TRL.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

TAG_ENV = "TRL_DOCTOR_CHECK_TAG"
PR_SET_CHILD_SUBREAPER = 36
END_ROUNDS = 50  # scans for tagged processes before giving up (each kill may race a fork)


def new_tag() -> str:
    return secrets.token_hex(8)


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it instead of init (Linux >= 3.4)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name: [state, ppid, pgrp, session, ...], or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot): with the pid, it names one process, never a later one."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def tagged(tag: str, key: str = TAG_ENV) -> list[int]:
    """Live processes (not this one) whose environment carries KEY=tag (TAG_ENV by default)."""
    needle = f"{key}={tag}".encode()
    me = os.getpid()
    out = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and alive(pid):
            out.append(pid)
    return out


def descendants(root: int) -> list[int]:
    """Live descendants of `root` (its children, theirs, ...).

    /proc's children lists are quick but can miss a process while another exits: a daemon's first fork that exits
    mid-walk hands the daemon up to the subreaper, past the list already read (CI, stop 28), and proc(5) warns that an
    exiting child can hide a sibling. So two walks that agree and met no exited child are the answer; else every
    process's parent link is read (each /proc/PID/stat read is whole)."""
    first, exited = _walk(root)
    if first is not None and not exited:
        second, exited = _walk(root)
        if second is not None and not exited and set(second) == set(first):
            return first
    return _descendants_by_scan(root)


def _walk(root: int) -> tuple[list[int] | None, bool]:
    """The live descendants by /proc's children lists (None where the kernel has none), and whether the walk met a
    child that had exited (a zombie, or gone)."""
    out, exited, todo = [], False, _children(root)
    if todo is None:
        return None, False
    while todo:
        pid = todo.pop()
        if alive(pid):
            out.append(pid)
        else:
            exited = True
        todo.extend(_children(pid) or ())
    return out, exited


def _children(pid: int) -> list[int] | None:
    """The children of every thread of `pid` (/proc/PID/task/*/children), or None where the kernel has no such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except FileNotFoundError:
            if not Path(f"/proc/{pid}/task/{tid}").exists():
                continue  # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return out


def _descendants_by_scan(root: int) -> list[int]:
    """Live descendants from every process's parent link. A zombie is walked through, not listed: a grandchild read
    before its exited parent's exit re-parented it still names that parent."""
    children: dict[int, list[int]] = {}
    dead: set[int] = set()
    for pid in _pids():
        fields = _stat(pid)
        if fields is None:
            continue
        if fields[0] in ("Z", "X"):
            dead.add(pid)
        children.setdefault(int(fields[1]), []).append(pid)
    out, todo, seen = [], list(children.get(root, ())), {root}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if pid not in dead:
            out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def describe(pid: int) -> str:
    """'1234: sleep 300' (the command line, shortened)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmd = ""
    if not cmd:
        try:
            cmd = f"[{Path(f'/proc/{pid}/comm').read_text().strip()}]"
        except OSError:
            cmd = "?"
    return f"{pid}: {cmd[:200]}"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end(group: int | None, tag: str | None, key: str = TAG_ENV) -> list[int]:
    """Kill the process group `group` and every live process tagged `tag` (repeatedly, as a dying process may have
    forked meanwhile); the pids killed by tag. Children of this process among them are reaped."""
    if group is not None and group > 1:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    killed: list[int] = []
    if not tag:
        return killed
    for _ in range(END_ROUNDS):
        found = tagged(tag, key)
        if not found:
            break
        for pid in found:
            _kill(pid)
        killed += [p for p in found if p not in killed]
        time.sleep(0.02)
    _reap(killed)
    return killed


def _reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass  # not this process's child: its own parent (or init) reaps it
