"""The default human format: one row per rule (with where it points: `config.yaml:12 num_generations`),
then the details, location and fix of everything that did not pass.

Column widths come from the rules and the terminal's width alone, never from the results, so a terminal can show
each row as its rule finishes (`header`, then `row` per result, then `tail`) and get the lines `render` writes at
once. A message wraps in its column instead of being cut. Text from the checked repository is shown with its
control characters escaped (_safe.py), and `render`'s caller keeps any line from starting a workflow command."""

from __future__ import annotations

import click

from trl_doctor.types import Status
from trl_doctor.report.formats import Report, details_lines, location_text
from trl_doctor.report.formats._safe import visible

COLORS = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "bright_black", Status.ERROR: "magenta"}


def _fix_state(r) -> str:
    level = r.fix.applicability
    if level == "manual":
        return "manual"  # instructions: --fix never applies them
    if r.fix_applied:
        return "applied"
    return "available with --fix --unsafe-fixes" if level == "unsafe" else "available with --fix"


STATUS_WIDTH = 6
MIN_MESSAGE_WIDTH = 24


def terminal_width() -> int:
    """The terminal's columns (`COLUMNS` first), 80 when unknown (a pipe, a CI log)."""
    import shutil

    return shutil.get_terminal_size((80, 24)).columns


def widths(slugs, width: int | None = None) -> tuple[int, int, int]:
    """(id, rule, message) column widths, from the rules and the terminal alone: rows can be printed as each rule
    finishes. The message column takes what the others leave; it wraps, it is never cut."""
    w_id, w_rule = 5, max([len("rule"), *(len(s) for s in slugs)])
    used = w_id + w_rule + STATUS_WIDTH + 3 * 2
    return w_id, w_rule, max(MIN_MESSAGE_WIDTH, (width or terminal_width()) - used)


def header(version: str, config: str, trainer: str, slugs, launch: dict | None = None,
           settings: list[dict] | None = None, will_run: dict | None = None) -> list[str]:
    w_id, w_rule, w_message = widths(slugs)
    cols = ["id".ljust(w_id), "rule".ljust(w_rule), "status".ljust(STATUS_WIDTH), "message (location)"]
    shown = visible(launch["command"] if launch else config, one_line=True)
    return [f"trl-doctor {version}: {shown} (trainer: {visible(trainer, one_line=True)})",
            *launch_lines(launch), *settings_lines(settings), *will_run_lines(will_run), "", "  ".join(cols),
            "  ".join("-" * len(c) for c in cols[:3]) + "  " + "-" * w_message]


def will_run_lines(will_run: dict | None, width: int | None = None) -> list[str]:
    """What will run (trl_doctor.facts.launch.will_run): its title, then each line under its label, wrapped."""
    import textwrap

    if not will_run or not will_run.get("lines"):
        return []
    lines = will_run["lines"]
    label = max(len(k) for k in lines) + 2
    wrap = max(MIN_MESSAGE_WIDTH, (width or terminal_width()) - label - 2)
    title = f"what will run ({visible(will_run.get('title', ''), one_line=True)}):"
    out = textwrap.wrap(title, max(MIN_MESSAGE_WIDTH, width or terminal_width()), subsequent_indent="  ") or [title]
    for what, text in lines.items():
        chunk = textwrap.wrap(visible(text, one_line=True), wrap, break_on_hyphens=False) or [""]
        out.append(f"  {visible(what, one_line=True).ljust(label)}{chunk[0]}")
        out += [" " * (label + 2) + more for more in chunk[1:]]
    return out


def settings_lines(settings: list[dict] | None) -> list[str]:
    """What narrows or silences this check, and where it comes from (a CI gate's reader must see it)."""
    from trl_doctor.report.formats import describe

    return [f"setting in force: {visible(describe(entry), one_line=True)}" for entry in settings or ()]


def launch_lines(launch: dict | None) -> list[str]:
    """What a launch command's check judged: the trainer the script built, where, and what was let through."""
    if not launch:
        return []
    where = f"constructed at {launch['constructed_at']}" if launch.get("constructed_at") else "checked in the running job"
    lines = [f"captured: {launch.get('trainer_class')} {where}" + (f", config {launch['recipe']}" if launch.get("recipe") else "")]
    lines += [f"relaxed on this machine: {key}: {why}" for key, why in (launch.get("relaxed") or {}).items()]
    lines += [f"note: {note}" for note in launch.get("notes") or ()]
    return lines


def row(r, slugs, color: bool = False) -> str:
    """The rule's line(s): the message, then where it points, wrapped to the message column."""
    import textwrap

    w_id, w_rule, w_message = widths(slugs)
    message = f"(suppressed) {r.message}" if r.suppressed else r.message
    where = f"  {r.location.short()}" if r.location else ""
    text = " ".join(visible(message + where, one_line=True).split())
    lines = textwrap.wrap(text, w_message, break_on_hyphens=False) or [""]
    status = _paint(r.status, r.status.value.ljust(STATUS_WIDTH), color)
    first = "  ".join([r.id.ljust(w_id), r.rule.ljust(w_rule), status, lines[0]]).rstrip()
    indent = " " * (w_id + w_rule + STATUS_WIDTH + 3 * 2)
    return "\n".join([first, *(indent + line for line in lines[1:])])


def _paint(status: Status, text: str, color: bool) -> str:
    return click.style(text, fg=COLORS[status], bold=status in (Status.FAIL, Status.ERROR)) if color else text


def tail(report: Report, color: bool = False) -> list[str]:
    """What follows the rows: the details, location and fix of everything that did not pass, then the summary."""
    lines: list[str] = []
    for r in report.results:
        if not _has_tail(r):
            continue
        lines.append("")
        heading = _paint(r.status, f"{r.id} {r.rule}: {r.status.value}", color)
        # a skip's reason is its row's message, shown once there
        lines.append(heading if r.status is Status.SKIP else f"{heading}: {visible(r.message, one_line=True)}")
        if r.suppressed:
            lines.append(f"    suppressed by: {r.suppressed} (does not fail the check)")
        if r.location is not None:
            lines.append(f"    at: {location_text(r.location)}")
        lines.extend(details_lines(dict(r.details)))
        if r.fix is not None:
            lines.append(f"    fix ({_fix_state(r)}): {r.fix.description}")
    if report.applied:
        lines.append("")
        lines.append("files written by --fix:")
        for item in report.applied:
            backup = f" (backup: {item['backup']})" if item.get("backup") else " (new file)"
            lines.append(f"    {item['file']}{backup}")
    s = report.summary
    lines.append("")
    lines.append(", ".join(f"{s[k]} {k}" for k in ("pass", "warn", "fail", "skip", "error"))
                 + (f", {s['suppressed']} suppressed" if s.get("suppressed") else ""))
    return lines


def _has_tail(r) -> bool:
    """Whether a result has more to say than its row: a pass only an applied fix, a skip only details or a fix."""
    if r.status is Status.PASS:
        return bool(r.fix and r.fix_applied)
    if r.status is Status.SKIP:
        return bool(r.details or r.fix)
    return True


def render(report: Report, color: bool = False) -> str:
    """The whole table at once: the same lines the terminal shows as rows stream in."""
    slugs = [r.rule for r in report.results]
    lines = header(report.version, report.config, report.trainer, slugs, report.launch, report.settings,
                   report.will_run)
    lines.extend(row(r, slugs, color) for r in report.results)
    lines.extend(tail(report, color))
    return "\n".join(lines) + "\n"
