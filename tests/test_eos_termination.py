"""TD004 end to end: the turn terminator missing from the stop set is found statically and by the
termination probe through the installed trainer's generation, --fix adds it, and the re-check (with the
real smoke step on the fixed checkpoint) passes."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import check_here, result_of, run_json


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
    from trl_doctor.facts.trl.generation import mask_eos

    mask = mask_eos("grpo")
    tok_cfg = fixture_copy / "models" / "qwen2-base" / "tokenizer_config.json"
    # where the trainer's mask ends at the tokenizer's eos only, the fix retargets that eos as well (docs/coverage.md B8)
    retarget = [] if mask is not None and mask.kind == "all" else [
        str(tok_cfg.parent / f) for f in ("tokenizer_config.json", "special_tokens_map.json") if (tok_cfg.parent / f).exists()]
    assert sorted(r["fix"]["files"]) == sorted([str(gen)] + retarget)
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


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_multi_eos_terminator_the_mask_ignores_is_reported_and_the_fix_retargets_the_tokenizer_eos(fixture_copy):
    """Catalog B8 on trl 1.12.0 (its GRPOTrainer ends completions at the tokenizer's eos only): Phi-3.5's `<|end|>`
    stops generation through generation_config.json but ends neither the mask nor the truncation judgement. The fix
    sets the tokenizer's eos to it; the installed TRL (every stop id by 1.16) passes the same checkpoint as it is."""
    from conftest import real_trl
    from trl_doctor.facts.trl.generation import mask_eos

    config = str(fixture_copy / "eos-termination" / "bad_phi_multi_eos.yaml")
    tok_cfg = fixture_copy / "models" / "phi-multieos" / "tokenizer_config.json"
    env = real_trl("1.12.0")
    code, report = run_json("check", config, "--select", "eos-termination", "--no-smoke", env=env)
    r = result_of(report, "eos-termination")
    assert code == 0 and r["status"] == "warn", r["message"]
    assert "completions end at '<|end|>' (id 3), where generation stops (generation_config.json eos_token_id [3, 0])" in r["message"]
    assert "GRPOTrainer ends completions at the tokenizer's eos '<|endoftext|>' (id 0) only" in r["message"]
    assert "is_eos = completion_ids == self._tokenizer.eos_token_id" in r["message"]
    assert "runs on into the padding generate adds after it" in r["message"]
    # with vLLM and mask_truncated_completions, every finished completion is dropped: a failure
    dropping = fixture_copy / "eos-termination" / "phi_vllm_dropping.yaml"
    dropping.write_text(open(config).read() + "use_vllm: true\nmask_truncated_completions: true\n")
    code, report = run_json("check", str(dropping), "--select", "eos-termination", "--no-smoke", env=env)
    r = result_of(report, "eos-termination")
    assert code == 1 and r["status"] == "fail", r["message"]
    assert "counts as truncated (completions/clipped_ratio near 1), and mask_truncated_completions drops them all" in r["message"]
    assert r["fix"]["files"] == [str(tok_cfg)]
    code, report = run_json("check", config, "--select", "eos-termination", "--no-smoke", "--fix", env=env)
    r = result_of(report, "eos-termination")
    assert code == 0 and r["status"] == "pass" and r["fix"]["applied"], r["message"]
    assert json.loads(tok_cfg.read_text())["eos_token"] == "<|end|>"

    installed = mask_eos("grpo")
    if installed is not None and installed.kind == "all":
        code, report = run_json("check", str(fixture_copy / "eos-termination" / "bad_phi_multi_eos.yaml"),
                                "--select", "eos-termination", "--no-smoke")
        assert result_of(report, "eos-termination")["status"] == "pass"


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_adding_a_terminator_also_retargets_the_eos_where_the_mask_needs_it(fixture_copy):
    """TD004's own fix must not create the B8 mismatch: on trl 1.12.0 adding <|im_end|> to generation_config.json
    alone would stop generation where the mask (at <|endoftext|>) does not end, so the fix sets the eos too."""
    from conftest import real_trl

    config = str(fixture_copy / "eos-termination" / "bad_base_template_turn_end.yaml")
    model = fixture_copy / "models" / "qwen2-base"
    env = real_trl("1.12.0")
    code, report = run_json("check", config, "--select", "eos-termination", "--no-smoke", "--fix", env=env)
    r = result_of(report, "eos-termination")
    assert code == 0 and r["status"] == "pass", r["message"]
    assert sorted(r["fix"]["files"]) == sorted(str(model / f) for f in ("generation_config.json", "tokenizer_config.json",
                                                                         "special_tokens_map.json") if (model / f).exists())
    assert json.loads((model / "generation_config.json").read_text())["eos_token_id"] == [0, 2]
    assert json.loads((model / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_ppo_custom_stop_token_with_eos_penalty(built_fixtures):
    """Catalog F6: PPO truncates at stop_token_id but its missing_eos_penalty looks for the tokenizer's eos."""
    folder = built_fixtures / "eos-termination"
    code, report = check_here(str(folder / "bad_ppo_stop_token_id_not_eos.yaml"), "--select", "eos-termination", "--no-smoke")
    r = result_of(report, "TD004")
    assert code == 0 and r["status"] == "warn"
    assert "stop_token_id 0 ('<|endoftext|>') is not the tokenizer's eos '<|im_end|>' (2)" in r["message"]
    assert "use `stop_token: eos`" in r["fix"]["description"]
    code, report = check_here(str(folder / "bad_ppo_eos_penalty_custom_stop.yaml"), "--select", "eos-termination", "--no-smoke")
    r = result_of(report, "TD004")
    assert code == 1 and r["status"] == "fail"
    assert "missing_eos_penalty 1.0 with stop_token_id 0" in r["message"]
    assert "every response that stopped properly loses 1.0" in r["message"]
    code, report = check_here(str(folder / "ok_ppo_eos_penalty.yaml"), "--select", "eos-termination", "--no-smoke")
    assert result_of(report, "TD004")["status"] == "pass"

