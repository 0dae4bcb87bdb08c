"""Launchers that re-launch themselves: a framework's command (`axolotl train config.yaml`, `oumi distributed
torchrun ...`, a `llamafactory-cli`-style wrapper) does not build the trainer itself but starts another process that
does (`accelerate launch -m axolotl.cli.train config.yaml`). Inside the capture, a child process whose command is a
distributed launch (accelerate launch, torchrun, `trl grpo|rloo|ppo`) or the running package's own `python -m` or
command is not started: `Relaunch` carries it back to the capture, which runs it in place, as the child would have
run, with the environment the parent gave it. Any other child (a `python prepare_data.py` step, a probe of
`nvidia-smi`, `git rev-parse`) runs as it would.

The world size is the outermost launcher's: a child launch that names no process count keeps the one its parent's
launcher set.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from contextlib import contextmanager
from typing import Any

from .command import LaunchCommand, parse_command

MAX_HOPS = 4  # a launcher that re-launches itself more often than this is going round in circles


class Relaunch(BaseException):
    """A launch the script started as a child process, carried back to the capture (never started)."""

    def __init__(self, command: LaunchCommand, env: dict | None, note: str | None = None):
        super().__init__(command.text)
        self.command, self.env, self.note = command, env, note  # note: the report's words for the hop


def _argv(args: Any, shell: bool) -> list[str] | None:
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        try:
            return shlex.split(text) if shell or " " in text else [text]
        except ValueError:
            return None
    try:
        return [os.fsdecode(a) for a in args]
    except TypeError:
        return None


def _as_launch(argv: list[str] | None, cwd: str | None, own: str | None) -> LaunchCommand | None:
    """The launch `argv` is, when it is one the capture follows; None for any other command, which runs. Followed:
    a distributed launcher (accelerate launch, torchrun, `trl grpo|rloo|ppo`), and `python -m` or a console script
    of the package the capture is running (`own`: a framework re-launching itself). A plain `python helper.py` is a
    script's own step (a data preparation), run as it would be, never taken for the job."""
    if not argv:
        return None
    if argv[0] in ("env", "/usr/bin/env"):  # `env VAR=1 accelerate launch ...`
        argv = [a for a in argv[1:] if "=" not in a or a.startswith("-")]
    try:
        launch = parse_command(tuple(argv), cwd or os.getcwd())
    except Exception:  # InputError (python -c, a missing script), or anything odd: not a launch; it runs
        return None
    if launch.launcher in ("accelerate", "torchrun", "trl"):
        return launch
    top = (launch.module or "").split(".")[0]
    return launch if own and top == own else None


@contextmanager
def followed(own=lambda: None):
    """While the script runs: a child launch is raised as Relaunch instead of started (subprocess.Popen, which
    run/call/check_call use, and the os.exec* family). `own()` is the top-level package being run, when it is one."""
    original_init = subprocess.Popen.__init__
    originals = {name: getattr(os, name) for name in ("execv", "execve", "execvp", "execvpe") if hasattr(os, name)}

    def popen_init(self, args, *rest, **kwargs):
        launch = _as_launch(_argv(args, bool(kwargs.get("shell"))), kwargs.get("cwd"), own())
        if launch is not None:
            raise Relaunch(launch, kwargs.get("env"))
        return original_init(self, args, *rest, **kwargs)

    def exec_of(name):
        def exec_(path, args, *rest):
            launch = _as_launch(_argv(list(args), False), None, own())
            if launch is not None:
                env = rest[0] if rest and name in ("execve", "execvpe") else None
                raise Relaunch(launch, dict(env) if env is not None else None)
            return originals[name](path, args, *rest)
        return exec_

    subprocess.Popen.__init__ = popen_init
    for name in originals:
        setattr(os, name, exec_of(name))
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original_init
        for name, fn in originals.items():
            setattr(os, name, fn)


def apply_env(env: dict | None) -> None:
    """The environment a parent gave its child launch (its ACCELERATE_* and CUDA settings), in this process."""
    if env is None:
        return
    for key, value in env.items():
        if isinstance(key, str) and isinstance(value, str):
            os.environ[key] = value
