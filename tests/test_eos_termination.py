"""TD004 end to end: the turn terminator missing from the stop set is found statically and by the
termination probe through the installed trainer's generation, --fix adds it, and the re-check (with the
real smoke step on the fixed checkpoint) passes."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import result_of, run_json


@pytest.mark.slow
def test_base_checkpoint_turn_end_is_fixed_and_generation_then_stops(fixture_copy):
    config = str(fixture_copy / "eos-termination" / "bad_base_template_turn_end.yaml")
    gen = fixture_copy / "models" / "qwen2-base" / "generation_config.json"
    code, report = run_json("check", config, "--select", "eos-termination,smoke-step")
    r = result_of(report, "eos-termination")
    assert code == 1 and r["status"] == "fail"
    assert "generation does not stop at '<|im_end|>' (id 2)" in r["message"]
    assert "max_completion_length (256)" in r["message"]
    assert "generate ran [8] steps (limit 8)" in r["details"]["termination probe"]
    assert r["fix"]["files"] == [str(gen)]
    code, report = run_json("check", config, "--select", "eos-termination,smoke-step", "--fix")
    assert code == 0, report
    r = result_of(report, "eos-termination")
    assert r["status"] == "pass" and r["fix"]["applied"]
    assert "the probe saw generation stop after 5 steps" in r["message"]
    assert json.loads(gen.read_text())["eos_token_id"] == [0, 2]
    assert result_of(report, "smoke-step")["status"] == "pass"


def test_llama3_first_release_eot(built_fixtures):
    code, report = run_json("check", str(built_fixtures / "eos-termination" / "bad_llama3_eot_missing.yaml"),
                            "--select", "eos-termination", "--no-smoke")
    r = result_of(report, "eos-termination")
    assert r["status"] == "fail"
    assert "'<|eot_id|>' (id 4) ends the assistant's turn but generation will not stop at it" in r["message"]
    assert r["details"]["termination probe"].startswith("not run (--no-smoke)")
    assert "'<|eot_id|>' (id 4) to generation_config.json eos_token_id: [1, 4]" in r["fix"]["description"]


def test_ppo_stop_token_fix_keeps_the_config_comments(fixture_copy):
    path = fixture_copy / "eos-termination" / "bad_ppo_no_stop_token.yaml"
    before = path.read_text()
    code, report = run_json("check", str(path), "--select", "eos-termination", "--fix")
    assert code == 0 and result_of(report, "TD004")["status"] == "pass"
    after = path.read_text()
    assert after.startswith(before.splitlines()[0])  # the comment line survives
    assert yaml.safe_load(after)["stop_token"] == "eos"
    assert yaml.safe_load(after)["response_length"] == 53
