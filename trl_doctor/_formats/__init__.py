"""Report formats. Each module renders one Report to text behind the same `render(report, color)` call."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from .._types import AppliedFix, Location, Result, plain

FORMATS = ("table", "json", "junit", "github", "sarif")


@dataclass(frozen=True)
class Report:
    version: str
    config: str
    trainer: str
    environment: dict[str, Any]
    results: list[Result]
    summary: dict[str, int]
    applied: list[dict[str, str | None]] = field(default_factory=list)  # files --fix wrote, with backups
    launch: dict[str, Any] | None = None  # a launch command's capture (trl_doctor.capture.report.describe)


def render(fmt: str, report: Report, color: bool = False) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    module = importlib.import_module(f"{__name__}._{fmt}")
    return module.render(report, color=color)


def result_dict(r: Result) -> dict[str, Any]:
    """One result as the json format (and tools built on it) sees it."""
    return {
        "id": r.id,
        "rule": r.rule,
        "title": r.title,
        "status": r.status.value,
        "message": r.message,
        "details": plain(r.details),
        "fix": None
        if r.fix is None
        else {"description": r.fix.description, "applied": r.fix.applied, "unsafe": r.fix.unsafe, "files": list(r.fix.files),
              "applicability": applicability(r.fix)},
        "duration_s": r.duration_s,
        "location": location_dict(r.location),
        "suppressed": r.suppressed,
    }


def applicability(fix: AppliedFix) -> str:
    """safe, unsafe or manual; an AppliedFix built with only the older `unsafe=True` reads as unsafe."""
    if fix.applicability == "safe" and fix.unsafe:
        return "unsafe"
    return fix.applicability


def location_dict(loc: Location | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "key": loc.key, "line": loc.line, "column": loc.column}


def location_text(loc: Location) -> str:
    """`/path/config.yaml:12:1 (num_generations)`: the file:line:column form editors and terminals open."""
    where = loc.file + (f":{loc.line}" if loc.line else "") + (f":{loc.column}" if loc.line and loc.column else "")
    return f"{where} ({loc.key})" if loc.key else where


def details_lines(details: dict[str, Any], indent: str = "    ") -> list[str]:
    out = []
    for key, value in details.items():
        if isinstance(value, str) and "\n" in value:
            out.append(f"{indent}{key}:")
            out.extend(f"{indent}  {line}" for line in value.splitlines())
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            out.append(f"{indent}{key}:")
            out.extend(f"{indent}  - {v}" for v in value)
        else:
            out.append(f"{indent}{key}: {plain(value)}")
    return out
