"""trl_doctor.runtime.tree finds every live descendant, also while one of them exits and hands its children up.

A daemon's double fork is the case: its first child forks the daemon and exits, and the kernel re-parents the daemon
to the subreaper (the worker) at that moment. A walk that read the worker's children list before the exit and the
exited child's list after it finds the daemon in neither; the fence then missed it in "processes left running by user
code" (CI, stop 28). These tests make that exit happen at the walk's worst moment, with real processes: the hook is
trl-doctor's own `alive`, called between the two reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from trl_doctor.runtime import tree

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc only")

# R: a subreaper that forks I; I forks G (a sleep), stops itself, and on SIGCONT exits, so G goes up to R.
TREE = r"""
import ctypes, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
i = os.fork()
if i == 0:
    g = os.fork()
    if g == 0:
        os.execvp("sleep", ["sleep", "60"])
    print(os.getpid(), g, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
time.sleep(60)
"""


def _state(pid: int) -> str | None:
    fields = tree._stat(pid)
    return fields[0] if fields else None


def _wait_state(pid: int, states: str) -> None:
    deadline = time.monotonic() + 10
    while _state(pid) not in tuple(states):
        assert time.monotonic() < deadline, f"{pid} never reached {states}: {_state(pid)}"
        time.sleep(0.01)


@pytest.fixture
def daemon_tree():
    root = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    first, daemon = map(int, root.stdout.readline().split())
    _wait_state(first, "T")
    yield root.pid, first, daemon
    for pid in (daemon, first, root.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    root.wait()


def _exit_when_asked_about(first: int, monkeypatch) -> None:
    """The first time the walk asks whether `first` lives, `first` exits (and is a zombie) before the answer."""
    real, done = tree.alive, []

    def alive(pid: int) -> bool:
        if pid == first and not done:
            done.append(pid)
            os.kill(first, signal.SIGCONT)
            _wait_state(first, "Z")
        return real(pid)

    monkeypatch.setattr(tree, "alive", alive)


def test_a_daemon_handed_up_mid_walk_is_found(daemon_tree, monkeypatch):
    root, first, daemon = daemon_tree
    assert set(tree.descendants(root)) == {first, daemon}  # before the exit: both live, the daemon under `first`
    _exit_when_asked_about(first, monkeypatch)
    found = tree.descendants(root)
    assert daemon in found, f"the daemon {daemon} went up to {root} mid-walk and was missed: {found}"
    assert first not in found  # a zombie has exited
    assert tree._stat(daemon)[1] == str(root)  # it was re-parented, as the kernel does


def test_a_zombie_is_walked_through_not_listed(daemon_tree):
    root, first, daemon = daemon_tree
    os.kill(first, signal.SIGCONT)
    _wait_state(first, "Z")
    assert sorted(tree.descendants(root)) == [daemon]
    assert sorted(tree._descendants_by_scan(root)) == [daemon]
