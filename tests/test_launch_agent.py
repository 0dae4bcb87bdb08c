"""A script's rollout_func judged by whether the installed trainer calls it (issue 60: "A rollout_func that a TRL
before 0.28 ignores: the job trains without it, silently"). fixtures/launch/grpo_rollout_func.py passes one, as
GRPOTrainer documents it, with no vLLM. The ground truth is the script itself, run for its one step by the installed
TRL: each call of the rollout appends a line to GRPO_ROLLOUT_CALLS. trl 1.16 calls it (the job trains on the
rollout's completions, reward 1); trl 0.25-0.27 call it only when generating with vLLM (grpo_trainer.py at v0.27.0:
`rollout_func` is read inside the `use_vllm` branches only), so there the job trains on the model's own samples,
reward 0, and says nothing. CI's trl024 lane runs this file with trl 0.27.0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import result_of, run_doctor

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"
TRL = Version(version("trl"))
IGNORES = Version("0.25") <= TRL < Version("0.28")  # takes rollout_func, calls it only with vLLM

pytestmark = [pytest.mark.skipif(TRL < Version("0.25"), reason=f"trl {TRL}'s GRPOTrainer takes no rollout_func"),
              pytest.mark.boundary]  # a launch and the script's own run: CI's boundary step, every submission


def _real_run(tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    proc = subprocess.run([sys.executable, str(LAUNCH / "grpo_rollout_func.py")],
                          cwd=tmp_path, env=dict(os.environ, GRPO_ROLLOUT_CALLS=str(calls)), capture_output=True,
                          text=True, timeout=600)
    return proc, calls.read_text().split() if calls.exists() else []


def test_the_rollout_the_installed_trl_never_calls_fails_the_step_and_one_it_calls_passes(tmp_path):
    proc, calls = _real_run(tmp_path)  # the ground truth: the installed TRL's own step of the script
    assert proc.returncode == 0 and "'loss'" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert bool(calls) is not IGNORES, (TRL, calls)
    proc = run_doctor("check", "--select", "smoke-step", "--format", "json", "--", "python", "grpo_rollout_func.py",
                      cwd=LAUNCH)
    code, report = proc.returncode, json.loads(proc.stdout)
    smoke = result_of(report, "smoke-step")
    if IGNORES:
        assert code == 1 and smoke["status"] == "fail", smoke
        assert "rollout_func was never called" in smoke["message"] and f"trl {TRL}" in smoke["message"], smoke
        assert "use_vllm is off" in smoke["message"] and smoke["details"]["rollout_func"] == "called 0 times in the step"
    else:
        assert code == 0 and smoke["status"] == "pass", smoke
        assert smoke["details"]["rollout_func"].startswith("called ") and "called 0 " not in smoke["details"]["rollout_func"]
