"""SARIF 2.1.0 for code scanning: every rule in tool.driver.rules, one result per non-passing rule, located
where the finding points: the file (the config, or a model or tokenizer file a fix edits) and, when the
finding concerns a key of a JSON or YAML file, the key's line and column. A finding about the setup as a
whole points at the config's line 1 (GitHub code scanning requires a region with a startLine)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from .._types import Location, Result, Status
from . import Report, applicability

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(file: str) -> str:
    path = Path(file)
    return path.as_uri() if path.is_absolute() else quote(path.as_posix())


def _location(r: Result, config: str) -> dict:
    loc = r.location or Location(config)
    region = {"startLine": loc.line or 1}
    if loc.line and loc.column:
        region["startColumn"] = loc.column
    location = {"physicalLocation": {"artifactLocation": {"uri": _uri(loc.file)}, "region": region}}
    if loc.key:
        location["logicalLocations"] = [{"name": loc.key, "kind": "property"}]  # SARIF's kind for a JSON/YAML key
    return location


def _fix_note(r: Result) -> str:
    if r.fix is None:
        return ""
    return f" Fix{' (manual)' if applicability(r.fix) == 'manual' else ''}: {r.fix.description}"


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
    results = []
    for r in report.results:
        level = LEVEL.get(r.status)
        if level is None:
            continue
        properties = {"status": r.status.value}
        if r.fix is not None:
            properties["fixApplicability"] = applicability(r.fix)
        result = {
            "ruleId": r.id,
            "ruleIndex": index[r.id],
            "level": level,
            "message": {"text": r.message + _fix_note(r)},
            "locations": [_location(r, report.config)],
            "properties": properties,
        }
        if r.suppressed:  # SARIF's own field: code scanning shows it as dismissed in source
            result["suppressions"] = [{"kind": "inSource", "justification": f"# trl-doctor: ignore at {r.suppressed}"}]
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
