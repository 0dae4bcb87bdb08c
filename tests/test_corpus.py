"""The corpus of real recipes (corpus/): each case is a launch command as a user types it after
`trl-doctor check --`, run against the installed TRL, with the verdicts a maintainer gave after reading the script
and TRL's source (corpus/<case>/case.yaml: `expected.exit` and a status per rule).

A case declares the releases it was judged on (`requires`, pip specifiers); a lane whose versions do not match
skips it with the reason, and each lane runs the cases of its versions (corpus/README.md lists them). Two checks
hold for every case whatever its verdicts: no rule ends in `error`, and a healthy case (exit 0) has no `fail`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import accuracy_harness

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
CASES = sorted(p.parent for p in CORPUS.glob("*/case.yaml"))

pytestmark = [pytest.mark.trl_pair, pytest.mark.pinned_releases]  # each case names the releases it is judged on


def _case(folder: Path) -> dict:
    return yaml.safe_load((folder / "case.yaml").read_text())


def _unmet(requires: dict) -> str | None:
    """Why this environment is not one the case was judged on (None when it is)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    for package, spec in (requires or {}).items():
        try:
            have = version(package)
        except PackageNotFoundError:
            have = None
        if spec == "absent":
            if have is not None:
                return f"{package} {have} is installed (the case is judged without it)"
            continue
        if have is None:
            return f"{package} is not installed (the case needs {package}{spec})"
        if not SpecifierSet(str(spec)).contains(Version(have), prereleases=True):
            return f"{package} {have} is outside {spec}"
    return None


def test_the_corpus_has_the_cases_the_issue_asks_for():
    """At least 12 cases, each naming its source, and every rule status a real status."""
    assert len(CASES) >= 12, [c.name for c in CASES]
    for folder in CASES:
        case = _case(folder)
        assert case.get("source") and case.get("note"), folder.name
        assert isinstance(case["command"], list) and (folder / case.get("cwd", ".")).is_dir(), folder.name
        assert isinstance(case["expected"]["exit"], int), folder.name
        for status in (case["expected"].get("rules") or {}).values():
            assert status in ("pass", "warn", "fail", "skip"), (folder.name, status)


@pytest.mark.slow
@pytest.mark.parametrize("folder", CASES, ids=[c.name for c in CASES])
def test_corpus_case(folder, request):
    case = _case(folder)
    why = _unmet(case.get("requires") or {})
    if why:
        pytest.skip(f"judged on other releases: {why}")
    request.getfixturevalue("built_fixtures")
    request.getfixturevalue("corpus_models")
    # the same `check` the accuracy harness runs of the case (its command, folder and environment): a session runs
    # it once for both (tools/accuracy/run.py REPORTS_ENV, named by tests/conftest.py)
    proc = accuracy_harness().doctor_run(accuracy_harness().corpus_case(folder))
    expected = case["expected"]
    assert proc.returncode == expected["exit"], (proc.returncode, proc.stderr[-3000:], proc.stdout[-3000:])
    if expected["exit"] == 2:
        for words in expected.get("stderr", []):
            assert words in proc.stderr, proc.stderr
        return
    report = json.loads(proc.stdout)
    statuses = {r["rule"]: r["status"] for r in report["results"]}
    errors = {r["rule"]: r["message"] for r in report["results"] if r["status"] == "error"}
    assert not errors, errors
    if expected["exit"] == 0:
        assert "fail" not in statuses.values(), {r["rule"]: r["message"] for r in report["results"]
                                                  if r["status"] == "fail"}
    wrong = {rule: (statuses.get(rule), want) for rule, want in (expected.get("rules") or {}).items()
             if statuses.get(rule) != want}
    messages = {r["rule"]: r["message"] for r in report["results"] if r["rule"] in wrong}
    assert not wrong, (wrong, messages)
    for rule, words in (expected.get("messages") or {}).items():
        message = next(r for r in report["results"] if r["rule"] == rule)
        text = message["message"] + json.dumps(message.get("details") or {})
        for w in ([words] if isinstance(words, str) else words):
            assert w in text, (rule, w, message["message"])
    for words in expected.get("relaxed", []):
        assert any(words in why or words in key for key, why in (report.get("launch") or {}).get("relaxed", {}).items()), \
            report.get("launch")
    for words in expected.get("notes", []):  # what the launch section says of the capture (its world size...)
        assert any(words in note for note in (report.get("launch") or {}).get("notes", [])), report.get("launch")
    for words in expected.get("not_relaxed", []):
        assert not any(words in why for why in (report.get("launch") or {}).get("relaxed", {}).values()), \
            report.get("launch")
