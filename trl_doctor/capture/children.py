"""Every process the launch starts, whatever starts it: while the capture runs a launch, each Python process it (or
any of its children, a shell step, a launcher the capture does not know) starts is a scout (capture/child.py), through
the interpreter's own start-up: this folder's `sitecustomize` is first on PYTHONPATH in the environment every child
inherits, and in any environment a child is given explicitly.

A scout never trains. It stops at the entry of the first trainer constructor it reaches, or at an optimizer step, or
reports the exception that ended it. The capture then runs the process that built a trainer in its own place
(`Relaunch`, with that process's command, folder and environment), as it runs a launcher it knows, so that the
trainer is built here, under the full hooks; the other scouts are ended. Where the launch ends without a trainer, the
scout's exception is the cause, not its parent's exit status.

Linux: the scouts are found by their environment in /proc (runtime/tree.py) and ended; elsewhere they end themselves.
This module is light: no torch, transformers or TRL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor.runtime import tree as _tree

from . import child
from . import unscouted as _unscouted

BOOT = Path(__file__).resolve().parent.parent / "data" / "boot"
ROOT = str(Path(__file__).resolve().parent.parent.parent)  # the folder `import trl_doctor` finds this package in
# what a distributed launcher gives each rank: the in-place run sets its own (capture/world.py)
_RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
             "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS")


# A child started with -I or -E ignores PYTHONPATH, and so the boot folder: site-packages' .pth files still run. This
# one line, in the check's own layer over this Python's site-packages (runtime/hold.py: seed_site), runs the boot
# file's scout in such a child while the capture runs (its channel variable set); any other process reads it as
# nothing. A child with -S (no site at all) or another Python installation reads neither: no scout runs in it, and
# the backstop (capture/unscouted.py) stops it before it can train, naming it.
SCOUT_PTH_TEXT = (
    'import os, sys; (sys.flags.ignore_environment and os.environ.get("TRL_DOCTOR_CHILD_CHANNEL") and '
    'os.environ.get("TRL_DOCTOR_CHILD_BOOT") and __import__("runpy").run_path(os.path.join('
    'os.environ["TRL_DOCTOR_CHILD_BOOT"], "sitecustomize.py"), run_name="trl_doctor_boot"))\n')


def _seed_site() -> None:
    """The .pth above, where the worker holds folders in a mount namespace of its own (Linux); else nothing."""
    from trl_doctor.runtime import hold as _hold
    from trl_doctor.runtime import tmp as _tmp

    check = os.environ.get(_tmp.DIR_ENV)
    if not check or not sys.platform.startswith("linux") or os.environ.get("TRL_DOCTOR_HOLD") == "0":
        return
    try:
        _hold.seed_site(SCOUT_PTH_TEXT, Path(check) / "held-site")
    except Exception:  # noqa: BLE001 - a system this has not met: the PYTHONPATH boot alone, as before
        pass


class ScoutStopped(BaseException):
    """Raised in the script when a process it waited for turns out to have been stopped at a trainer or a step: the
    launch's own code has nothing more to do (a BaseException, so the script's `except Exception` cannot swallow it)."""

    def __init__(self, report: "Report"):
        super().__init__(report.command)
        self.report = report


@dataclass(frozen=True)
class Report:
    """What one scout said (child.py writes it): `trainer`, `step` or `failed`."""

    event: str
    pid: int
    ppid: int
    time: float
    argv: tuple[str, ...]
    cwd: str
    env: dict = field(default_factory=dict)
    trainer: str | None = None
    where: tuple[str, int] | None = None
    error: dict | None = None
    optimizer: str | None = None

    @classmethod
    def read(cls, path: Path) -> "Report | None":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            where = data.get("where")
            return cls(str(data["event"]), int(data["pid"]), int(data.get("ppid") or 0), float(data["time"]),
                       tuple(str(a) for a in data.get("argv") or ()), str(data.get("cwd") or ""),
                       {str(k): str(v) for k, v in (data.get("env") or {}).items()},
                       data.get("trainer"), (str(where[0]), int(where[1])) if where else None,
                       data.get("error") if isinstance(data.get("error"), dict) else None, data.get("optimizer"))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None

    @property
    def command(self) -> str:
        import shlex

        argv = list(self.argv)
        if argv:
            argv[0] = os.path.basename(argv[0])
        return " ".join(shlex.quote(a) for a in argv)

    @property
    def rank(self) -> int:
        try:
            return int(self.env.get("RANK") or self.env.get("LOCAL_RANK") or 0)
        except ValueError:
            return 0

    def world(self) -> tuple[int, int]:
        """(processes on this machine, machines) of the launch that started this process: (1, 1) outside one."""
        try:
            world = int(self.env.get("WORLD_SIZE") or 1)
            local = int(self.env.get("LOCAL_WORLD_SIZE") or world)
        except ValueError:
            return 1, 1
        local = max(1, min(local, world))
        return local, max(1, world // local)

    def launch_argv(self) -> list[str]:
        """The command that runs this process in the capture's place: `python ARGS` as it was started, or, for a rank
        of a distributed launch, torchrun at the launch's process count."""
        args = list(self.argv[1:])
        while args and args[0].startswith("-") and args[0] != "-m":  # python's own options (-u, -X dev ...)
            args = args[1 + (args[0] in ("-W", "-X")):]
        local, machines = self.world()
        if local * machines > 1:
            return ["torchrun", "--nproc_per_node", str(local), "--nnodes", str(machines), *args]
        return ["python", *args]

    def launch_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if k not in _RANK_ENV}

    def relaunch(self, outer: str) -> Any:
        """This scout's process as the launch the capture runs in its place (capture/relaunch.Relaunch), with the
        report's words for the hand-over; InputError for a step reached without a trainer, or a process the capture
        cannot run (`python -c`). `outer` names the launch as the report does."""
        from trl_doctor.errors import InputError
        from trl_doctor.wording import one_line

        from .command import parse_command
        from .relaunch import Relaunch

        local, machines = self.world()
        ranks = f", rank {self.rank} of {local * machines}" if local * machines > 1 else ""
        started = f"`{one_line(self.command, 200)}` (pid {self.pid}{ranks}), a process {outer} started,"
        where = f" at {self.where[0]}:{self.where[1]}" if self.where else ""
        if self.event == "step":
            raise InputError(f"{started} reached an optimizer step ({self.optimizer}{where}) without constructing a "
                             "TRL trainer: it was stopped before the step (trl-doctor checks launches that build "
                             "GRPOTrainer, RLOOTrainer, PPOTrainer or a subclass, and never trains)")
        argv = self.launch_argv()
        try:
            launch = parse_command(tuple(argv), self.cwd)
        except InputError as exc:
            raise InputError(f"{started} built {self.trainer}{where}, but cannot be run in the doctor's place: "
                             f"{exc}") from None
        run_as = "" if argv[1:] == list(self.argv[1:]) else f" (as `{one_line(' '.join(argv), 200)}`)"
        note = (f"{started} reached {self.trainer}'s constructor{where}: it was stopped there, before any "
                f"training, and run here in its place{run_as}")
        return Relaunch(launch, self.launch_env(), note=note)

    def error_words(self) -> str:
        error = self.error or {}
        text = f"{error.get('type', 'error')}: {error.get('message', '')}".rstrip(": ")
        where, raised = error.get("where"), error.get("raised")
        places = []
        if where:
            places.append(f"at {where[0]}:{where[1]}")
        if raised and raised != where:
            places.append(f"raised at {raised[0]}:{raised[1]}")
        return text + (f" ({', '.join(places)})" if places else "")


