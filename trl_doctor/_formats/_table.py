"""The default human format: one row per rule, then the details and fixes of everything that did not pass."""

from __future__ import annotations

import click
from tabulate import tabulate

from .._types import Status
from . import Report, details_lines

COLORS = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "bright_black", Status.ERROR: "magenta"}


def _one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render(report: Report, color: bool = False) -> str:
    def paint(status: Status, text: str) -> str:
        return click.style(text, fg=COLORS[status], bold=status in (Status.FAIL, Status.ERROR)) if color else text

    rows = [[r.id, r.rule, paint(r.status, r.status.value), _one_line(r.message)] for r in report.results]
    lines = [f"trl-doctor {report.version}: {report.config} (trainer: {report.trainer})", ""]
    lines.append(tabulate(rows, headers=["id", "rule", "status", "message"], tablefmt="simple"))
    for r in report.results:
        if r.status is Status.PASS and not (r.fix and r.fix.applied):
            continue
        lines.append("")
        lines.append(paint(r.status, f"{r.id} {r.rule}: {r.status.value}") + f": {r.message}")
        lines.extend(details_lines(dict(r.details)))
        if r.fix is not None:
            state = "applied" if r.fix.applied else ("available with --fix --unsafe-fixes" if r.fix.unsafe else "available with --fix")
            lines.append(f"    fix ({state}): {r.fix.description}")
    if report.applied:
        lines.append("")
        lines.append("files written by --fix:")
        for item in report.applied:
            backup = f" (backup: {item['backup']})" if item.get("backup") else " (new file)"
            lines.append(f"    {item['file']}{backup}")
    s = report.summary
    lines.append("")
    lines.append(", ".join(f"{s[k]} {k}" for k in ("pass", "warn", "fail", "skip", "error")))
    return "\n".join(lines) + "\n"
