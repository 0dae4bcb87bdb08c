"""The json format: field names are a contract (tools are built on them); add fields, never rename."""

from __future__ import annotations

import json

from trl_doctor.report.formats import Report, result_dict


def render(report: Report, color: bool = False) -> str:
    doc = {
        "trl_doctor": report.version,
        "config": report.config,
        "trainer": report.trainer,
        "environment": report.environment,
        "results": [result_dict(r) for r in report.results],
        "summary": report.summary,
        "applied": report.applied,
        "settings": report.settings,  # what narrows or silences the check, and where it comes from
    }
    if report.launch is not None:
        doc["launch"] = report.launch
    if report.will_run is not None:  # what will run, as the installed TRL will run the job (the table's head)
        doc["will_run"] = report.will_run
    static = next((e for e in report.settings if e.get("setting") == "static"), None)
    if static is not None:  # --static: the release judged against, the rules judged (the others are skips)
        doc["static"] = {k: v for k, v in static.items() if k not in ("setting", "source", "value")}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