class Children:
    """`with Children(options) as children:` while the launch runs. `built()` is the scout that reached a trainer
    (the lowest rank's, else the first), `stepped()` one that reached an optimizer step, `failure()` the first
    exception a scout died of."""

    def __init__(self, *, load_weights: bool, has_cuda: bool, trust_remote_code: bool):
        from trl_doctor.runtime import network

        # the hosts the worker's network guard lets through (none unless --allow-host): each scout guards the same
        allowed = network.guarded()
        self.options = {"load_weights": load_weights, "has_cuda": has_cuda, "trust_remote_code": trust_remote_code,
                        "allow_hosts": list(allowed) if allowed is not None else None}
        self.channel: Path | None = None
        self._saved: dict[str, str | None] = {}
        self._undo: list = []
        self._stop = threading.Event()
        self._kept: list[Report] | None = None
        self._own = threading.local()  # set while the doctor's own code waits (ending scouts reaps them)

    # -- the environment every child inherits, and any a child is given ----------------------------------------
    def _env(self) -> dict[str, str]:
        return {child.CHANNEL_ENV: str(self.channel), child.OPTIONS_ENV: json.dumps(self.options),
                child.BOOT_ENV: str(BOOT), child.ROOT_ENV: ROOT}

    def _into(self, env: Any) -> Any:
        """A copy of an environment a child is given, made a scout's."""
        if env is None:
            return None
        try:
            out = dict(env)
        except (TypeError, ValueError):
            return env
        bytes_keys = any(isinstance(k, bytes) for k in out)
        own = self._env()
        path = out.get(b"PYTHONPATH" if bytes_keys else "PYTHONPATH")
        path = os.fsdecode(path) if path else ""
        own["PYTHONPATH"] = os.pathsep.join([str(BOOT), *[p for p in path.split(os.pathsep) if p and p != str(BOOT)]])
        for key, value in own.items():
            out[os.fsencode(key) if bytes_keys else key] = os.fsencode(value) if bytes_keys else value
        return out

    def __enter__(self) -> "Children":
        _seed_site()
        self.channel = Path(tempfile.mkdtemp(prefix="trl-doctor-children-"))
        own = self._into(dict(os.environ))
        for key in (*child.OWN_ENV, "PYTHONPATH"):
            self._saved[key] = os.environ.get(key)
            os.environ[key] = own[key]
        self._patch_spawns()
        threading.Thread(target=self._watch, daemon=True, name="trl-doctor-children").start()
        return self

    def reassert(self) -> None:
        """After the environment of a launch run in place was applied: its children are scouts too."""
        own = self._into(dict(os.environ))
        for key in (*child.OWN_ENV, "PYTHONPATH"):
            os.environ[key] = own[key]

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        while self._undo:
            self._undo.pop()()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        # a scout still running now was started by the launch that built the trainer (a reward server, a data
        # worker): it stays for the rules, as any process the script starts does, and ends with the check's tree;
        # the scouts of a launch handed over were ended at the hand-over (capture/run.py)
        self._kept = self.reports()  # what they said outlives their folder
        if self.channel is not None:
            shutil.rmtree(self.channel, ignore_errors=True)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def _patch_spawns(self) -> None:
        """A child given an environment of its own (Popen(env=...), os.execve/spawnve/posix_spawn) gets the scout's
        keys in it too; a wait for a child that returns once a scout has reached a trainer or a step (Popen.wait,
        which run/call/communicate use; os.waitpid, os.wait, os.wait4, os.system) stops the script there
        (ScoutStopped)."""
        into, decided = self._into, self._decided_report
        original_init, original_wait = subprocess.Popen.__init__, subprocess.Popen.wait

        def popen_init(popen, args, *rest, **kwargs):
            if kwargs.get("env") is not None:
                kwargs["env"] = into(kwargs["env"])
            return original_init(popen, args, *rest, **kwargs)

        def with_env_at(original, at: int):
            def call(*args, **kwargs):
                args = list(args)
                if len(args) > at:
                    args[at] = into(args[at])
                elif "env" in kwargs:
                    kwargs["env"] = into(kwargs["env"])
                return original(*args, **kwargs)
            return call

        def stopping(original):
            def call(*args, **kwargs):
                out = original(*args, **kwargs)
                report = decided()
                if report is not None:
                    raise ScoutStopped(report)
                return out
            return call

        self._patch(subprocess.Popen, "__init__", popen_init)
        self._patch(subprocess.Popen, "wait", stopping(original_wait))
        for name, at in (("execve", 2), ("execvpe", 2), ("spawnve", 3), ("spawnvpe", 3), ("posix_spawn", 2),
                         ("posix_spawnp", 2)):
            if hasattr(os, name):
                self._patch(os, name, with_env_at(getattr(os, name), at))
        for name in ("waitpid", "system", "wait", "wait4"):
            if hasattr(os, name):
                self._patch(os, name, stopping(getattr(os, name)))

    def _decided_report(self) -> "Report | None":
        """The scout that ends the script's wait, seen from the main thread only (a pool's helper thread polling its
        workers is not the script's own wait)."""
        if threading.current_thread() is not threading.main_thread() or getattr(self._own, "waiting", False):
            return None
        return self.decided()

    def consume(self) -> None:
        """The scouts' reports have been acted on (their process is run in the capture's place): forget them, so that
        the launch run in place starts with none."""
        if self.channel is not None:
            for path in self.channel.glob("*.json"):
                try:
                    path.unlink()
                except OSError:
                    pass

    # -- what the scouts said ------------------------------------------------------------------------------------
    def reports(self) -> list[Report]:
        if self._kept is not None:
            return self._kept
        if self.channel is None:
            return []
        found = [Report.read(p) for p in sorted(self.channel.glob("*.json"))]
        return sorted((r for r in found if r is not None), key=lambda r: r.time)

    def built(self) -> Report | None:
        trainers = [r for r in self.reports() if r.event == "trainer"]
        return min(trainers, key=lambda r: (r.rank, r.time)) if trainers else None

    def stepped(self) -> Report | None:
        return next((r for r in self.reports() if r.event == "step"), None)

    def failure(self) -> Report | None:
        return next((r for r in self.reports() if r.event == "failed"), None)

    def failure_words(self) -> str:
        """`: its child process `python x.py` (pid 12) failed: ImportError: ... (at x.py:3)`: the exception a process
        the launch started died of (the first, where several did: a launcher's own failure follows its rank's)."""
        from trl_doctor.wording import one_line

        report = self.failure()
        if report is None:
            return ""
        return f": its child process `{one_line(report.command, 200)}` (pid {report.pid}) failed: " \
               f"{one_line(report.error_words(), 700)}"

    def taken_over(self, outer: str) -> Any:
        """The launch's own code has ended (or stopped on a scout it waited for): the process a scout found building
        the trainer, as the launch to run in its place (Report.relaunch); None when no scout reached a trainer or a
        step."""
        report = self.decided()
        return report.relaunch(outer) if report is not None else None

    def decided(self) -> Report | None:
        """The scout that reached a trainer (the lowest rank's) or else a step, if any: then the launch's processes
        have nothing more to do."""
        return self.built() or self.stepped()

    def _watch(self) -> None:
        """Once a scout has reached a trainer or a step, end the others (a launcher waiting on its ranks, a parent
        script waiting on its child), so that the capture takes over at once; meanwhile stop any Python process of the
        launch that runs without a scout (capture/unscouted.py: a child started with -S...)."""
        seen: set[int] = set()
        ticks = 0
        while not self._stop.wait(0.1):
            if self.decided():
                self.end_scouts()
            ticks += 1
            if ticks % 5 == 0 and self.channel is not None and sys.platform.startswith("linux"):
                _unscouted.stop_unscouted(self.channel, child.CHANNEL_ENV, seen)

    def end_scouts(self) -> list[int]:
        """End every scout; those that are this process's children are reaped, through the unhooked waits (the
        doctor's own wait is not the launch's: it must not stop on a decided scout)."""
        if self.channel is None:
            return []
        self._own.waiting = True
        try:
            return _tree.end(None, str(self.channel), key=child.CHANNEL_ENV)
        finally:
            self._own.waiting = False
