"""Several configs in one call (`trl-doctor check a.yaml b.yaml 'recipes/**/*.yaml'`): each config's report as its
format writes it, combined into one document of the same format, with one summary over all of them. Configs that
could not be read (exit 2) are in the document too, so a CI gate's report exists whatever the exit status.

- table: the reports one after another, then `N configs: ...` with the summed counts;
- json: `{"reports": [each report], "summary": {summed counts}, "configs": N, "input_errors": [...]}`;
- sarif: one run holding every config's results (code scanning takes one run per category), the unreadable
  configs as the run's tool execution notifications;
- junit: one <testsuites> holding every config's <testsuite>, an unreadable config as a testsuite with an <error>;
- github: the annotation lines of all of them, an unreadable config as an ::error line.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from trl_doctor.report.formats import guard, render
from trl_doctor.report.formats._safe import for_terminal, xml_text

STATUSES = ("pass", "warn", "fail", "skip", "error")


def combine(fmt: str, reports: list, errors: list[str]) -> str:
    texts = [render(fmt, r) for r in reports]
    total = {k: sum(r.summary.get(k, 0) for r in reports) for k in STATUSES}
    return guard(fmt, _COMBINERS[fmt](texts, total, errors))


def _json(texts, total, errors) -> str:
    doc = {"configs": len(texts), "reports": [json.loads(t) for t in texts], "summary": total}
    if errors:
        doc["input_errors"] = errors
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _sarif(texts, total, errors) -> str:
    from trl_doctor.report.formats._sarif import document, merge_runs

    return document(merge_runs([json.loads(t)["runs"][0] for t in texts], errors))


def _junit(texts, total, errors) -> str:
    root = ET.Element("testsuites", name="trl-doctor", tests=str(sum(total.values()) + len(errors)),
                      failures=str(total["fail"]), errors=str(total["error"] + len(errors)), skipped=str(total["skip"]))
    for text in texts:
        root.extend(ET.fromstring(text.split("?>", 1)[-1].strip()).findall("testsuite"))
    for error in errors:
        suite = ET.SubElement(root, "testsuite", name="trl-doctor: unreadable input", tests="1", failures="0",
                              errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="trl_doctor.input", name="input")
        ET.SubElement(case, "error", message=xml_text(error), type="input").text = xml_text(error)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _github(texts, total, errors) -> str:
    from trl_doctor.report.formats._github import escape_data

    return "".join(texts) + "".join(f"::error title=trl-doctor::{escape_data(for_terminal(e))}\n" for e in errors)


def _table(texts, total, errors) -> str:
    line = f"{len(texts)} configs: " + ", ".join(f"{total[k]} {k}" for k in STATUSES)
    if errors:
        line += f"; {len(errors)} could not be read"
    return "\n".join(t.rstrip("\n") for t in texts) + ("\n\n" if texts else "") + line + "\n"


_COMBINERS = {"json": _json, "sarif": _sarif, "junit": _junit, "github": _github, "table": _table}
