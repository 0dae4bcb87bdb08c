"""SARIF 2.1.0 for code scanning: every rule in tool.driver.rules, one result per non-passing rule,
located in the config file (line 1: the doctor checks the setup as a whole, not one line of it)."""

from __future__ import annotations

import json
from pathlib import Path

from .._types import Status
from . import Report

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def render(report: Report, color: bool = False) -> str:
    rules = []
    index = {}
    for r in report.results:
        index[r.id] = len(rules)
        rules.append({
            "id": r.id,
            "name": r.rule,
            "shortDescription": {"text": r.title},
            "help": {"text": f"Run `trl-doctor explain {r.id}` for the full explanation."},
        })
    uri = Path(report.config).as_uri() if Path(report.config).is_absolute() else report.config
    results = []
    for r in report.results:
        level = LEVEL.get(r.status)
        if level is None:
            continue
        result = {
            "ruleId": r.id,
            "ruleIndex": index[r.id],
            "level": level,
            "message": {"text": r.message + (f" Fix: {r.fix.description}" if r.fix else "")},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": 1}}}],
            "properties": {"status": r.status.value},
        }
        results.append(result)
    doc = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "trl-doctor", "version": report.version, "rules": rules}},
            "results": results,
            "properties": {"trainer": report.trainer, "summary": report.summary},
        }],
    }
    return json.dumps(doc, indent=2) + "\n"
