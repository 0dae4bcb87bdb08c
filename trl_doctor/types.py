"""Immutable data that rules return and the engine, fixer and formatters consume.

Findings and fixes are plain frozen dataclasses, never callbacks, so the same fix can be shown as a diff,
written to JSON, tested as data and applied in one batch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


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


APPLICABILITIES = ("safe", "unsafe", "manual")


@dataclass(frozen=True)
class Fix:
    """What a rule would change, as data, with its applicability (as ruff's Applicability):

    - `safe`: applied by `--fix`;
    - `unsafe`: applied only with `--fix --unsafe-fixes` (fixes that rewrite model weights, or change what
      the job trains);
    - `manual`: instructions only (the description says what to do), never applied; it carries no edits.

    `unsafe=True` is the older spelling of `applicability="unsafe"` and stays accepted.
    """

    description: str
    edits: tuple[Edit, ...] = ()
    unsafe: bool = False
    applicability: str = ""

    def __post_init__(self) -> None:
        level = self.applicability or ("unsafe" if self.unsafe else "safe")
        if level not in APPLICABILITIES:
            raise ValueError(f"a Fix's applicability is one of {APPLICABILITIES}, not {level!r}")
        if level == "manual" and self.edits:
            raise ValueError("a manual Fix describes what to do by hand; it carries no edits")
        object.__setattr__(self, "applicability", level)
        object.__setattr__(self, "unsafe", level == "unsafe")

    def applies(self, unsafe_fixes: bool = False) -> bool:
        """Whether `--fix` applies it (with `--unsafe-fixes` when that flag is given)."""
        return self.applicability == "safe" or (self.applicability == "unsafe" and unsafe_fixes)

    @property
    def files(self) -> tuple[str, ...]:
        """The files its edits change, sorted (the report's `fix.files`)."""
        return tuple(sorted({e.path for e in self.edits}))


def manual(description: str) -> Fix:
    """A fix the user makes by hand: shown with the finding, never applied."""
    return Fix(description, (), applicability="manual")


@dataclass(frozen=True)
class Location:
    """Where a finding points: a file (the config, a model or tokenizer file), and within it the key it
    concerns with the key's 1-based line and column when the file is JSON or YAML and the key is in it."""

    file: str
    key: str | None = None
    line: int | None = None
    column: int | None = None

    def short(self) -> str:
        """`config.yaml:12 num_generations`, as the table shows it."""
        import os

        name = os.path.basename(self.file) or self.file
        where = f"{name}:{self.line}" if self.line else name
        return f"{where} {self.key}" if self.key else where


@dataclass(frozen=True)
class Finding:
    """One observation a rule makes. A rule may yield several; the worst status decides the rule's result."""

    status: Status
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)
    fix: Fix | None = None
    location: Location | None = None


def passed(message: str, location: Location | None = None, **details: Any) -> Finding:
    return Finding(Status.PASS, message, details, location=location)


def warn(message: str, fix: Fix | None = None, location: Location | None = None, **details: Any) -> Finding:
    return Finding(Status.WARN, message, details, fix, location)


def fail(message: str, fix: Fix | None = None, location: Location | None = None, **details: Any) -> Finding:
    return Finding(Status.FAIL, message, details, fix, location)


def skip(message: str, location: Location | None = None, **details: Any) -> Finding:
    return Finding(Status.SKIP, message, details, location=location)


@dataclass(frozen=True)
class Result:
    """The outcome of one rule on one config, as the reports show it."""

    id: str
    rule: str
    title: str
    status: Status
    message: str
    details: Mapping[str, Any]
    fix: Fix | None  # the fix the rule offers (its findings' fixes merged), shown, and applied by --fix as it allows
    duration_s: float
    location: Location | None = None
    suppressed: str | None = None  # `file:line` of the `# trl-doctor: ignore[...]` comment that suppresses it
    fix_applied: bool = False  # --fix wrote `fix` before this result was made (the re-check after the fix)


def plain(value: Any) -> Any:
    """`value` in JSON's own types (other objects as their str): what the reports print and the worker sends."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


# -- verdicts over results: the summary and the exit status every door and format reports --------------------
def summarize(results: Iterable[Result]) -> dict[str, int]:
    """Counts per status; a suppressed result counts under `suppressed`, not under its status."""
    summary = {s.value: 0 for s in (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR)}
    summary["suppressed"] = 0
    for r in results:
        summary["suppressed" if r.suppressed else r.status.value] += 1
    return summary


def exit_status(results: Iterable[Result], fail_on: str = "fail") -> int:
    return 1 if any(fails(r, fail_on) for r in results) else 0


def fails(r: Result, fail_on: str = "fail") -> bool:
    """Whether this one result makes the exit status 1 (--fail-fast stops the check at the first that does)."""
    bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if fail_on == "warn" else set())
    return r.status in bad and not r.suppressed
