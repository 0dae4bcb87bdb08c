"""Running the user's launch command in the worker, under the hooks, until it builds its trainer.

Each launcher's own parser reads its own options: accelerate's `launch_command_parser`, torchrun's
`get_args_parser`, and TRL's CLI itself (`trl grpo ...` runs `trl.cli.main`, whose call to accelerate's
`launch_command` is served here: the script runs once, in this process, as the main process would). What the
launcher says about the job (the process count, the accelerate config) becomes launch facts.
"""

from __future__ import annotations

import io
import os
import re
import runpy
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

from trl_doctor.errors import InputError
from . import relaunch, world
from .children import Children
from .command import LaunchCommand, check_script
from .hooks import Hooks, Recorder, StepReached, TrainerBuilt
from .user_files import is_user_file, set_user_roots, set_user_roots_to, user_frame
from trl_doctor.wording import one_line


@dataclass
class Launched:
    """How the launcher starts the training script."""

    script: str | None
    module: str | None
    args: list[str]
    entry: str | None = None  # a console script's function in `module` (run as the command's own script runs it)
    command_name: str | None = None  # the command typed (`oumi`), for an entry
    processes: int | None = None
    processes_from: str | None = None
    machines: int | None = None  # accelerate --num_machines, torchrun --nnodes
    machines_from: str | None = None
    accelerate_config: str | None = None  # the file `accelerate launch` reads (--config_file), when named
    one_process: bool = False  # a plain `python` or console-script launch: no distributed launcher, one process
    world: int = 1  # the world size the script ran at (rank 0 of the launch's processes, or 1: capture/world.py)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        if self.entry is not None or self.command_name:
            return self.command_name or f"{self.module}:{self.entry}"
        return os.path.basename(self.script) if self.script else f"-m {self.module}"


@dataclass
class Captured:
    command: LaunchCommand
    launched: Launched
    recorder: Recorder


