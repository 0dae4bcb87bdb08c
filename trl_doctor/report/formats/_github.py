"""GitHub Actions workflow commands: one ::error / ::warning annotation per failing or warning rule, at the
file and line the finding points to (the config's line 1 for a finding about the setup as a whole),
escaped as the runner expects (%, CR, LF in data; also : and , in properties).

A file inside the workspace ($GITHUB_WORKSPACE, else the current folder) is named relative to it, as
GitHub needs to attach the annotation to that file in a pull request's diff."""

from __future__ import annotations

from trl_doctor.types import Location, Status
from trl_doctor.report.formats import COMMAND_LINE, Report, applicability, describe, workspace_relative

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _shown(file: str) -> str:
    return workspace_relative(file) or file


def render(report: Report, color: bool = False) -> str:
    lines = []
    for r in report.results:
        level = LEVEL.get(r.status)
        if level is None:
            continue
        message = r.message
        if r.suppressed:
            level, message = "notice", f"suppressed by {r.suppressed}: {message}"
        if r.fix:
            message += f"\nfix{' (manual)' if applicability(r.fix) == 'manual' else ''}: {r.fix.description}"
        loc = r.location or Location(report.config)
        props = f"file={escape_property(_shown(loc.file))},line={loc.line or 1}"
        if loc.line and loc.column:
            props += f",col={loc.column}"
        props += f",title={escape_property(f'{r.id} {r.rule}')}"
        lines.append(f"::{level} {props}::{escape_data(message)}")
    # what narrows or silences this check from the repository's files (project config, inline comments) shows on
    # the pull request, where a change to it must be seen; the workflow's own command line is in the workflow
    lines += [f"::notice title=trl-doctor setting in force::{escape_data(describe(e))}"
              for e in report.settings if e["source"] != COMMAND_LINE]
    s = report.summary
    lines.append(f"trl-doctor: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip, {s['error']} error")
    return "\n".join(lines) + "\n"
