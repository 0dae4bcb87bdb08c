"""--fail-fast through the real command: the check ends at the first verdict that fails it, the worker (with the
trainer run still ahead) is stopped, the rules not reached are `skip` "not run: --fail-fast" in every format, and
with several configs the ones after the first failing config are not checked (as `pytest -x`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIXTURES, long_prompts_config, run_doctor

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

NOT_RUN = "not run: --fail-fast"

# context-length fails statically (5 prompts of ~1300 tokens do not fit 512 positions), yet the trainer builds and
# its step runs; the reward writes a mark each time it is called (reward-functions calls it, and so does the step)
MARKING_REWARD = '''
import os
from pathlib import Path


def length_reward(prompts, completions, **kwargs):
    # the mark goes outside the config's folder, which the check holds (trl_doctor/runtime/hold.py)
    with open(Path(os.environ["MARK_DIR"]) / (Path(__file__).parent.name + "-reward-called"), "a") as fh:
        fh.write("called\\n")
    return [0.0 for _ in completions]
'''


def _timed(*args: str, marks: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    env = {"TRL_DOCTOR_FORKSERVER": os.environ.get("TRL_DOCTOR_FORKSERVER", "")}
    proc = run_doctor(*args, env={**env, "MARK_DIR": str(marks)} if marks else env)
    return proc, time.monotonic() - start


@pytest.mark.slow
def test_fail_fast_stops_before_the_trainer_run_and_reports_every_format(built_fixtures, tmp_path, tmp_path_factory):
    marks = tmp_path_factory.mktemp("marks")
    cfg = long_prompts_config(tmp_path / "full", MARKING_REWARD)
    full, full_s = _timed("check", str(cfg), "--format", "json", marks=marks)
    assert full.returncode == 1, full.stderr
    by_id = {r["rule"]: r for r in json.loads(full.stdout)["results"]}
    assert by_id["context-length"]["status"] == "fail" and by_id["smoke-step"]["status"] == "pass", by_id["smoke-step"]
    assert (marks / "full-reward-called").exists()  # without --fail-fast the reward ran (and the step with it)

    cfg = long_prompts_config(tmp_path / "fast", MARKING_REWARD)
    out = {fmt: tmp_path / f"report.{fmt}" for fmt in ("sarif", "junit", "github")}
    fast, fast_s = _timed("check", str(cfg), "--fail-fast", "--format", "json",
                          *(a for fmt, path in out.items() for a in ("--report", f"{fmt}={path}")), marks=marks)
    assert fast.returncode == 1, fast.stderr
    report = json.loads(fast.stdout)
    by_id = {r["rule"]: r for r in report["results"]}
    assert by_id["context-length"]["status"] == "fail"
    not_run = {slug for slug, r in by_id.items() if r["message"] == NOT_RUN}
    # the static rules after TD011 and the whole trainer-run group were never reached
    assert {"chat-template", "reward-functions", "smoke-step", "logits-contract", "eos-termination"} <= not_run
    assert all(by_id[slug]["status"] == "skip" for slug in not_run)
    assert all(r["message"] != NOT_RUN for r in report["results"] if r["id"] < "TD011" and r["rule"] not in
               ("logits-contract", "eos-termination", "smoke-step"))
    assert not (marks / "fast-reward-called").exists()  # no reward call, no trainer step
    assert report["summary"]["skip"] >= len(not_run) and report["summary"]["fail"] == 1
    assert fast_s < full_s, (fast_s, full_s)

    sarif = json.loads(out["sarif"].read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"] if r["level"] == "error"] == ["TD011"]
    cases = ET.parse(out["junit"]).getroot().iter("testcase")
    skipped = {c.get("name") for c in cases if (s := c.find("skipped")) is not None and NOT_RUN in (s.get("message") or "")}
    assert any("smoke-step" in name for name in skipped), skipped
    github = out["github"].read_text().splitlines()
    assert [line.split("title=")[1].split("::")[0] for line in github if line.startswith("::error")] == ["TD011 context-length"]


def test_fail_fast_without_a_failure_runs_every_rule(built_fixtures):
    args = ("check", str(FIXTURES / "trainer-config" / "ok_grpo.yaml"), "--static", "--format", "json")
    plain, fast = run_doctor(*args), run_doctor(*args, "--fail-fast")
    assert plain.returncode == fast.returncode == 0, fast.stderr
    assert json.loads(fast.stdout)["summary"] == json.loads(plain.stdout)["summary"]
    assert NOT_RUN not in fast.stdout


def test_fail_fast_with_several_configs_stops_at_the_first_that_fails(built_fixtures):
    bad = str(FIXTURES / "batch-geometry" / "bad_num_generations_one.yaml")
    ok = str(FIXTURES / "trainer-config" / "ok_grpo.yaml")
    proc = run_doctor("check", bad, ok, "--static", "--select", "batch-geometry", "--num-processes", "1",
                      "--format", "json", "--fail-fast")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["configs"] == 1 and doc["reports"][0]["config"].endswith("bad_num_generations_one.yaml")
    assert "--fail-fast: 1 config(s) not checked after a failure" in proc.stderr and "ok_grpo.yaml" in proc.stderr