def capture(command: LaunchCommand, *, timeout: float, load_weights: bool, has_cuda: bool, trust_remote_code: bool,
            verbose: bool = False, on_timeout: Callable[[str], None] | None = None, asked_processes: int | None = None,
            launch_gpus: int = 0, one_process_why: str | None = None) -> Captured:
    """Run `command` until it builds a TRL trainer; InputError (exit 2) when it fails, ends or hangs first.
    `asked_processes` is --num-processes; `launch_gpus` the launch machine's GPUs (--target's, else this machine's):
    with them the script runs as rank 0 of the launch's processes (see world.py)."""
    recorder = Recorder()
    seen: dict[str, Any] = {}  # "launched": Launched, "children": Children, "relaunched": list[str], ...

    hooks = Hooks(recorder, load_weights=load_weights, has_cuda=has_cuda, trust_remote_code=trust_remote_code)

    def run_script(launched: Launched) -> None:
        outer = seen.get("launched")
        if outer is not None and not launched.one_process and not launched.processes and _processes(outer) > 1:
            launched.processes, launched.processes_from = outer.processes, outer.processes_from  # a re-launch without
            launched.accelerate_config = launched.accelerate_config or outer.accelerate_config  # its own: the outer's
        seen["launched"] = launched
        set_user_roots([command.cwd, _launched_folder(launched, command.cwd)])
        n = _world(launched, asked_processes, launch_gpus)
        hooks.processes = n
        _run_as_rank_zero(launched, n, hooks, has_cuda, one_process_why)

    tail = _Tail()
    watchdog = _Watchdog(timeout, command, seen, on_timeout)
    old_cwd, old_argv, old_path = os.getcwd(), sys.argv[:], sys.path[:]
    old_roots = set_user_roots([command.cwd])
    os.chdir(command.cwd)
    children = Children(load_weights=load_weights, has_cuda=has_cuda, trust_remote_code=trust_remote_code)
    seen["children"] = children
    try:
        with hooks, _stderr_to(tail), watchdog, relaunch.followed(lambda: _own_package(seen)), children:
            _launch_following(command, run_script, seen)
    except TrainerBuilt:
        launched = seen["launched"]
        if recorder.built not in (None, "train"):
            assert recorder.trainer_cls is not None  # recorded before its construction ran
            launched.notes.append(f"{recorder.trainer_cls.__qualname__}'s construction raised {recorder.built} here "
                                  "(its model is on the meta device unless --load-weights): it is judged on what it "
                                  "was given")
        if seen.get("relaunched"):
            launched.notes.append(seen.get("relaunch_note") or (
                f"{_shown(command, {})} re-launched itself as `{seen['relaunched'][-1]}`; that launch was followed to "
                "the process that built the trainer"))
        return Captured(command, launched, recorder)
    except StepReached as exc:
        raise InputError(f"{_shown(command, seen)} reached an optimizer step ({exc}) without constructing a TRL "
                         "trainer: stopped before it (trl-doctor checks launches that build GRPOTrainer, RLOOTrainer, "
                         "PPOTrainer or a subclass, and never trains)") from None
    except SystemExit as exc:
        code = exc.code
        if code in (None, 0):
            raise InputError(f"{_shown(command, seen)} finished without constructing a TRL trainer "
                             f"(GRPOTrainer, RLOOTrainer, PPOTrainer or a subclass){children.failure_words()}") from None
        said = children.failure_words() or _said(exc, tail)
        raise InputError(f"{_shown(command, seen)} exited with status {code} before constructing a TRL trainer"
                         f"{_where(exc)}{said}{_no_gpu_hint(exc, has_cuda)}") from None
    except (InputError, world.NeedsOneProcess):
        raise
    except BaseException as exc:
        from .async_grpo import record_refusal
        from .hooks import _constructor_line

        if record_refusal(exc, recorder, _constructor_line):  # TRL's AsyncGRPOTrainer refused the script's: a finding
            return Captured(command, seen["launched"], recorder)
        message = f"{_shown(command, seen)} failed {_when(exc, recorder)}: {type(exc).__name__}: " \
                  f"{one_line(exc)}{_where(exc)}{children.failure_words()}{_no_gpu_hint(exc, has_cuda)}"
        if not load_weights and _meta_weights(exc):
            message = (f"{_shown(command, seen)} computed with its model's weights before constructing a TRL trainer "
                       f"({type(exc).__name__}: {one_line(exc)}{_where(exc)}): the capture builds models without "
                       "weights (meta device) until a trainer is constructed; rerun with --load-weights to run the "
                       "script's own code with them")
        if verbose:
            message += "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
        raise InputError(message) from None
    finally:
        os.chdir(old_cwd)
        sys.argv[:] = old_argv
        sys.path[:] = old_path
        set_user_roots_to(old_roots)
    raise InputError(f"{_shown(command, seen)} finished without constructing a TRL trainer "
                     f"(GRPOTrainer, RLOOTrainer, PPOTrainer or a subclass){children.failure_words()}")


def _when(exc: BaseException, recorder: Recorder) -> str:
    """`before constructing a TRL trainer`, or, for a trainer whose own __init__ replaces TRL's and ran on past
    transformers' constructor (capture/hooks.py: _build_to_train), whether it failed in that __init__ or after it."""
    if recorder.built != "constructing" or recorder.trainer_cls is None:
        return "before constructing a TRL trainer"
    cls = f"{recorder.trainer_cls.__module__}.{recorder.trainer_cls.__qualname__}"
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), recorder.trainer_cls):
            return f"while constructing its trainer, {cls} (in its own __init__, which replaces TRL's)"
        tb = tb.tb_next
    return f"after constructing its trainer, {cls}, before train()"


_META = re.compile(r"\bmeta\b")  # the word, not "metadata"


