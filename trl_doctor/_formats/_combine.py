"""Several configs in one call (`trl-doctor check a.yaml b.yaml 'recipes/**/*.yaml'`): each config's report as its
format writes it, combined into one document of the same format, with one summary over all of them.

- table: the reports one after another, then `N configs: ...` with the summed counts;
- json: `{"reports": [each report], "summary": {summed counts}, "configs": N}`;
- sarif: one log with one run per config (SARIF's own way to hold several);
- junit: one <testsuites> holding every config's <testsuite>;
- github: the annotation lines of all of them.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

STATUSES = ("pass", "warn", "fail", "skip", "error")


def combine(fmt: str, texts: list[str], summaries: list[dict[str, int]], errors: list[str]) -> str:
    total = {k: sum(s.get(k, 0) for s in summaries) for k in STATUSES}
    if fmt == "json":
        doc = {"configs": len(texts), "reports": [json.loads(t) for t in texts], "summary": total}
        if errors:
            doc["input_errors"] = errors
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if fmt == "sarif":
        docs = [json.loads(t) for t in texts]
        if not docs:
            return ""
        merged = dict(docs[0], runs=[run for d in docs for run in d["runs"]])
        return json.dumps(merged, indent=2) + "\n"
    if fmt == "junit":
        root = ET.Element("testsuites", name="trl-doctor", tests=str(sum(total.values())), failures=str(total["fail"]),
                          errors=str(total["error"] + len(errors)), skipped=str(total["skip"]))
        for text in texts:
            root.extend(ET.fromstring(text.split("?>", 1)[-1].strip()).findall("testsuite"))
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
    if fmt == "github":
        return "".join(texts)
    line = f"{len(texts)} configs: " + ", ".join(f"{total[k]} {k}" for k in STATUSES)
    if errors:
        line += f"; {len(errors)} could not be read"
    return "\n".join(t.rstrip("\n") for t in texts) + ("\n\n" if texts else "") + line + "\n"
