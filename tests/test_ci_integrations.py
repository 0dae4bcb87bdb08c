"""Plugging into CI: several configs (and globs) in one call with one combined report and exit status, `--static`,
the pre-commit hook and the GitHub composite action, each run for real on the fixtures."""

from __future__ import annotations

import pytest

import json
import os
import re
import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from conftest import run_doctor, trl_doctor_exe

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
GOOD = str(FIX / "trainer-config" / "ok_grpo.yaml")
BAD = str(FIX / "trainer-config" / "bad_unknown_key.yaml")


def test_several_configs_one_report_and_one_exit_status(built_fixtures):
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", GOOD, BAD)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["configs"] == 2 and [r["config"] for r in doc["reports"]] == [GOOD, BAD]
    assert doc["summary"]["pass"] == 1 and doc["summary"]["fail"] == 1


def test_a_glob_and_the_table_summary(built_fixtures):
    pattern = "ok_[gr]*.yaml"  # configs every lane's TRL accepts
    proc = run_doctor("check", "--static", "--select", "trainer-config", str(FIX / "trainer-config" / pattern))
    n = len(list((FIX / "trainer-config").glob(pattern)))
    assert n >= 2
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1] == f"{n} configs: {n} pass, 0 warn, 0 fail, 0 skip, 0 error"


def test_an_unreadable_config_among_several_is_exit_2_and_the_others_are_checked(built_fixtures, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", GOOD, str(broken))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"trl-doctor: error: {broken}: invalid YAML")
    doc = json.loads(proc.stdout)
    assert doc["configs"] == 1 and doc["input_errors"]
    proc = run_doctor("check", str(tmp_path / "nothing-*.yaml"))
    assert proc.returncode == 2 and "no config file matches" in proc.stderr


def test_combined_sarif_and_junit(built_fixtures, tmp_path):
    sarif = tmp_path / "out.sarif"
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "sarif", "-o", str(sarif), GOOD, BAD)
    assert proc.returncode == 1
    assert len(json.loads(sarif.read_text())["runs"]) == 2
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "junit", GOOD, BAD)
    suites = ET.fromstring(proc.stdout.split("?>", 1)[1])
    assert len(suites.findall("testsuite")) == 2 and suites.get("failures") == "1"


def test_static_runs_no_trainer(built_fixtures):
    proc = run_doctor("check", "--static", "--format", "json", GOOD)
    ids = {r["id"] for r in json.loads(proc.stdout)["results"]}
    assert ids and not ids & {"TD003", "TD004", "TD006"}


def test_the_pre_commit_hook_runs_on_the_files_a_commit_changes(built_fixtures):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "trl-doctor" and hook["pass_filenames"] is True and hook["language"] == "python"
    entry = shlex.split(hook["entry"])
    assert entry[0] == "trl-doctor"
    proc = subprocess.run([trl_doctor_exe(), *entry[1:], GOOD, BAD], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1  # pre-commit blocks the commit
    assert "2 configs:" in proc.stdout and "does not know" in proc.stdout


def test_the_github_action_checks_uploads_and_fails_on_the_exit_status(built_fixtures, tmp_path):
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = {s.get("id") or s["name"]: s for s in action["runs"]["steps"]}
    assert steps["Upload SARIF"]["uses"].startswith("github/codeql-action/upload-sarif@")
    assert steps["Exit status"]["run"].strip() == "exit ${{ steps.check.outputs.status }}"
    # the check step's own script, run as the runner runs it (inputs substituted, GITHUB_OUTPUT a file)
    inputs = {"args": "--static --select trainer-config", "configs": f"{GOOD} {BAD}", "sarif": str(tmp_path / "r.sarif")}
    script = re.sub(r"\$\{\{ inputs\.(\w+) \}\}", lambda m: inputs[m.group(1)], steps["check"]["run"])
    out = tmp_path / "github_output"
    env = dict(os.environ, GITHUB_OUTPUT=str(out), TRL_DOCTOR_TARGET="",
               PATH=f"{Path(trl_doctor_exe()).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-e", "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr  # the step itself succeeds; the last step fails the job
    assert out.read_text().strip() == "status=1"
    assert len(json.loads(Path(inputs["sarif"]).read_text())["runs"]) == 2
    assert "::error" in proc.stdout  # the annotations
