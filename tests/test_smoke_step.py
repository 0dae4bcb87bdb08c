"""TD006 through the real command: the installed TRL's GRPOTrainer takes one step on the miniature twin
on the CPU, and broken reward functions are reported by name and cause."""

from __future__ import annotations

import math

from conftest import result_of, run_json


def test_healthy_grpo_step_on_the_twin(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml"), "--select", "smoke-step,TD009")
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "pass", smoke
    d = smoke["details"]
    assert d["device"] == "cpu" and d["trainer"] == "GRPOTrainer"
    assert d["model"].startswith("miniature twin of Qwen2")
    assert math.isfinite(d["loss"]) and math.isfinite(d["grad_norm"]) and d["grad_norm"] > 0
    updated, total = map(int, d["updated tensors"].split("/"))
    assert updated == total > 0
    assert d["reward rewards.length_reward"].startswith("1 calls, 2 completions")
    assert 0 < d["completion mean length"] <= 8  # the smoke step's short completions
    assert code == 0


def test_reward_that_raises_names_the_function_file_and_error(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "bad_reward_raises.yaml"), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail"
    assert "reward function rewards.raising_reward raised KeyError: 'answer' at rewards.py:" in smoke["message"]
    assert 'kwargs["answer"]' in smoke["details"]["traceback"]


def test_reward_with_wrong_length_is_named(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "smoke-step" / "bad_reward_wrong_length.yaml"), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert code == 1 and smoke["status"] == "fail"
    assert "wrong_length_reward" in smoke["message"] and "1" in smoke["message"] and "2" in smoke["message"]


def test_issue_end_to_end_gpt2_check_fix_recheck(fixture_copy):
    """The whole path: pad-token finding, the smoke step on the twin, --fix, and a clean re-check."""
    config = str(fixture_copy / "pad-token" / "bad_gpt2_nopad.yaml")
    rules = ("--select", "pad-token,smoke-step,trainer-config")
    code, report = run_json("check", config, *rules)
    pad = result_of(report, "pad-token")
    smoke = result_of(report, "smoke-step")
    assert smoke["details"]["model"].startswith("miniature twin of GPT2")
    if pad["status"] == "fail":
        # a trainer that does not pad by itself: the real step crashes exactly as the rule predicted
        assert smoke["status"] == "fail" and "Asking to pad but the tokenizer does not have a padding token" in smoke["message"]
    else:
        assert pad["status"] == "warn" and smoke["status"] == "pass", smoke
    code, report = run_json("check", config, *rules, "--fix", "--fail-on", "warn")
    assert code == 0, report
    assert [r["status"] for r in report["results"]] == ["pass", "pass", "pass"]
    assert result_of(report, "pad-token")["fix"]["applied"] is True
