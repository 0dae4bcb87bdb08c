"""Turning fixes into file changes: plan them as data, show them as a diff, apply them atomically.

Every changed file is written to a temporary file in the same folder, flushed, then renamed over the
original, so a crash never leaves half a file; the replaced file is kept as a backup next to it. Key
edits keep the file's key order, and for YAML its comments, so a second --fix finds nothing to change.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ._errors import InputError
from ._types import DELETE, Edit, Fix

BACKUP_SUFFIX = ".trl-doctor.bak"


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
        new = old
        for edit in file_edits:
            new = edit.content if edit.content is not None else _set_keys(path, new, edit.set)
        if new is not None and new != old:
            changes.append(FileChange(path, old, new))
    return changes


def _set_keys(path: Path, data: bytes | None, pairs: tuple[tuple[str, Any], ...]) -> bytes:
    if path.suffix.lower() in (".yaml", ".yml"):
        return _set_yaml(path, data, pairs)
    return _set_json(path, data, pairs)


def _set_json(path: Path, data: bytes | None, pairs) -> bytes:
    text = data.decode("utf-8") if data else "{}"
    try:
        doc = json.loads(text)  # dicts keep file order
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: cannot rewrite, invalid JSON: {exc}") from None
    changed = False
    for key, value in pairs:
        if value is DELETE:
            changed |= doc.pop(key, DELETE) is not DELETE
        elif key not in doc or doc[key] != value or type(doc[key]) is not type(value):
            doc[key] = value
            changed = True
    if not changed and data is not None:
        return data
    m = re.search(r'^\{\s*\n([ \t]+)"', text)
    indent = len(m.group(1)) if m else 2
    return (json.dumps(doc, indent=indent, ensure_ascii=False) + "\n").encode("utf-8")


def _set_yaml(path: Path, data: bytes | None, pairs) -> bytes:
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    doc = yaml.load(data.decode("utf-8")) if data else None
    if doc is None:
        doc = {}
    changed = False
    for key, value in pairs:
        if value is DELETE:
            if key in doc:
                del doc[key]
                changed = True
        elif key not in doc or doc[key] != value:
            doc[key] = value
            changed = True
    if not changed and data is not None:
        return data
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue().encode("utf-8")


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


def backup_path(path: Path) -> Path:
    """The first free backup name: file.trl-doctor.bak, then .bak.1, .bak.2, ... (earlier backups are kept)."""
    candidate = path.with_name(path.name + BACKUP_SUFFIX)
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}{BACKUP_SUFFIX}.{n}")
        n += 1
    return candidate


def apply(changes: Iterable[FileChange]) -> list[tuple[Path, Path | None]]:
    """Write every change atomically; returns (file, backup or None for a new file)."""
    done = []
    for c in changes:
        c.path.parent.mkdir(parents=True, exist_ok=True)
        backup = None
        if c.old is not None:
            backup = backup_path(c.path)
            shutil.copy2(c.path, backup)
        fd, tmp = tempfile.mkstemp(prefix=f".{c.path.name}.", suffix=".tmp", dir=c.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(c.new)
                fh.flush()
                os.fsync(fh.fileno())
            if c.old is not None:
                shutil.copymode(backup, tmp)
            os.replace(tmp, c.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        done.append((c.path, backup))
    return done
