"""GitHub Actions workflow commands: one ::error / ::warning annotation per failing or warning rule,
attached to the config file, escaped as the runner expects (%, CR, LF in data; also : and , in properties)."""

from __future__ import annotations

from .._types import Status
from . import Report

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(report: Report, color: bool = False) -> str:
    lines = []
    for r in report.results:
        level = LEVEL.get(r.status)
        if level is None:
            continue
        message = r.message + (f"\nfix: {r.fix.description}" if r.fix else "")
        props = f"file={escape_property(report.config)},line=1,title={escape_property(f'{r.id} {r.rule}')}"
        lines.append(f"::{level} {props}::{escape_data(message)}")
    s = report.summary
    lines.append(f"trl-doctor: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip, {s['error']} error")
    return "\n".join(lines) + "\n"
