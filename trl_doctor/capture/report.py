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
    if live.where and _installed(live.where[0]):  # a framework built the config from the files it was given
        return _in_framework_files(result, cfg, live, scripted, where)
    location = result.location
    if location is not None and _same(location.file, cfg.path) and location.key in scripted:
        location = Location(live.where[0], location.key, live.where[1]) if live.where else \
            Location(live.script or str(cfg.path), location.key)
    fix = result.fix
    if fix is not None and fix.applicability != "manual":
        fix = manual(f"{fix.description} (the script sets {', '.join(sorted(scripted))}: change it where the script "
                     f"builds the trainer's config, {where})")
    return dataclasses.replace(result, location=location, fix=fix)


def _installed(path: str) -> bool:
    """Whether `path` is an installed package's code (a framework's, as axolotl's or oumi's), not the user's."""
    parts = os.path.normpath(path).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _in_framework_files(result: Result, cfg: Any, live: Any, scripted: set[str], where: str) -> Result:
    """A framework (an installed package) built the trainer's config from the files its command was given
    (`oumi train -c config.yaml`, `axolotl train config.yaml`): the finding points at the key in those files where
    one of them sets it, and its fix says where to change it; a file of the framework's own is never the place."""
    files = _command_files(live.command, os.getcwd())
    found = [(path, line, dotted) for key in sorted(scripted) for path in files
             for line, dotted in [_key_line(path, key)] if line]
    location = result.location
    if found:
        path, line, dotted = found[0]
        location = Location(str(path), dotted, line)
    fix = result.fix
    if fix is not None and fix.applicability != "manual":
        named = ", ".join(sorted(scripted))
        if found:
            places = "; ".join(f"`{dotted}` at {os.path.basename(path)}:{line}" for path, line, dotted in found)
            fix = manual(f"{fix.description.split(' in ')[0]} where the framework reads it: {places}")
        else:
            given = ", ".join(os.path.basename(p) for p in files) or "no config file"
            fix = manual(f"{fix.description.split(' in ')[0]}: the framework built the trainer's config at {where} "
                         f"from its command's files ({given}), which do not set {named}: add it where the framework "
                         "reads trainer settings")
    return dataclasses.replace(result, location=location, fix=fix)


def _command_files(command: str, base: Any) -> list:
    """The YAML and JSON files named on the command line that exist (relative ones from `base`, the folder the
    command runs in: the worker's)."""
    import shlex
    from pathlib import Path

    try:
        words = shlex.split(command or "")
    except ValueError:
        words = (command or "").split()
    out = []
    for word in words:
        word = word.split("=", 1)[-1]
        if word.lower().endswith((".yaml", ".yml", ".json")):
            path = Path(word) if os.path.isabs(word) else Path(base) / word
            if path.is_file():
                out.append(path)
    return out


def _key_line(path: Any, key: str) -> tuple[int | None, str]:
    """(the line where a YAML or JSON file sets `key`, at any depth; the key's dotted path), read as text (the file
    is the user's, read only, bounded: never parsed into objects here); (None, key) where it is not set."""
    import re

    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(1_000_000)
    except OSError:
        return None, key
    pattern = re.compile(r'^(\s*)["\']?' + re.escape(key) + r'["\']?\s*:')
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        m = pattern.match(line)
        if m is None:
            continue
        indent, parents = len(m.group(1)), [key]
        for above in reversed(lines[:number - 1]):  # the enclosing YAML keys, by indentation
            stripped = above.lstrip()
            depth = len(above) - len(stripped)
            if stripped and not stripped.startswith(("#", "-")) and depth < indent and stripped.rstrip().endswith(":"):
                parents.insert(0, stripped.rstrip()[:-1].strip("\"'"))
                indent = depth
            if indent == 0:
                break
        return number, ".".join(parents)
    return None, key


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
