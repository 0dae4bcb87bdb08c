"""JUnit XML: one testcase per rule, the shape Jenkins, GitLab and GitHub test reporters read.

fail -> <failure>, error -> <error>, skip -> <skipped>; warnings pass but carry their message in
<system-out> so dashboards show them without failing the build. Where the finding points (`at:
file:line:column (key)`) follows the message in that text, and the testcase's `file` (and `line`, as
pytest's xunit1 writes them) attributes name that file.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from trl_doctor.types import Status
from trl_doctor.report.formats import Report, describe, details_lines, fix_note, location_text


def render(report: Report, color: bool = False) -> str:
    s = report.summary
    total_time = sum(r.duration_s for r in report.results)
    suites = ET.Element("testsuites", name="trl-doctor", tests=str(len(report.results)), failures=str(s["fail"]),
                        errors=str(s["error"]), skipped=str(s["skip"]), time=f"{total_time:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=f"trl-doctor {report.config}", tests=str(len(report.results)),
                          failures=str(s["fail"]), errors=str(s["error"]), skipped=str(s["skip"]), time=f"{total_time:.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="trainer", value=report.trainer)
    ET.SubElement(props, "property", name="trl_doctor", value=report.version)
    for entry in report.settings:  # what narrows or silences the check, and where it comes from
        ET.SubElement(props, "property", name="setting in force", value=describe(entry))
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"trl_doctor.{r.rule}", name=f"{r.id} {r.rule}",
                             file=r.location.file if r.location else report.config, time=f"{r.duration_s:.3f}")
        if r.location is not None and r.location.line:
            case.set("line", str(r.location.line))
        where = [f"at: {location_text(r.location)}"] if r.location is not None else []
        body = "\n".join([r.message, *where, *details_lines(dict(r.details), indent="  ")])
        if r.fix is not None:
            body += "\n" + fix_note(r.fix)
        if r.suppressed:
            ET.SubElement(case, "skipped", message=f"suppressed by {r.suppressed}: {r.message}")
        elif r.status is Status.FAIL:
            ET.SubElement(case, "failure", message=r.message, type=r.rule).text = body
        elif r.status is Status.ERROR:
            ET.SubElement(case, "error", message=r.message, type=r.rule).text = body
        elif r.status is Status.SKIP:
            ET.SubElement(case, "skipped", message=r.message)
        elif r.status is Status.WARN:
            ET.SubElement(case, "system-out").text = f"warning: {body}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
