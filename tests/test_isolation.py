"""The check's one heavy worker runs the user's code; the printing process survives whatever that code does.

Through the real command: a reward function that hangs (the smoke timeout stops it), that segfaults, or that
is killed by SIGKILL (named so, not blamed on the out-of-memory killer, which the kernel's record does not show); the
step fails with the cause, and every result streamed before
stays in the report. A worker that dies in the user's code during a static rule (inside the fence, see
test_fence.py) fails that rule with the cause and the check goes on; one that dies at start-up errors every rule.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES, result_of, run_json

HERE = FIXTURES / "isolation"
pytestmark = [pytest.mark.slow, pytest.mark.release_free]


def check(case: str, *args: str) -> tuple[int, dict]:
    return run_json("check", str(HERE / case), "--select", "trainer-config,chat-template,smoke-step", *args)


def test_a_hanging_step_is_stopped_at_the_smoke_timeout(built_fixtures):
    code, report = check("hanging.yaml", "--smoke-timeout", "25")
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail"
    assert smoke["message"].startswith("the smoke step did not finish within --smoke-timeout 25s (stage: train)")
    assert smoke["details"]["device"] == "cpu" and smoke["details"]["wall_s"] >= 25
    # the rules that finished before the step are kept
    assert result_of(report, "trainer-config")["status"] == "pass"
    assert result_of(report, "chat-template")["status"] == "pass"


@pytest.mark.parametrize("case, signal_words", [
    ("segfault.yaml", "killed by SIGSEGV"),
    ("killed.yaml", "killed by SIGKILL)"),  # not the OOM killer: the kernel's record shows no OOM kill
])
def test_a_step_that_kills_its_process_fails_with_the_cause(built_fixtures, case, signal_words):
    code, report = check(case)
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail", smoke
    assert "the smoke step's process died with exit status" in smoke["message"] and "at stage train" in smoke["message"]
    assert signal_words in smoke["message"]
    assert "[trl-doctor] stage: train" in smoke["details"]["log_tail"]
    assert result_of(report, "trainer-config")["status"] == "pass"


def test_a_worker_that_dies_in_a_reward_call_fails_that_rule_only(built_fixtures):
    # the reward-functions rule calls the reward itself (without a model): the segfault takes the worker down there
    code, report = run_json("check", str(HERE / "segfault.yaml"), "--select",
                            "trainer-config,reward-functions,precision-and-attention")
    rewards = result_of(report, "reward-functions")
    assert code == 1 and rewards["status"] == "fail"
    assert rewards["message"] == "rewards.py (calling rewards.segfault_reward) ended the check's worker: killed by SIGSEGV"
    # the rules before it were streamed, the ones after it ran in a fresh worker
    assert result_of(report, "trainer-config")["status"] == "pass"
    assert result_of(report, "precision-and-attention")["status"] in ("pass", "warn")


def test_a_worker_that_dies_at_start_up_errors_every_rule_at_once(built_fixtures, tmp_path):
    # a broken environment (here a sitecustomize that exits in the worker only) is not one rule's doing
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('TRL_DOCTOR_CHANNEL_FD'):\n    print('broken environment', flush=True)\n    os._exit(3)\n")
    code, report = run_json("check", str(FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml"), "--select",
                            "trainer-config,smoke-step", env={"PYTHONPATH": str(tmp_path), "TRL_DOCTOR_FORKSERVER": ""})
    assert code == 1 and [r["id"] for r in report["results"]] == ["TD006", "TD009"]
    for r in report["results"]:
        assert r["status"] == "error"
        assert r["message"].startswith("not run: the check's worker process died at start-up (exit status 3)")
        assert "broken environment" in r["details"]["log_tail"]
