"""The default human format: one row per rule (with where it points: `config.yaml:12 num_generations`),
then the details, location and fix of everything that did not pass.

Column widths come from the rules alone, never from the results, so a terminal can show each row as its
rule finishes (`header`, then `row` per result, then `tail`) and get the lines `render` writes at once."""

from __future__ import annotations

import click

from .._types import Status
from . import Report, applicability, details_lines, location_text

COLORS = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "bright_black", Status.ERROR: "magenta"}


def _one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _fix_state(fix) -> str:
    level = applicability(fix)
    if level == "manual":
        return "manual"  # instructions: --fix never applies them
    if fix.applied:
        return "applied"
    return "available with --fix --unsafe-fixes" if level == "unsafe" else "available with --fix"


MESSAGE_WIDTH = 100
STATUS_WIDTH = 6


def widths(slugs) -> tuple[int, int]:
    """(id, rule) column widths, from the rules alone: rows can be printed as each rule finishes."""
    slugs = list(slugs)
    return 5, max([len("rule"), *(len(s) for s in slugs)])


def header(version: str, config: str, trainer: str, slugs, launch: dict | None = None) -> list[str]:
    w_id, w_rule = widths(slugs)
    cols = ["id".ljust(w_id), "rule".ljust(w_rule), "status".ljust(STATUS_WIDTH), "message".ljust(MESSAGE_WIDTH),
            "location"]
    return [f"trl-doctor {version}: {launch['command'] if launch else config} (trainer: {trainer})",
            *launch_lines(launch), "", "  ".join(cols).rstrip(), "  ".join("-" * len(c) for c in cols)]


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
    w_id, w_rule = widths(slugs)
    status = _paint(r.status, r.status.value.ljust(STATUS_WIDTH), color)
    where = r.location.short() if r.location else ""
    message = f"(suppressed) {r.message}" if r.suppressed else r.message
    return "  ".join([r.id.ljust(w_id), r.rule.ljust(w_rule), status, _one_line(message, MESSAGE_WIDTH).ljust(MESSAGE_WIDTH),
                      where]).rstrip()


def _paint(status: Status, text: str, color: bool) -> str:
    return click.style(text, fg=COLORS[status], bold=status in (Status.FAIL, Status.ERROR)) if color else text


def tail(report: Report, color: bool = False) -> list[str]:
    """What follows the rows: the details, location and fix of everything that did not pass, then the summary."""
    lines: list[str] = []
    for r in report.results:
        if r.status is Status.PASS and not (r.fix and r.fix.applied):
            continue
        lines.append("")
        lines.append(_paint(r.status, f"{r.id} {r.rule}: {r.status.value}", color) + f": {r.message}")
        if r.suppressed:
            lines.append(f"    suppressed by: {r.suppressed} (does not fail the check)")
        if r.location is not None:
            lines.append(f"    at: {location_text(r.location)}")
        lines.extend(details_lines(dict(r.details)))
        if r.fix is not None:
            lines.append(f"    fix ({_fix_state(r.fix)}): {r.fix.description}")
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


def render(report: Report, color: bool = False) -> str:
    """The whole table at once: the same lines the terminal shows as rows stream in."""
    slugs = [r.rule for r in report.results]
    lines = header(report.version, report.config, report.trainer, slugs, report.launch)
    lines.extend(row(r, slugs, color) for r in report.results)
    lines.extend(tail(report, color))
    return "\n".join(lines) + "\n"
