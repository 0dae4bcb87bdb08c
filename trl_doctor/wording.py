"""Text from outside the doctor (an exception, a value from the user's script or files) as one short line in a
message: the one place that decides how such text is collapsed and cut."""

from __future__ import annotations

from typing import Any

REMOTE_CODE = "it contains custom code (auto_map) that trl-doctor runs only with --trust-remote-code"


def one_line(text: Any, limit: int | None = 300) -> str:
    """`text` (an exception's message, say) on one line: whitespace runs collapsed, cut to `limit` characters
    with "..." (no cut with None). An exception without a message is its type's name."""
    line = " ".join(str(text).split())
    if not line and isinstance(text, BaseException):
        line = type(text).__name__
    return line if limit is None or len(line) <= limit else line[:limit - 3] + "..."


def load_error(exc: BaseException, limit: int = 300) -> str:
    """Why a model or tokenizer folder did not load, as one line; transformers' long remote-code refusal in words
    that name the doctor's flag."""
    line = one_line(exc, None)
    return REMOTE_CODE if "trust_remote_code" in line else one_line(line, limit)


def shown(value: Any, limit: int = 80) -> str:
    """A value from the user's script or files as one short line: its repr, cut at `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"
