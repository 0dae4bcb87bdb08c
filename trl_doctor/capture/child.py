"""Inside every Python process a launch starts while the capture runs it (capture/children.py puts this module in
each one's interpreter start-up): the process is a scout, never the job.

It runs its command as it would, under the capture's own relaxations (models built on the meta device unless
--load-weights, TrainingArguments let through on a GPU-less machine, moves to a missing GPU kept where they are), and
stops where the job would begin:
- at the entry of any trainer's constructor (transformers' Trainer and every subclass: TRL's trainers, a framework's,
  a script's own), before its `__init__` does any work: it reports `trainer`, and the capture runs this process's
  command in its own place, under its full hooks;
- at an optimizer step reached without a trainer (a training loop of its own): `step`;
- at an exception nothing caught: `failed`, with the exception and where it was raised.
A report is one JSON file written whole into the channel folder; the process then ends at once (os._exit), so no
`finally`, `atexit` or dataloader of its own runs on. The hooks are installed as the modules they patch finish
importing, never by importing them: a process that never imports transformers or torch pays nothing.

This module is imported at every Python start of the launch: stdlib only at its top.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from types import FrameType

CHANNEL_ENV = "TRL_DOCTOR_CHILD_CHANNEL"  # the folder reports go to; the scout is on while it is set
OPTIONS_ENV = "TRL_DOCTOR_CHILD_OPTIONS"  # {"load_weights", "has_cuda", "trust_remote_code"}
BOOT_ENV = "TRL_DOCTOR_CHILD_BOOT"  # the folder put first on PYTHONPATH (its sitecustomize imports this module)
ROOT_ENV = "TRL_DOCTOR_CHILD_ROOT"  # the folder trl_doctor is imported from
OWN_ENV = (CHANNEL_ENV, OPTIONS_ENV, BOOT_ENV, ROOT_ENV)
EXIT_STATUS = 86  # a scout that reported and stopped (its parent sees a failed child)

_lock = threading.Lock()
_reported: list[str] = []


_installed: list[bool] = []


def install() -> None:
    """Make this process a scout (called by the boot folder's sitecustomize when CHANNEL_ENV is set); once: a .pth
    that site reads twice (a virtualenv's lib64 -> lib link names one site-packages twice) installs nothing more."""
    if not os.environ.get(CHANNEL_ENV) or _installed:
        return
    _installed.append(True)
    _hello()
    if hasattr(os, "register_at_fork"):  # a process forked from a scout (a dataloader worker) carries its hooks
        os.register_at_fork(after_in_child=_hello)
    allowed = _options().get("allow_hosts")
    if allowed is not None:  # the worker's network guard, in this process too (runtime/network.py)
        from trl_doctor.runtime import network

        network.guard(network.parse_hosts(allowed))
    sys.meta_path.insert(0, _AfterImport({
        "torch": _on_torch,
        "torch.optim.optimizer": _on_optimizer,
        "transformers.modeling_utils": _on_modeling_utils,
        "transformers.training_args": _on_training_args,
        "transformers.trainer": _on_trainer,
    }))
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        if not issubclass(kind, (KeyboardInterrupt, SystemExit)):
            _report("failed", error=_error(value, tb), stop=False)
        previous(kind, value, tb)

    sys.excepthook = excepthook


def _hello() -> None:
    """Say this process is a scout: `hello-<pid>` in the channel, holding its start time as /proc gives it (with the
    pid, one process, never a later one of the same pid); the capture stops a Python process of the launch that never
    says so (capture/unscouted.py)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            started = f.read().rsplit(b")", 1)[1].split()[19]
    except (OSError, IndexError):  # not Linux: nothing reads it
        return
    path = os.path.join(os.environ.get(CHANNEL_ENV, ""), f"hello-{os.getpid()}")
    try:
        with open(path + ".part", "wb") as f:
            f.write(started)
        os.replace(path + ".part", path)
    except OSError:
        pass


# -- reports ----------------------------------------------------------------------------------------------------

def _report(event: str, stop: bool = True, **fields) -> None:
    """Write one report (atomically: a whole file or none) and, with `stop`, end this process now."""
    with _lock:
        if _reported:  # one report a process: the first says what happened
            if stop:
                os._exit(EXIT_STATUS)
            return
        _reported.append(event)
        channel = os.environ.get(CHANNEL_ENV, "")
        env = {k: v for k, v in os.environ.items() if k not in OWN_ENV}
        boot = os.environ.get(BOOT_ENV)
        if boot and "PYTHONPATH" in env:
            parts = [p for p in env["PYTHONPATH"].split(os.pathsep) if p != boot]
            if parts:
                env["PYTHONPATH"] = os.pathsep.join(parts)
            else:
                del env["PYTHONPATH"]
        record = {"version": 1, "event": event, "pid": os.getpid(), "ppid": os.getppid(), "time": time.time(),
                  "argv": list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]),
                  "executable": sys.executable, "cwd": os.getcwd(), "env": env, **fields}
        try:
            path = os.path.join(channel, f"{event}-{os.getpid()}-{time.monotonic_ns()}.json")
            with open(path + ".part", "w", encoding="utf-8") as f:
                json.dump(record, f, default=repr)
            os.replace(path + ".part", path)
        except OSError:
            pass
    if stop:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # a closed or replaced stream: nothing more to say
            pass
        os._exit(EXIT_STATUS)


def _error(value: BaseException, tb) -> dict:
    """The exception in words, with the innermost frame of the process's own code and the innermost of all."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    own = [f for f in frames if not _library(f[0])]
    text = " ".join(str(value).split())[:600]
    return {"type": type(value).__name__, "message": text, "where": list(own[-1]) if own else None,
            "raised": list(frames[-1]) if frames else None}


def _library(path: str) -> bool:
    return "site-packages" in path or "dist-packages" in path or path.startswith("<") or \
        path.startswith(os.path.dirname(os.__file__))


def _caller(skip: int = 2) -> list | None:
    """The innermost frame outside the libraries (the line that built the trainer, or stepped)."""
    frame: FrameType | None = sys._getframe(skip)
    first = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<"):
            if not _library(name) and "trl_doctor" not in name:
                return [name, frame.f_lineno]
            first = first or [name, frame.f_lineno]
        frame = frame.f_back
    return first


# -- the hooks, installed as their modules finish importing ---------------------------------------------------------

def _options() -> dict:
    try:
        return dict(json.loads(os.environ.get(OPTIONS_ENV) or "{}"))
    except (ValueError, TypeError):
        return {}


def _hooks():
    """The capture's own hooks object (its relaxations), with a recorder nobody reads."""
    from trl_doctor.capture.hooks import Hooks, Recorder

    options = _options()
    return Hooks(Recorder(), load_weights=bool(options.get("load_weights")), has_cuda=bool(options.get("has_cuda")),
                 trust_remote_code=bool(options.get("trust_remote_code")))


def _on_torch(module) -> None:
    from trl_doctor.capture.machine import MachinePatches

    hooks = _hooks()
    MachinePatches(hooks.recorder.machine, hooks.has_cuda).__enter__()


def _on_optimizer(module) -> None:
    register = getattr(module, "register_optimizer_step_pre_hook", None)
    if register is None:
        return

    def stop(optimizer, args, kwargs):
        _report("step", optimizer=type(optimizer).__name__, where=_caller(2))

    register(stop)


def _on_modeling_utils(module) -> None:
    hooks = _hooks()
    if hooks.load_weights:
        return
    model = module.PreTrainedModel
    original = model.__dict__["from_pretrained"].__func__
    model.from_pretrained = classmethod(hooks._from_pretrained(original))


def _on_training_args(module) -> None:
    arguments = module.TrainingArguments
    arguments.__post_init__ = _hooks()._post_init(arguments.__post_init__)


def _on_trainer(module) -> None:
    """Stop at the entry of transformers' Trainer constructor and of every subclass's own (defined later: TRL's,
    a framework's), whichever runs first."""
    trainer = module.Trainer
    trainer.__init__ = _stopping(trainer.__init__)
    previous = trainer.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(trainer, cls).__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _stopping(cls.__dict__["__init__"])

    trainer.__init_subclass__ = classmethod(__init_subclass__)


def _stopping(init):
    def __init__(self, *args, **kwargs):
        cls = type(self)
        _report("trainer", trainer=f"{cls.__module__}.{cls.__qualname__}", where=_caller(2))

    __init__.__wrapped__ = init
    return __init__


class _AfterImport:
    """A finder that runs a callback once a module has finished executing (the loader's exec_module, wrapped)."""

    def __init__(self, callbacks: dict):
        self.callbacks = dict(callbacks)

    def find_spec(self, name, path=None, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        callback = self.callbacks.pop(name)
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            try:
                callback(module)
            except Exception as exc:  # the job would not have met this: the scout cannot pretend it is the job
                _report("failed", error={"type": "ScoutError", "message": f"trl-doctor could not hook {name} in this "
                                         f"process: {type(exc).__name__}: {exc}"[:600], "where": None, "raised": None})

        loader.exec_module = exec_module
        return spec
