"""A rule's result on a launch command, pointed at what the user can change.

A finding about a key the script computed (it is in no file the script reads) points at the script line that
constructed the trainer, and a fix that would write that key into a config file becomes `manual`: the
script would not read it. A key set in the recipe the script was given (`--config recipe.yaml`, where the
script's value is the recipe's) keeps its place in the recipe and its fix.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from trl_doctor.protocol import Captured
from trl_doctor.types import Fix, Location, Result, manual


def describe(cfg: Any, live: Any) -> Captured:
    """What the check captured, for the reports (the worker's `captured` message)."""
    cls = live.trainer_cls
    return Captured(
        command=live.command,
        trainer=cfg.trainer,
        trainer_class=f"{cls.__module__}.{cls.__qualname__}" if cls is not None else None,
        constructed_at=f"{live.where[0]}:{live.where[1]}" if live.where else None,
        script=live.script,
        recipe=live.recipe,
        relaxed={k: why for k, (_, why) in [*live.relaxed.items(), *live.machine_relaxed.items()]},
        notes=tuple(live.notes),
    )


def adapt(result: Result, cfg: Any, live: Any) -> Result:
    scripted = _scripted_keys(result, cfg, live)
    if not scripted:
        return result
    where = f"{live.where[0]}:{live.where[1]}" if live.where else (live.script or "the script")
    location = result.location
    if location is not None and _same(location.file, cfg.path) and location.key in scripted:
        location = Location(live.where[0], location.key, live.where[1]) if live.where else \
            Location(live.script or str(cfg.path), location.key)
    fix = result.fix
    if fix is not None and fix.applicability != "manual":
        fix = manual(f"{fix.description} (the script sets {', '.join(sorted(scripted))}: change it where the script "
                     f"builds the trainer's config, {where})")
    return dataclasses.replace(result, location=location, fix=fix)


def _scripted_keys(result: Result, cfg: Any, live: Any) -> set[str]:
    """The config keys this result concerns that no file the script reads sets."""
    keys: set[str] = set()
    if result.location is not None and result.location.key and _same(result.location.file, cfg.path):
        keys.add(result.location.key)
    fix: Fix | None = result.fix
    for edit in fix.edits if fix is not None else ():
        if edit.set and _same(edit.path, cfg.path):
            keys.update(k for k, _ in edit.set)
    if cfg.format != "script":
        keys -= set(live.recipe_keys)
    return keys


def _same(a: Any, b: Any) -> bool:
    return os.path.normcase(os.path.abspath(os.fspath(a))) == os.path.normcase(os.path.abspath(os.fspath(b)))
