"""How a worker ended, in words that name the real cause.

A SIGKILL is the kernel's out-of-memory killer only when the kernel says so: the `oom_kill` count of the memory
cgroup the worker runs in (cgroup v2 `memory.events`, v1 `memory.oom_control`) grew while it ran. Without that record
the words are "killed by SIGKILL", never a guess. A worker that closed its channel (the user's code closed inherited
file descriptors) or wrote lines that are not the protocol's is named as such by the supervisor (trl_doctor.supervisor.session).
"""

from __future__ import annotations

import signal
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _memory_files(pid: str = "self") -> list[Path]:
    """The files that count OOM kills for the memory cgroup of `pid`, v2 and v1 layouts."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.lstrip("/")
        if controllers == "":  # v2 (unified): mounted at the root, or beside v1 under unified/
            out += [CGROUP_ROOT / rel / "memory.events", CGROUP_ROOT / "unified" / rel / "memory.events"]
        elif "memory" in controllers.split(","):
            out.append(CGROUP_ROOT / "memory" / rel / "memory.oom_control")
    return out


def oom_kills() -> int | None:
    """The OOM kills the kernel counted in this process's memory cgroup (the worker's), or None when unreadable."""
    total = None
    for path in _memory_files():
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                total = (total or 0) + int(value)
    return total


def how(code: int | None, oom_before: int | None = None, oom_after: int | None = None) -> str:
    """'exit status 3', 'killed by SIGSEGV', 'killed by the kernel's out-of-memory killer (SIGKILL; ...)'."""
    if code is None:
        return "status unknown"
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL and oom_before is not None and oom_after is not None and oom_after > oom_before:
        return (f"killed by the kernel's out-of-memory killer (SIGKILL; its memory cgroup's oom_kill count went from "
                f"{oom_before} to {oom_after})")
    return f"killed by {name}"
