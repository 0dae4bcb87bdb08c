"""SARIF 2.1.0 for code scanning: every rule in tool.driver.rules, one result per non-passing rule, located
where the finding points: the file (the config, or a model or tokenizer file a fix edits) and, when the
finding concerns a key of a JSON or YAML file, the key's line and column. A finding about the setup as a
whole points at the config's line 1 (GitHub code scanning requires a region with a startLine).

A file inside the workspace (the repository root: $GITHUB_WORKSPACE, else the current folder) is named by a URI
relative to it, against the `%SRCROOT%` base, as code scanning resolves it; a file outside it by its absolute
`file://` URI. One document holds one run (several configs: `merge_runs`, code scanning takes one run per
category), whose invocation says whether every input could be read; each config's trainer, summary and settings in force
are in the run's `properties.configs`."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote
from typing import Any

from trl_doctor.types import Location, Result, Status
from trl_doctor.report.formats import Report, fix_note, workspace, workspace_relative

LEVEL = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
BASE = "%SRCROOT%"


def _artifact(file: str) -> dict:
    relative = workspace_relative(file)
    if relative is not None:
        return {"uri": quote(relative), "uriBaseId": BASE}
    path = Path(file)
    return {"uri": path.as_uri() if path.is_absolute() else quote(path.as_posix())}


def _location(r: Result, config: str) -> dict:
    loc = r.location or Location(config)
    region = {"startLine": loc.line or 1}
    if loc.line and loc.column:
        region["startColumn"] = loc.column
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": _artifact(loc.file), "region": region}}
    if loc.key:
        location["logicalLocations"] = [{"name": loc.key, "kind": "property"}]  # SARIF's kind for a JSON/YAML key
    return location


def _fix_note(r: Result) -> str:
    if r.fix is None:
        return ""
    return " " + fix_note(r.fix, "Fix")


def _rule(r: Result) -> dict:
    return {"id": r.id, "name": r.rule, "shortDescription": {"text": r.title},
            "help": {"text": f"Run `trl-doctor explain {r.id}` for the full explanation."}}


def _result(r: Result, report: Report) -> dict:
    properties = {"status": r.status.value, "config": report.config}
    if r.fix is not None:
        properties["fixApplicability"] = r.fix.applicability
    result = {"ruleId": r.id, "level": LEVEL[r.status], "message": {"text": r.message + _fix_note(r)},
              "locations": [_location(r, report.config)], "properties": properties}
    if r.suppressed:  # SARIF's own field: code scanning shows it as dismissed in source
        result["suppressions"] = [{"kind": "inSource", "justification": f"# trl-doctor: ignore at {r.suppressed}"}]
    return result


def run_for(report: Report) -> dict:
    return {
        "tool": {"driver": {"name": "trl-doctor", "version": report.version,
                            "rules": [_rule(r) for r in report.results]}},
        "originalUriBaseIds": {BASE: {"uri": workspace().as_uri() + "/"}},
        "invocations": [{"executionSuccessful": True}],
        "results": [_result(r, report) for r in report.results if r.status in LEVEL],
        "properties": {"trainer": report.trainer, "summary": report.summary, "settings": report.settings,
                       "configs": [{"config": report.config, "trainer": report.trainer, "summary": report.summary,
                                    "settings": report.settings,
                                    **({"will_run": report.will_run} if report.will_run else {})}]},
    }


def merge_runs(runs: list[dict], errors: list[str]) -> dict:
    """One run from several configs' runs: the rules once each, every result (its ruleIndex into the merged
    rules), the summaries summed, the configs that could not be read as error notifications."""
    rules: dict[str, dict] = {}
    for run in runs:
        for rule in run["tool"]["driver"]["rules"]:
            rules.setdefault(rule["id"], rule)
    merged: dict[str, Any] = {
        "tool": {"driver": {"name": "trl-doctor", "version": runs[0]["tool"]["driver"]["version"] if runs else "",
                            "rules": list(rules.values())}},
        "originalUriBaseIds": {BASE: {"uri": workspace().as_uri() + "/"}},
        "invocations": [{"executionSuccessful": not errors, "toolExecutionNotifications": [
            {"level": "error", "message": {"text": e}} for e in errors]}],
        "results": [res for run in runs for res in run["results"]],
        "properties": {"summary": _summed([run["properties"]["summary"] for run in runs]),
                       "configs": [config for run in runs for config in run["properties"]["configs"]]},
    }
    if not merged["tool"]["driver"]["version"]:
        from trl_doctor.version import __version__

        merged["tool"]["driver"]["version"] = __version__
    return merged


def _summed(summaries: list[dict]) -> dict:
    return {k: sum(s.get(k, 0) for s in summaries) for k in sorted({k for s in summaries for k in s})}


def _indexed(run: dict) -> dict:
    index = {rule["id"]: i for i, rule in enumerate(run["tool"]["driver"]["rules"])}
    for res in run["results"]:
        res["ruleIndex"] = index[res["ruleId"]]
    return run


def document(run: dict) -> str:
    return json.dumps({"$schema": SCHEMA, "version": "2.1.0", "runs": [_indexed(run)]}, indent=2) + "\n"


def render(report: Report, color: bool = False) -> str:
    return document(run_for(report))
