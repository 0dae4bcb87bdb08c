"""What the installed TRL provides: its trainer and config classes, and the source text of its trainers.

Rules decide version-dependent questions by reading what the installed release actually does (its
source), not only from a table of versions.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path

# Where each trainer has lived across TRL releases, newest first.
_LOCATIONS = {
    "grpo": [("trl", "GRPOTrainer", "GRPOConfig")],
    "rloo": [("trl", "RLOOTrainer", "RLOOConfig")],
    "ppo": [("trl.experimental.ppo", "PPOTrainer", "PPOConfig"), ("trl", "PPOTrainer", "PPOConfig")],
}
_SOURCE_FILES = {
    "grpo": ["trainer/grpo_trainer.py"],
    "rloo": ["trainer/rloo_trainer.py"],
    "ppo": ["experimental/ppo/ppo_trainer.py", "trainer/ppo_trainer.py"],
}


def _lookup(trainer: str, index: int):
    for module_name, *names in _LOCATIONS[trainer]:
        try:
            module = importlib.import_module(module_name)
            return getattr(module, names[index])
        except (ImportError, AttributeError):
            continue
    return None


def trainer_class(trainer: str):
    return _lookup(trainer, 0)


def config_class(trainer: str):
    return _lookup(trainer, 1)


def field_default(cls, key: str, missing=None):
    """The default of dataclass `cls`'s field `key` (its default_factory called), or `missing`."""
    for f in dataclasses.fields(cls):
        if f.name == key:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
    return missing


def script_fields() -> set[str]:
    """Fields of TRL's ScriptArguments and ModelConfig: keys `trl <trainer> --config` accepts."""
    import trl

    names: set[str] = set()
    for cls_name in ("ScriptArguments", "ModelConfig"):
        cls = getattr(trl, cls_name, None)
        if cls is not None and dataclasses.is_dataclass(cls):
            names |= {f.name for f in dataclasses.fields(cls)}
    return names


def trl_root() -> Path | None:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def trainer_source(trainer: str) -> tuple[str, str] | None:
    """(relative path, text) of the installed trainer's module, read without importing TRL."""
    root = trl_root()
    if root is None:
        return None
    for rel in _SOURCE_FILES[trainer]:
        path = root / rel
        if path.is_file():
            return f"trl/{rel}", path.read_text(encoding="utf-8")
    return None
