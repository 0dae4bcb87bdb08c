"""Report formats. Each module renders one Report to text behind the same `render(report, color)` call."""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from trl_doctor.types import Fix, Location, Result, exit_status, plain, summarize
from trl_doctor.report.formats import _safe
from trl_doctor.vocabulary import FORMATS  # noqa: F401  (one list, here for the formats' callers; the CLI reads it too)

COMMAND_LINE = "command line"  # the source of a setting given on the command line (or to the API)


def describe(entry: dict) -> str:
    """`ignore version-skew (from /p/.trl-doctor.toml)`: one setting in force as the reports write it."""
    what = ", ".join(entry["rules"]) if "rules" in entry else str(entry.get("value"))
    key = f" on `{entry['key']}`" if entry.get("key") else ""
    return f"{entry['setting']} {what}{key} (from {entry['source']})"


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
    settings: list[dict[str, Any]] = field(default_factory=list)  # what narrows or silences the check, and from where
    fail_on: str = "fail"  # the lowest status that is not ok
    # what will run, as the installed TRL will run the job ({"title", "lines": {what: text}}; None where not known)
    will_run: dict[str, Any] | None = None

    @classmethod
    def made(cls, subject: str, trainer: str, results: list[Result], *, applied: list | None = None,
             launch: dict[str, Any] | None = None, settings: Sequence[dict] | None = None,
             fail_on: str = "fail", will_run: dict[str, Any] | None = None) -> "Report":
        """The report of one check, with this package's version, this environment and the results' summary: how
        the command line and the API both make theirs."""
        from trl_doctor.context.env import environment
        from trl_doctor.version import __version__

        return cls(__version__, subject, trainer, environment(), results, summarize(results), list(applied or ()),
                   launch, list(settings or ()), fail_on, will_run)

    @property
    def ok(self) -> bool:
        """No result at or above `fail_on` (suppressed ones aside): the exit status would be 0."""
        return exit_status(self.results, self.fail_on) == 0

    @property
    def target(self) -> str:
        """What was checked (the config's path or the launch command): `config`, under the API's first name."""
        return self.config

    def render(self, fmt: str = "table", color: bool = False) -> str:
        """This report in `fmt` (table in run order; the machine formats by rule id)."""
        shown = self if fmt == "table" else dataclasses.replace(self, results=sorted(self.results, key=lambda r: r.id))
        return render(fmt, shown, color=color)

    @property
    def table(self) -> str:
        return self.render("table")

    def to_json(self) -> str:
        return self.render("json")

    def __str__(self) -> str:
        return self.table


def render(fmt: str, report: Report, color: bool = False) -> str:
    """`report` in `fmt`, every string of it from the checked repository neutralised as that format needs
    (_safe.py): the one place every format is written through."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    module = importlib.import_module(f"{__name__}._{fmt}")
    return guard(fmt, module.render(_safe.clean_report(report, _CLEANERS[fmt]), color=color))


def guard(fmt: str, text: str) -> str:
    """The written document, its lines unable to start a workflow command (the github format's own annotations
    excepted: their data is escaped) and, in JSON, C1 controls and lone surrogates as \\u escapes."""
    if fmt == "table":
        return _safe.no_commands(text)
    if fmt == "junit":
        return _safe.xml_document(text)
    if fmt in ("json", "sarif"):
        return _safe.json_escapes(text)
    return text


# the github format's own annotations are written after its strings are cleaned: `::` in their data is the user's
_CLEANERS: dict[str, Callable[[str], str]] = {"table": _safe.visible, "junit": _safe.xml_text, "github": _safe.for_terminal, "json": str, "sarif": str}


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
        else {"description": r.fix.description, "applied": r.fix_applied, "unsafe": r.fix.unsafe, "files": list(r.fix.files),
              "applicability": r.fix.applicability},
        "duration_s": r.duration_s,
        "location": location_dict(r.location),
        "suppressed": r.suppressed,
    }


def fix_note(fix: Fix, word: str = "fix") -> str:
    """`fix: DESCRIPTION`, or `fix (manual): ...` for instructions --fix never applies (junit, github, sarif)."""
    return f"{word}{' (manual)' if fix.applicability == 'manual' else ''}: {fix.description}"


def location_dict(loc: Location | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "key": loc.key, "line": loc.line, "column": loc.column}


def workspace() -> Path:
    """The repository root reports name files against: $GITHUB_WORKSPACE in GitHub Actions, else the current
    folder."""
    return Path(os.environ.get("GITHUB_WORKSPACE") or os.getcwd()).resolve()


def workspace_relative(file: str) -> str | None:
    """`file` relative to the workspace (posix), or None when it is outside it."""
    try:
        return Path(file).resolve().relative_to(workspace()).as_posix()
    except (ValueError, OSError, RuntimeError):
        return None


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
