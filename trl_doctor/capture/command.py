"""A launch command as the user would type it (`python train.py ...`, `accelerate launch ... train.py ...`,
`trl grpo --config recipe.yaml`, `torchrun ... train.py ...`), classified without any heavy import.

Only the shape is decided here, so that a command that cannot be run is exit 2 before a worker starts. The
launcher's own options are parsed in the worker, by the launcher's own parser (accelerate's, torchrun's, TRL's).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from trl_doctor.errors import InputError
from trl_doctor.vocabulary import TRAINERS

LAUNCHERS = ("python", "accelerate", "trl", "torchrun")
# the TRL CLI subcommands whose trainers trl-doctor checks (`trl sft`, `trl dpo` train nothing it knows)


@dataclass(frozen=True)
class LaunchCommand:
    argv: tuple[str, ...]  # the whole command, as typed
    launcher: str  # python | accelerate | trl | torchrun | entry (an installed package's command)
    cwd: str  # the folder it runs in (the doctor's own)
    script: str | None = None  # the training script, when the command names it directly (python and -m aside)
    module: str | None = None  # `python -m MODULE`
    script_args: tuple[str, ...] = ()  # for `python`: what follows the script or module
    entry: str | None = None  # a console script's `module:function` (`axolotl train ...`, `oumi train ...`)

    @property
    def text(self) -> str:
        import shlex

        return " ".join(shlex.quote(a) for a in self.argv)

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "launcher": self.launcher, "cwd": self.cwd, "script": self.script,
                "module": self.module, "script_args": list(self.script_args), "entry": self.entry}

    @classmethod
    def from_json(cls, data: dict) -> "LaunchCommand":
        return cls(tuple(data["argv"]), data["launcher"], data["cwd"], data.get("script"), data.get("module"),
                   tuple(data.get("script_args") or ()), data.get("entry"))


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def is_launch_command(target: tuple[str, ...]) -> bool:
    """Whether `trl-doctor check TARGET...` names a command rather than config files: it starts with a launcher
    or a .py script, or with a word that is neither a file nor a config name nor a glob (`make train`: a command
    trl-doctor cannot run, said as such)."""
    if not target:
        return False
    first = target[0]
    if first.endswith(".py") or _launcher(first) is not None:
        return True
    if not os.path.exists(first) and not first.lower().endswith(CONFIG_SUFFIXES) and console_script(first):
        return True  # `trl-doctor check -- oumi` alone is a command too
    return len(target) > 1 and not os.path.exists(first) and not first.lower().endswith(CONFIG_SUFFIXES) \
        and not any(c in first for c in "*?[")


def _launcher(word: str) -> str | None:
    name = os.path.basename(word)
    if re.fullmatch(r"python(\d+(\.\d+)?)?", name):
        return "python"
    return name if name in ("accelerate", "trl", "torchrun") else None


def parse_command(target: tuple[str, ...], cwd: str | None = None) -> LaunchCommand:
    """The command's launcher and, for `python`, its script or module; InputError for what cannot run."""
    argv = tuple(target)
    cwd = cwd or os.getcwd()
    if not argv:
        raise InputError("no launch command after `--`")
    if argv[0].endswith(".py"):  # `trl-doctor check -- train.py ARGS`: run as `python train.py ARGS`
        argv = ("python",) + argv
    launcher = _launcher(argv[0])
    if launcher is None:
        entry = console_script(argv[0])
        if entry is not None:  # an installed package's command (axolotl, oumi): its function, run as its script runs it
            module, _, function = entry.partition(":")
            return LaunchCommand(argv, "entry", cwd, module=module.strip(), script_args=argv[1:],
                                 entry=function.strip() or None)
        raise InputError(f"{argv[0]}: not a launcher trl-doctor can run (python, accelerate launch, trl, torchrun, or "
                         "the command of an installed Python package)")
    if launcher == "python":
        return _python(argv, cwd)
    if launcher == "accelerate":
        if len(argv) < 3 or argv[1] != "launch":
            raise InputError(f"{' '.join(argv[:2])}: only `accelerate launch [OPTIONS] SCRIPT [ARGS]` starts a job")
        return LaunchCommand(argv, "accelerate", cwd)
    if launcher == "trl":
        if len(argv) < 2 or argv[1] not in TRAINERS:
            got = argv[1] if len(argv) > 1 else "nothing"
            raise InputError(f"trl {got}: trl-doctor checks `trl {'|'.join(TRAINERS)} ...` (the RL trainers)")
        return LaunchCommand(argv, "trl", cwd)
    if len(argv) < 2:
        raise InputError("torchrun: no training script")
    return LaunchCommand(argv, "torchrun", cwd)


def console_script(word: str) -> str | None:
    """The `module:function` of an installed package's console script named `word` (`axolotl`, `oumi`,
    `llamafactory-cli`), read from the installed distributions' entry points (nothing is imported); None when no
    installed package has one. A path to the command (`.venv/bin/axolotl`) counts by its name."""
    if os.sep in word and not os.path.isfile(word):
        return None
    name = os.path.basename(word)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name in LAUNCHERS:
        return None
    from importlib.metadata import entry_points

    try:
        found = list(entry_points(group="console_scripts", name=name))
    except Exception:  # a broken distribution's metadata: no such command, as far as the doctor can tell
        return None
    return found[0].value if found else None


# launchers run as modules (ms-swift starts `python -m torch.distributed.run ...`): the launcher's command they are
_LAUNCHER_MODULES = {"torch.distributed.run": ("torchrun",), "accelerate.commands.launch": ("accelerate", "launch")}


def _python(argv: tuple[str, ...], cwd: str) -> LaunchCommand:
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
        if argv[i] in ("-c", "-"):
            raise InputError(f"{argv[0]} {argv[i]}: give the training script as a file (python train.py ...)")
        i += 1 + (argv[i] in ("-W", "-X"))  # options of python's own that take a value
    if i >= len(argv):
        raise InputError(f"{' '.join(argv)}: no training script")
    if argv[i] == "-m":
        if i + 1 >= len(argv):
            raise InputError(f"{' '.join(argv)}: -m names no module")
        launcher = _LAUNCHER_MODULES.get(argv[i + 1])
        if launcher is not None:  # `python -m torch.distributed.run ...` is torchrun, as its own parser reads it
            return parse_command((*launcher, *argv[i + 2:]), cwd)
        return LaunchCommand(argv, "python", cwd, module=argv[i + 1], script_args=argv[i + 2:])
    return LaunchCommand(argv, "python", cwd, script=str(check_script(argv[i], cwd)), script_args=argv[i + 1:])


def check_script(script: str, cwd: str) -> Path:
    p = Path(script).expanduser()
    p = p if p.is_absolute() else Path(cwd) / p
    if not p.exists():
        raise InputError(f"{script}: no such training script")
    if p.is_dir():
        raise InputError(f"{script}: is a folder, not a training script")
    return p.resolve()
