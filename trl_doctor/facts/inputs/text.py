"""Text for rules and facts: line numbers and lines of an offset in source text, a small JSON file, a path shown
relative to the config's folder, and outside text made one short line (`one_line`, `load_error`, `shown`, from
`trl_doctor.wording`, the one place that decides how)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trl_doctor.wording import load_error, one_line, shown  # noqa: F401


def line_of(text: str, pos: int) -> int:
    """1-based line number of offset `pos` in `text`."""
    return text.count("\n", 0, pos) + 1


def line_text(text: str, pos: int) -> str:
    """The stripped line of `text` that contains offset `pos`."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else None].strip()


def config_relative(ctx, path: str) -> str:
    """`path` relative to the config's folder when it lies under it (how a finding names the user's files)."""
    base = str(ctx.config.base_dir)
    return os.path.relpath(path, base) if path.startswith(base) else path


def read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None when the file is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
