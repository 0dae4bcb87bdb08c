"""Data-driven: every case in fixtures/<slug>/ gives the status written in that folder's expected.yaml.

Each rule has a folder with broken (bad_*) and healthy (ok_*) cases; a healthy case that does not pass
is a false alarm and fails this test just as a missed broken case does.
"""

from __future__ import annotations

import yaml
import pytest

from conftest import FIXTURES, result_of, run_json

CASES = []
for expected_file in sorted(FIXTURES.glob("*/expected.yaml")):
    spec = yaml.safe_load(expected_file.read_text())
    for case, status in spec["cases"].items():
        CASES.append(pytest.param(expected_file.parent / case, spec["rule"], status, id=f"{expected_file.parent.name}/{case}"))


def expected_statuses(expected) -> tuple[list[str], bool]:
    """(allowed statuses, version-conditional?) for one case of expected.yaml."""
    if isinstance(expected, str):
        return [expected], False
    if all(isinstance(e, str) for e in expected):
        return list(expected), False
    from importlib.metadata import version

    from packaging.requirements import Requirement

    for entry in expected:
        when = entry.get("when")
        if when is None:
            return [entry["status"]], True
        req = Requirement(when)
        if req.specifier.contains(version(req.name), prereleases=True):
            return [entry["status"]], True
    raise AssertionError(f"no entry matches the installed versions: {expected}")


@pytest.mark.parametrize("config, rule, expected", CASES)
def test_case_status(built_fixtures, config, rule, expected):
    code, report = run_json("check", str(config), "--select", rule)
    result = result_of(report, rule)
    allowed, conditional = expected_statuses(expected)
    assert result["status"] in allowed, f"{config.name}: {result['status']}: {result['message']}\n{result['details']}"
    assert code == (1 if result["status"] in ("fail", "error") else 0)
    if config.name.startswith("bad_") and not conditional:
        # a broken case must never pass (version-conditional cases say where it is broken)
        assert result["status"] != "pass"
    assert result["message"]


def test_every_case_file_is_listed():
    """A fixture config nobody checks is dead weight: every bad_/ok_ file must be in expected.yaml."""
    for expected_file in FIXTURES.glob("*/expected.yaml"):
        listed = set(yaml.safe_load(expected_file.read_text())["cases"])
        present = {p.name for p in expected_file.parent.iterdir() if p.name.startswith(("bad_", "ok_"))}
        assert listed == present, expected_file
