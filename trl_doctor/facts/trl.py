"""What the installed TRL provides and does: its trainer and config classes, the source text of its trainers,
and the readings of that source more than one rule needs.

Rules decide version-dependent questions by reading what the installed release actually does (its
source), not only from a table of versions.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
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


# -- readings of the installed trainers' source ------------------------------------------------------------

TRAINER_CLASS = {"grpo": "GRPOTrainer", "rloo": "RLOOTrainer", "ppo": "PPOTrainer"}

# `x.pad_token = x.eos_token` for the policy's tokenizer (reward tokenizers are handled separately by TRL)
_POLICY_PAD_RE = re.compile(r"^\s*([\w.]+)\.pad_token\s*=\s*\1\.eos_token\b", re.M)


def trainer_sets_pad_to_eos(trainer: str) -> tuple[bool | None, str]:
    """Whether the installed TRL trainer fills a missing pad token with eos, and the evidence (file:line)."""
    found = trainer_source(trainer)
    if found is None:
        return None, f"trl has no {TRAINER_CLASS[trainer]} source installed"
    rel, text = found
    for m in _POLICY_PAD_RE.finditer(text):
        if "reward" in m.group(1):
            continue
        line = text.count("\n", 0, m.start()) + 1
        return True, f"{rel}:{line}: `{m.group(0).strip()}`"
    return False, f"{rel} never assigns the policy tokenizer's pad_token"
