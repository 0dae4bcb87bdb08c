"""Turning fixes into file changes: plan them as data, show them as a diff, apply them as one transaction.

`apply` writes through `_txn`: the touched folders are locked, the changes planned again from the files as they
are then, and every file is written to a temporary file and renamed into place behind a journal, with the
replaced file kept as a backup next to it, so that a kill or a refused write never leaves half a file or half a
set. Key edits keep the file's key order, and for YAML its comments, so a second --fix finds nothing to change.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from trl_doctor.fix import txn as _txn
from trl_doctor.errors import InputError
from trl_doctor.context.hubcache import in_hub_cache
from trl_doctor.edits import edited
from trl_doctor.fix.txn import BACKUP_SUFFIX, backup_path  # noqa: F401  (re-exported)
from trl_doctor.types import Edit, Fix


@dataclass(frozen=True)
class FileChange:
    path: Path
    old: bytes | None
    new: bytes


def plan(fixes: Iterable[Fix]) -> list[FileChange]:
    """The file changes that applying these fixes in order would make (files that would not change are left out).

    Which fixes to pass is the caller's choice (`Fix.applies`); a manual fix is skipped here whatever it
    carries, since it is instructions for a person, never a change to make."""
    edits: dict[Path, list[Edit]] = {}
    for fix in fixes:
        if fix.applicability == "manual":
            continue
        for edit in fix.edits:
            edits.setdefault(Path(edit.path), []).append(edit)
    changes = []
    for path, file_edits in edits.items():
        old = path.read_bytes() if path.is_file() else None
        new = edited(path, old, file_edits)
        if new is not None and new != old:
            changes.append(FileChange(path, old, new))
    return changes


def unified_diff(changes: Iterable[FileChange]) -> str:
    chunks = []
    for c in changes:
        shown = _shown(c.path)
        try:
            old = (c.old or b"").decode("utf-8").splitlines(keepends=True)
            new = c.new.decode("utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            chunks.append(f"Binary files {'a/' + shown if c.old is not None else '/dev/null'} and b/{shown} differ "
                          f"({len(c.old or b'')} -> {len(c.new)} bytes)\n")
            continue
        chunks.extend(difflib.unified_diff(old, new, f"a/{shown}" if c.old is not None else "/dev/null", f"b/{shown}"))
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


def _shown(path: Path) -> str:
    """The path relative to the current folder when it is inside it (as git shows it), else absolute without the leading /."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path).lstrip("/")


def apply(changes: Iterable[FileChange], fixes: Iterable[Fix] | None = None, config=None) -> list[tuple[Path, Path | None]]:
    """Write the changes as one transaction; returns (file, backup or None for a new file).

    With the `fixes` they were planned from, the changes are planned again under the folders' locks, so a run that
    lost a race to another --fix writes only what is still left to change; without them, a file that changed since
    `changes` were planned is an InputError and nothing is written. With the loaded `config`, its own, its model's
    and its tokenizer's folders are recovered too (a fix a killed --fix left half done is finished, and listed
    first), even when there is nothing to change."""
    changes = [replace(c, path=c.path.absolute()) for c in changes]
    fixes = None if fixes is None else [f for f in fixes if f.applicability != "manual"]
    paths = {c.path for c in changes} | {Path(e.path).absolute() for f in fixes or () for e in f.edits}
    _txn.check(changes)  # before any lock or write: the cache, links, read-only files and folders
    folders = {next(p for p in (path.parent, *path.parent.parents) if p.is_dir()) for path in paths}
    folders |= _config_folders(config)
    if not folders:
        return []

    def replan() -> list[FileChange]:
        if fixes is not None:
            return [replace(c, path=c.path.absolute()) for c in plan(fixes)]
        for c in changes:
            if (c.path.read_bytes() if c.path.is_file() else None) != c.old:
                raise InputError(f"{c.path}: changed since the fix was planned; nothing was changed")
        return changes

    return _txn.transact(folders, replan)


def _config_folders(config) -> set[Path]:
    """The folders --fix writes for a loaded config, outside any hub cache (a launch target has no model folder:
    its fixes name their folders)."""
    if config is None or not hasattr(config, "model"):
        return set()
    folders = {Path(config.path).parent, Path(config.model.path), Path(config.tokenizer.path)}
    return {f.absolute() for f in folders if f.is_dir() and not in_hub_cache(f)}


def diff_of(results: Iterable, unsafe_fixes: bool = False) -> str:
    """What --diff shows for a check's results: the fixes that apply (unsafe ones with `unsafe_fixes`), planned
    together, as one unified diff ("" when none would change a file); nothing is written."""
    fixes = [r.fix for r in results if r.fix is not None and r.fix.applies(unsafe_fixes)]
    return unified_diff(plan(fixes))