def _meta_weights(exc: BaseException | None) -> bool:
    """Whether an error is the capture's own making: a script that runs its model (generate, a pipeline) before any
    trainer meets weights the capture left on the meta device. torch says so in words ("Cannot copy out of meta
    tensor; no data!"), or not (transformers 4.48's generate under autocast: "unsupported scalarType"); then a frame
    the error passed through holds a meta tensor or a module with meta weights."""
    seen = 0
    while exc is not None and seen < 8:
        text = str(exc).lower()
        if _META.search(text) and ("tensor" in text or "device" in text) or _meta_in_frames(exc.__traceback__):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _meta_in_frames(tb) -> bool:
    """Whether a library frame below the script's last own frame (the computation the script called: generate, a
    pipeline, a forward) holds a meta tensor or a module with meta weights. The script's own frames are not read: its
    globals hold the meta model whatever its error is."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    from .machine import _on_meta

    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    last_own = max((i for i, f in enumerate(frames) if is_user_file(f.f_code.co_filename)), default=None)
    if last_own is None:
        return False
    for frame in frames[last_own + 1:last_own + 65]:
        for value in list(frame.f_locals.values())[:64]:
            try:
                if isinstance(value, torch.Tensor) and value.is_meta:
                    return True
                if isinstance(value, torch.nn.Module) and _on_meta(value):
                    return True
            except Exception:  # a value whose checks raise: not evidence either way
                continue
    return False


# -- the launchers -----------------------------------------------------------------------------------------------

def _own_package(seen: dict) -> str | None:
    """The top-level package the capture is running (`-m pkg.train`, a console script's module), if any."""
    launched = seen.get("launched")
    return (launched.module or "").split(".")[0] or None if launched is not None else None


def _launch_following(command: LaunchCommand, run_script: Callable[[Launched], None], seen: dict) -> None:
    """Run the launch; where it re-launches itself (a framework's command starting `accelerate launch -m ...`),
    run that child launch in its place, up to relaunch.MAX_HOPS times."""
    hops: list[str] = []
    children: Children = seen["children"]
    while True:
        try:
            _launch(command, run_script)
            child = children.taken_over(_shown(command, seen))  # a scout of the launch reached the trainer: its process next
        except relaunch.Relaunch as caught:
            child = caught
        except (TrainerBuilt, InputError, world.NeedsOneProcess, StepReached):
            raise
        except BaseException:  # the launch's code ended on an error, or stopped on a scout it waited for
            child = children.taken_over(_shown(command, seen))
            if child is None:
                raise
        if child is None:
            return
        hops.append(child.command.text)
        if len(hops) > relaunch.MAX_HOPS:
            raise InputError(f"{_shown(command, seen)} re-launched itself {len(hops)} times ({' -> '.join(hops[:3])} "
                             "...): no trainer was constructed") from None
        children.end_scouts()
        children.consume()
        relaunch.apply_env(child.env)
        children.reassert()
        seen["relaunched"] = hops[:]
        seen["relaunch_note"] = child.note
        command = child.command
        os.chdir(command.cwd)


def _launch(command: LaunchCommand, run_script: Callable[[Launched], None]) -> None:
    argv = list(command.argv)
    if command.launcher == "python":
        run_script(Launched(command.script, command.module, list(command.script_args), processes=1, one_process=True,
                            processes_from=f"`{_python_words(command)}` runs one process (no distributed launcher)"))
    elif command.launcher == "entry":
        name = os.path.basename(argv[0])
        run_script(Launched(None, command.module, list(command.script_args), entry=command.entry, command_name=name,
                            processes=1, one_process=True,
                            processes_from=f"`{name}` runs in one process (no distributed launcher)"))
    elif command.launcher in ("accelerate", "torchrun"):
        run_script(launcher_reading(command))
    else:
        _trl_cli(argv, lambda ns: run_script(from_accelerate(ns, command.cwd, via=f"trl {argv[1]}")))


def launcher_reading(command: LaunchCommand) -> Launched:
    """What a distributed launcher's own parser reads of its command (`accelerate launch`: launch_command_parser,
    `torchrun`: get_args_parser): the script, its arguments, the process and machine counts, the config file."""
    argv = list(command.argv)
    if command.launcher == "accelerate":
        from accelerate.commands.launch import launch_command_parser

        return from_accelerate(_parse(launch_command_parser(), argv[2:], "accelerate launch"), command.cwd)
    from torch.distributed.run import get_args_parser

    return _from_torchrun(_parse(get_args_parser(), argv[1:], "torchrun"), command.cwd)


def _parse(parser, argv: list[str], name: str):
    try:
        return parser.parse_args(argv)
    except SystemExit:
        raise InputError(f"{name}: cannot parse its options: {' '.join(argv)}") from None


def from_accelerate(ns: Any, cwd: str, via: str = "accelerate launch") -> Launched:
    script = ns.training_script
    module = script if getattr(ns, "module", False) else None
    if module is None:
        script = str(check_script(script, cwd))
    launched = Launched(None if module else script, module, list(ns.training_script_args or []))
    if getattr(ns, "num_processes", None):
        launched.processes = int(ns.num_processes)
        launched.processes_from = f"{via} --num_processes {ns.num_processes}"
    if getattr(ns, "config_file", None):
        path = Path(ns.config_file).expanduser()
        launched.accelerate_config = str(path if path.is_absolute() else Path(cwd) / path)
    machines = getattr(ns, "num_machines", None)
    if isinstance(machines, int) and machines > 1:  # num_processes is then every machine's together
        launched.machines, launched.machines_from = machines, f"{via} --num_machines {machines}"
    flags = [f"--{k} {getattr(ns, k)}" for k in ("mixed_precision", "zero_stage")
             if getattr(ns, k, None) not in (None, "no", 1)]
    flags += [f"--{k}" for k in ("use_deepspeed", "use_fsdp", "multi_gpu", "cpu") if getattr(ns, k, False)]
    if flags:
        launched.notes.append(f"{via} flags not read by the doctor (set them in the accelerate config to have them "
                              f"judged): {' '.join(flags)}")
    return launched


def _from_torchrun(ns: Any, cwd: str) -> Launched:
    module = ns.training_script if ns.module else None
    script = None if module else str(check_script(ns.training_script, cwd))
    launched = Launched(script, module, list(ns.training_script_args or []))
    per_node = str(ns.nproc_per_node)
    nodes = str(ns.nnodes).split(":")[-1]
    if per_node.isdigit() and nodes.isdigit():
        launched.processes = int(per_node) * int(nodes)
        launched.processes_from = f"torchrun --nproc_per_node {per_node} --nnodes {ns.nnodes}"
        if int(nodes) > 1:
            launched.machines, launched.machines_from = int(nodes), f"torchrun --nnodes {ns.nnodes}"
    return launched


def _trl_cli(argv: list[str], launch: Callable[[Any], None]) -> None:
    """`trl grpo ARGS` through TRL's own CLI, whatever the installed release does with ARGS; its hand-over to
    `accelerate launch` runs the script here instead of in new processes."""
    import importlib

    import accelerate.commands.launch as accelerate_launch

    for name in [m for m in sys.modules if m == "trl.cli" or m.startswith("trl.cli.")]:
        del sys.modules[name]  # its functions bind accelerate's launch_command when they are defined
    original = accelerate_launch.launch_command
    accelerate_launch.launch_command = launch
    try:
        cli = importlib.import_module("trl.cli")
        sys.argv[:] = ["trl", *argv[1:]]
        cli.main()
    finally:
        accelerate_launch.launch_command = original
        for name in [m for m in sys.modules if m == "trl.cli" or m.startswith("trl.cli.")]:
            del sys.modules[name]


def _run_as_rank_zero(launched: Launched, n: int, hooks: Hooks, has_cuda: bool, one_process_why: str | None) -> str | None:
    """Run the script as rank 0 of `n` processes (world.py); None when it ran so, else why it ran at world size 1:
    the stand-in could not be made, or (`one_process_why`, from an earlier worker) the script's rank set-up needs a
    GPU this machine lacks. A script that stops on that here raises world.NeedsOneProcess: the process is not fit to
    run it again (its modules are half set up), so a fresh worker captures it at one process."""
    if one_process_why is not None and n > 1:
        _at_world(launched, n, one_process_why)
        _run_script(launched)
        return one_process_why
    per_machine = -(-n // max(1, launched.machines or 1))
    try:
        with world.rank_zero_of(n, per_machine, has_cuda) as not_emulated:
            hooks.world_emulated = n > 1 and not_emulated is None
            _at_world(launched, n, not_emulated)
            _run_script(launched)
        return not_emulated
    except (TrainerBuilt, relaunch.Relaunch):
        raise
    except BaseException as exc:
        lacking = hooks.world_emulated and not has_cuda and _lacks_gpu(exc)
        hooks.world_emulated = False
        if not lacking:
            raise
        raise world.NeedsOneProcess(f"{launched.name}'s set-up for {n} ranks needs a GPU this machine lacks "
                                    f"({lacking})") from None


def _at_world(launched: Launched, n: int, why_not: str | None) -> None:
    """Record the world size the script runs at (before it runs: it ends by building its trainer), with a note."""
    launched.world = 1 if why_not else n
    if n > 1:
        launched.notes.append(
            f"the script ran as rank 0 of the launch's {n} processes (WORLD_SIZE={n}, RANK=0, LOCAL_RANK=0, with a "
            "stand-in process group): what it builds per rank is judged as rank 0 builds it" if why_not is None
            else f"the script ran at world size 1, not as rank 0 of the launch's {n} processes: {why_not}")


_NO_GPU = re.compile(r"accelerator device|cuda|nccl|no gpu|gpus? (are|is) (not )?available", re.I)


def _lacks_gpu(exc: BaseException | None) -> str | None:
    """The error (or the one a CLI caught before exiting) when it is this machine's missing GPU, in words."""
    seen = 0
    while exc is not None and seen < 6:
        if not isinstance(exc, SystemExit) and _NO_GPU.search(f"{type(exc).__name__}: {exc}"):
            return f"{type(exc).__name__}: {one_line(exc)}{_where(exc)}"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _no_gpu_hint(exc: BaseException, has_cuda: bool) -> str:
    """What to do when the launch stopped on this machine's missing GPU (a framework's distributed command counting
    the GPUs before it starts its launcher, as `oumi distributed torchrun` does)."""
    if has_cuda or not _lacks_gpu(exc):
        return ""
    return ("; this machine has no GPU: check the launch that command starts on the GPU machine (`torchrun "
            "--nproc_per_node N ...` or `accelerate launch --num_processes N ...`), with --target naming its GPUs")


def _python_words(command: LaunchCommand) -> str:
    return f"python -m {command.module}" if command.module else f"python {os.path.basename(command.script or '')}"


def _world(launched: Launched, asked: int | None, launch_gpus: int) -> int:
    """The launch's world size as its rank 0 sees it, in the order the launch facts decide it: --num-processes, the
    launcher's own count (its flag, its accelerate config; one for a plain python launch), accelerate's default
    config, then one process per GPU of the launch machine (what `accelerate launch` starts without a count)."""
    if asked:
        return int(asked)
    if launched.processes:
        return launched.processes
    n = _processes(launched)
    if n > 1:
        return n
    from ..facts.launch.launcher import default_accelerate_processes

    return default_accelerate_processes() or max(1, launch_gpus)


def _processes(launched: Launched) -> int:
    """The launch's training processes as far as the launcher says: its flag, else its accelerate config."""
    if launched.processes:
        return launched.processes
    if launched.accelerate_config:
        from ..facts.launch.launcher import read_accelerate_config

        return read_accelerate_config(Path(launched.accelerate_config), "--config_file").num_processes or 1
    return 1


def _launched_folder(launched: Launched, cwd: str) -> str | None:
    """The folder of what a launch runs: the script's, or a `-m` module's top-level package, found as `python -m` finds
    it (the current folder first) without importing it (a project installed editable keeps its own files the user's).
    An installed package's command (an entry) is a library's code, never the user's."""
    if launched.command_name:
        return None
    if launched.script:
        return os.path.dirname(os.path.join(cwd, launched.script))
    if not launched.module:
        return None
    import importlib.util

    sys.path.insert(0, cwd)
    try:
        spec = importlib.util.find_spec(launched.module.split(".")[0])
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.remove(cwd)
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else (os.path.dirname(spec.origin) if spec.origin else None)


def _run_script(launched: Launched) -> None:
    if launched.command_name:  # a console script: what its generated script does, `sys.exit(function())`
        import importlib

        sys.argv[:] = [launched.command_name, *launched.args]
        target: Any = importlib.import_module(cast(str, launched.module))  # a console script's module, then its function
        for part in (launched.entry or "").split(".") if launched.entry else ():
            target = getattr(target, part)
        if launched.entry:
            sys.exit(target())
        return
    if launched.module:
        sys.argv[:] = [launched.module, *launched.args]
        sys.path.insert(0, os.getcwd())  # as `python -m` puts the current folder first
        runpy.run_module(launched.module, run_name="__main__", alter_sys=True)
        return
    script = launched.script or ""
    sys.argv[:] = [script, *launched.args]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


# -- reporting what went wrong ------------------------------------------------------------------------------

def _shown(command: LaunchCommand, seen: dict) -> str:
    launched = seen.get("launched")
    if launched is not None:
        return launched.name
    return os.path.basename(command.script) if command.script else " ".join(command.argv[:2])


def _said(exc: SystemExit, tail: "_Tail") -> str:
    """What names the cause of a non-zero exit: the script's own last line on stderr (argparse's error, a printed
    traceback's last line), and the exception it was handling when it exited where that line does not already say it
    (a CLI that logs elsewhere and calls sys.exit(1))."""
    said, caught = tail.last_line(), _caught(exc)
    cause = exc.__context__
    if caught and not (said and cause is not None and one_line(cause)[:80] in said):
        said += caught
    return said


def _caught(exc: SystemExit) -> str:
    """`: after catching ValueError: ... (at train.py:12, raised in trl at ...)` for a sys.exit() called while an
    exception was being handled (a CLI that prints the traceback and exits 1, as oumi's does): the cause, not only
    the status. Empty when the exit was not in an `except` block."""
    cause = exc.__context__
    if cause is None or isinstance(cause, (SystemExit, KeyboardInterrupt)):
        return ""
    return f": after catching {type(cause).__name__}: {one_line(cause)}{_where(cause)}"


def _where(exc: BaseException) -> str:
    """` (at train.py:12)`: the innermost frame of the user's own files in the exception's traceback; when the error
    was raised further in, inside a library, that frame too: ` (at train.py:12, raised in pyarrow at
    pyarrow/error.pxi:92)`."""
    tb, found, last = exc.__traceback__, None, None
    while tb is not None:
        frame = (tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_globals.get("__name__") or "")
        tb = tb.tb_next
        if str(frame[2]).split(".")[0] == "trl_doctor":  # the capture's own wrappers of TRL's classes: never the
            continue  # place an error is said to be raised (a keyword TypeError is raised calling through them)
        if is_user_file(frame[0]):
            found = frame
        last = frame
    if last is None or last is found:
        return f" (at {found[0]}:{found[1]})" if found else ""
    package = str(last[2]).split(".")[0] or os.path.basename(last[0])
    inner = f"raised in {package} at {last[0]}:{last[1]}"
    return f" (at {found[0]}:{found[1]}, {inner})" if found else f" ({inner})"



class _Tail(io.TextIOBase):
    """What the script wrote to stderr, passed on, with its last lines kept (argparse's error, say)."""

    def __init__(self):
        self.target = sys.stderr
        self.kept = ""

    def write(self, text: str) -> int:
        self.kept = (self.kept + text)[-4000:]
        try:
            return self.target.write(text)
        except Exception:
            return len(text)

    def flush(self) -> None:
        try:
            self.target.flush()
        except Exception:
            pass

    def last_line(self) -> str:
        lines = [line.strip() for line in self.kept.splitlines() if line.strip()]
        return f": {lines[-1]}" if lines else ""


class _stderr_to:
    def __init__(self, tail: _Tail):
        self.tail = tail

    def __enter__(self):
        self.old = sys.stderr
        self.tail.target = self.old
        sys.stderr = self.tail

    def __exit__(self, *exc):
        sys.stderr = self.old


class _Watchdog:
    """Ends a script that has not built its trainer within `timeout` seconds, naming where it was."""

    def __init__(self, timeout: float, command: LaunchCommand, seen: dict, on_timeout: Callable[[str], None] | None):
        self.timeout, self.command, self.seen, self.on_timeout = timeout, command, seen, on_timeout
        self.stop = threading.Event()
        self.main = threading.get_ident()

    def __enter__(self):
        threading.Thread(target=self._watch, daemon=True, name="trl-doctor-capture-watchdog").start()

    def __exit__(self, *exc):
        self.stop.set()

    def _watch(self) -> None:
        if self.stop.wait(self.timeout):
            return
        frame = sys._current_frames().get(self.main)
        where = user_frame(frame) if frame is not None else None
        at = f"; it was at {where[0]}:{where[1]}" if where else ""
        message = (f"{_shown(self.command, self.seen)} did not construct a TRL trainer within {self.timeout:g}s "
                   f"(--script-timeout){at}")
        if self.on_timeout is not None:
            self.on_timeout(message)
        os._exit(2)
