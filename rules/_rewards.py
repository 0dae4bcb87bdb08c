"""Resolving `reward_funcs` entries the way TRL's scripts do: a built-in name from `trl.rewards`, or a
dotted import path, looked up from the config file's folder first."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable


class RewardImportError(Exception):
    pass


def resolve_reward(name: str, base_dir: str | Path) -> Callable[..., Any]:
    if "." not in name:
        try:
            import trl.rewards as builtin

            return getattr(builtin, name)
        except (ImportError, AttributeError):
            raise RewardImportError(f"reward function {name!r} is neither a dotted path nor one of trl.rewards") from None
    module_name, _, attr = name.rpartition(".")
    base = str(Path(base_dir).resolve())
    added = base not in sys.path
    if added:
        sys.path.insert(0, base)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise RewardImportError(f"cannot import {module_name!r} for reward {name!r} (looked in {base} first): "
                                f"{type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(base)
    func = getattr(module, attr, None)
    if func is None:
        raise RewardImportError(f"module {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}")
    if not callable(func):
        raise RewardImportError(f"reward {name!r} is not callable")
    return func
