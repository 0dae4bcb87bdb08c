"""The corpus (corpus/<case>/case.yaml): real scripts and recipes in the style of TRL's own examples of the releases
that recipes still pin, each run as the user types it after `trl-doctor check --`, with the verdicts a maintainer
reading the script and TRL's source gives (the case's `note` says why). A case runs where the installed versions
meet its `requires`; elsewhere it is skipped, so each CI lane checks the cases written for its releases."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from conftest import run_doctor

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
CASES = sorted(p.parent for p in CORPUS.glob("*/case.yaml"))


def _unmet(requires: dict) -> str | None:
    for package, spec in (requires or {}).items():
        try:
            have = version(package)
        except PackageNotFoundError:
            return f"{package} is not installed"
        if not SpecifierSet(spec).contains(have, prereleases=True):
            return f"written for {package}{spec}; {have} is installed"
    return None


def _case(folder: Path) -> dict:
    return yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("folder", CASES, ids=[c.name for c in CASES])
def test_corpus_case(built_fixtures, folder):
    case = _case(folder)
    unmet = _unmet(case.get("requires"))
    if unmet:
        pytest.skip(unmet)
    proc = run_doctor("check", "--format", "json", "--", *case["command"], cwd=(folder / case.get("cwd", ".")).resolve())
    expected = case["expected"]
    assert proc.returncode == expected["exit"], proc.stderr[-2000:]
    got = {r["rule"]: r["status"] for r in json.loads(proc.stdout)["results"]} if proc.stdout.strip() else {}
    wrong = {rule: (status, got.get(rule)) for rule, status in expected["rules"].items() if got.get(rule) != status}
    assert not wrong, f"(expected, got): {wrong}"


@pytest.mark.parametrize("folder", CASES, ids=[c.name for c in CASES])
def test_corpus_case_is_described(folder):
    case = _case(folder)
    assert isinstance(case["command"], list) and case["command"], folder.name
    assert (folder / case.get("cwd", ".")).is_dir(), folder.name
    assert {"repo", "path", "commit"} <= set(case["source"]), folder.name
    assert isinstance(case["expected"]["exit"], int) and case["note"].strip(), folder.name
    assert case["expected"]["exit"] == 2 or case["expected"]["rules"], folder.name
