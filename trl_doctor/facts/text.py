"""Reading source text and small JSON files: line numbers and lines of an offset, a JSON object or None."""

from __future__ import annotations

import json
from pathlib import Path


def line_of(text: str, pos: int) -> int:
    """1-based line number of offset `pos` in `text`."""
    return text.count("\n", 0, pos) + 1


def line_text(text: str, pos: int) -> str:
    """The stripped line of `text` that contains offset `pos`."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else None].strip()


def read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None when the file is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
