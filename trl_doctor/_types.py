"""Immutable data that rules return and the engine, fixer and formatters consume.

Findings and fixes are plain frozen dataclasses, never callbacks, so the same fix can be shown as a diff,
written to JSON, tested as data and applied in one batch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """Order used to pick a rule's overall status from several findings (worst wins)."""
        return _RANK[self]


_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


class _Delete:
    """Sentinel: an Edit that sets a key to DELETE removes it."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()


@dataclass(frozen=True)
class Edit:
    """One change to one file.

    Either `set` (top-level key -> value, for JSON and YAML files, applied keeping key order and YAML
    comments; DELETE removes the key) or `content` (the whole new file, for files that are not key/value).
    """

    path: str
    set: tuple[tuple[str, Any], ...] = ()
    content: bytes | None = None

    def __post_init__(self) -> None:
        if (self.content is None) == (not self.set):
            raise ValueError("an Edit takes exactly one of `set` or `content`")


@dataclass(frozen=True)
class Fix:
    """What a rule would change, as data. `unsafe` fixes (those that rewrite model weights) only apply
    with --unsafe-fixes."""

    description: str
    edits: tuple[Edit, ...] = ()
    unsafe: bool = False


@dataclass(frozen=True)
class Finding:
    """One observation a rule makes. A rule may yield several; the worst status decides the rule's result."""

    status: Status
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)
    fix: Fix | None = None


def passed(message: str, **details: Any) -> Finding:
    return Finding(Status.PASS, message, details)


def warn(message: str, fix: Fix | None = None, **details: Any) -> Finding:
    return Finding(Status.WARN, message, details, fix)


def fail(message: str, fix: Fix | None = None, **details: Any) -> Finding:
    return Finding(Status.FAIL, message, details, fix)


def skip(message: str, **details: Any) -> Finding:
    return Finding(Status.SKIP, message, details)


@dataclass(frozen=True)
class AppliedFix:
    description: str
    applied: bool
    unsafe: bool = False
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """The outcome of one rule on one config, as the reports show it."""

    id: str
    rule: str
    title: str
    status: Status
    message: str
    details: Mapping[str, Any]
    fix: AppliedFix | None
    duration_s: float
    pending_fix: Fix | None = None  # the Fix object behind `fix`, for the fixer; not reported
