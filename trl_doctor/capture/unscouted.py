"""The backstop behind the scouts (issue 58): a Python process of the launch that no scout runs in is stopped, and named.

A scout says so as it starts (child.py writes `hello-<pid>` into the channel folder, holding its start time, and
again in each process forked from it). A process of the launch (its environment carries the channel) whose executable
is a Python interpreter, which has run for GRACE_S seconds and never said so, runs unwatched: a child started with
`-S` (no site module, so neither the boot folder's sitecustomize nor the .pth runs), or an interpreter that cannot
import the scout (another Python installation). It is killed before it can train, and reported as a failed scout
(`NotScouted`, with why), so the launch ends with that cause. (A scout that exec's another Python in place keeps its
pid and start time, and is not told apart: not covered.)

Linux only (/proc); elsewhere nothing is found. Standard library only: the capture imports it with the scouts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from trl_doctor.runtime import tree

GRACE_S = 2.0  # an interpreter runs its site module within milliseconds of its start; a loaded machine, more
HELLO = "hello-"


def hello_path(channel: str, pid: int) -> str:
    return os.path.join(channel, f"{HELLO}{pid}")


def stop_unscouted(channel: Path, key: str, seen: set[int]) -> list[int]:
    """Kill each unscouted Python process of the launch not yet in `seen`, writing its report; the pids killed."""
    killed = []
    for pid in tree.tagged(str(channel), key=key):
        if pid in seen:
            continue
        why = _unscouted(pid, channel)
        if why is None:
            continue
        seen.add(pid)
        _write_report(channel, pid, why)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(pid)
    return killed


def _unscouted(pid: int, channel: Path) -> str | None:
    """Why `pid` runs without a scout, or None where it has one, is no Python, or is too young to tell."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not os.path.basename(exe).startswith("python"):
        return None
    try:
        if int(Path(hello_path(str(channel), pid)).read_bytes()) == tree.start_time(pid):
            return None
    except (OSError, ValueError):
        pass
    if _age(pid) < GRACE_S:
        return None
    argv = [a.decode("utf-8", "replace") for a in cmdline.split(b"\0") if a]
    flags = _flags(argv[1:])
    if "S" in flags:
        return ("it was started with -S (no site module: neither the boot folder's sitecustomize nor a .pth runs), "
                "so no scout ran in it; stopped before it could train")
    if flags & {"I", "E"}:
        return (f"it was started with -{''.join(sorted(flags & {'I', 'E'}))} (PYTHONPATH ignored, so the boot folder), "
                "and no layer over site-packages could be held here for the scout's .pth; stopped before it could train")
    return (f"its interpreter ({exe}) ran no scout at start-up (another Python installation, which cannot import "
            "trl-doctor's scout); stopped before it could train")


def _flags(args: list[str]) -> set[str]:
    """The interpreter's one-letter flags before its script, module or -c (`-IS` counts as I and S)."""
    out: set[str] = set()
    skip = False
    for arg in args:
        if skip:  # the value of -W or -X given apart
            skip = False
            continue
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--"):
            break
        if arg[1] in "cm":  # -c CODE, -m MODULE: the flags end there
            break
        if arg[1] in "WX":
            skip = len(arg) == 2
            continue
        out.update(arg[1:])
    return out


def _age(pid: int) -> float:
    started = tree.start_time(pid)
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    if started is None:
        return 0.0
    return uptime - started / os.sysconf("SC_CLK_TCK")


def _write_report(channel: Path, pid: int, why: str) -> None:
    """The report a scout would have written had it failed: `failed`, NotScouted, with why."""
    try:
        argv = [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        argv, cwd, ppid = [], "", 0
    record = {"version": 1, "event": "failed", "pid": pid, "ppid": ppid, "time": time.time(), "argv": argv,
              "cwd": cwd, "env": {}, "error": {"type": "NotScouted", "message": why, "where": None, "raised": None}}
    path = channel / f"failed-{pid}-{time.monotonic_ns()}.json"
    try:
        part = path.with_name(path.name + ".part")
        part.write_text(json.dumps(record), encoding="utf-8")
        os.replace(part, path)
    except OSError:
        pass
