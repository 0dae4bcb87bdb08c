"""What a file holds once `Edit`s are applied: the one place an `Edit` becomes bytes, on the bottom floor, below the
fixer and the rules that use it (public as `trl_doctor.edited`). The fixer plans `--fix` and `--diff` with it
(`trl_doctor.fix.fixer.plan`), and a rule that tries its fix on a copy before offering it writes the copy with it,
so the copy holds what `--fix` would write.

Key edits keep the file's key order and indent, and for YAML its comments, so a second --fix finds nothing to
change."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, Iterable

from trl_doctor.errors import InputError
from trl_doctor.types import DELETE, Edit


def edited(path: Path, data: bytes | None, edits: Iterable[Edit]) -> bytes | None:
    """The bytes of file `path` (now `data`, None when it does not exist) after `edits`, applied in order."""
    for edit in edits:
        data = edit.content if edit.content is not None else set_keys(path, data, edit.set)
    return data


def set_keys(path: Path, data: bytes | None, pairs: tuple[tuple[str, Any], ...]) -> bytes:
    """The JSON or YAML file `path` (now `data`) with these top-level keys set (`DELETE` removes one); `data`
    itself when nothing changes. A file that is not valid JSON is an InputError naming it."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return _set_yaml(data, pairs)
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


def _set_yaml(data: bytes | None, pairs) -> bytes:
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
