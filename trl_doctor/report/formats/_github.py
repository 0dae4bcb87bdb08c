"""GitHub Actions workflow commands: one ::error / ::warning annotation per failing or warning rule, at the
file and line the finding points to (the config's line 1 for a finding about the setup as a whole),
escaped as the runner expects (%, CR, LF in data; also : and , in properties).

A file inside the workspace ($GITHUB_WORKSPACE, else the current folder) is named relative to it, as
GitHub needs to attach the annotation to that file in a pull request's diff.

The annotations come in run order, as the table's rows (the static rules, then those that read the trainer run):
each is written as its result arrives (trl_doctor.report.streaming), and the streamed lines are the lines written at
once."""

from __future__ import annotations

from trl_doctor.types import Location, Status
from trl_doctor.report.formats import COMMAND_LINE, Report, describe, fix_note, workspace_relative

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _shown(file: str) -> str:
    return workspace_relative(file) or file


def render(report: Report, color: bool = False) -> str:
    lines = [line for r in report.results if (line := annotation(r, report.config)) is not None]
    return "\n".join(lines + closing(report)) + "\n"


def annotation(r, config: str) -> str | None:
    """The workflow command of one result (None for a pass or a skip): printed on its own as the result arrives
    when the check streams (trl_doctor.report.streaming), so it depends on nothing but the result and the config."""
    level = LEVEL.get(r.status)
    if level is None:
        return None
    message = r.message
    if r.suppressed:
        level, message = "notice", f"suppressed by {r.suppressed}: {message}"
    if r.fix:
        message += "\n" + fix_note(r.fix)
    loc = r.location or Location(config)
    props = f"file={escape_property(_shown(loc.file))},line={loc.line or 1}"
    if loc.line and loc.column:
        props += f",col={loc.column}"
    props += f",title={escape_property(f'{r.id} {r.rule}')}"
    return f"::{level} {props}::{escape_data(message)}"


def closing(report: Report) -> list[str]:
    """What follows the annotations: the settings in force from the repository's files, then the summary."""
    # what narrows or silences this check from the repository's files (project config, inline comments) shows on
    # the pull request, where a change to it must be seen; the workflow's own command line is in the workflow
    lines = [f"::notice title=trl-doctor setting in force::{escape_data(describe(e))}"
             for e in report.settings if e["source"] != COMMAND_LINE]
    s = report.summary
    lines.append(f"trl-doctor: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip, {s['error']} error")
    return lines
