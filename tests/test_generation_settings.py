"""TD021 end to end, through the real command with the installed TRL and transformers: generation_config.json
sampling keys that transformers merges into the trainer's GenerationConfig (docs/coverage.md B11), a tokenizer's
token_type_ids that the trainer hands to a generate that refuses them (B10, with the real smoke step showing the
crash it predicts), and no false alarm on any healthy fixture."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
import yaml
from packaging.version import Version

from conftest import FIXTURES, check_here, result_of, run_doctor, run_json, trl_has
from trl_doctor.facts.trl.generation import token_type_ids_reach_generate

HERE = FIXTURES / "generation-settings"
MERGES = Version(version("transformers")) >= Version("4.50")  # older transformers fall back to special-token ids only


def check(config) -> dict:
    code, report = check_here(str(config), "--select", "generation-settings", "--no-smoke")
    r = result_of(report, "TD021")
    assert code == (1 if r["status"] == "fail" else 0)
    return r


def test_min_p_from_generation_config_names_both_values_and_the_pin(built_fixtures):
    r = check(HERE / "bad_min_p_in_generation_config.yaml")
    if not MERGES:
        assert r["status"] == "pass", r["message"]
        return
    assert r["status"] == "warn", r["message"]
    assert "min_p 0.1 (generation_config.json) instead of unset (GRPOConfig.min_p = None)" in r["message"]
    assert "no_repeat_ngram_size 4 (generation_config.json) instead of 0 (GRPOTrainer does not pass it" in r["message"]
    assert r["fix"]["applicability"] == "manual"
    assert "`min_p: 0.0`" in r["fix"]["description"]
    assert "`generation_kwargs: {no_repeat_ngram_size: 0}`" in r["fix"]["description"]
    assert r["details"]["trainer's GenerationConfig"].startswith("trl/trainer/grpo_trainer.py:")


def test_the_manual_pin_makes_it_pass(built_fixtures):
    """The fix's own advice, applied: min_p and no_repeat_ngram_size set in the config."""
    r = check(HERE / "ok_min_p_pinned.yaml")
    assert r["status"] == "pass", r["message"]
    assert r["details"]["sampling"].startswith("generation_config.json changes no sampling setting")


def test_sampling_defaults_the_trainer_passes_itself_are_not_reported(built_fixtures):
    """Qwen2.5-Instruct's temperature/top_p/top_k/repetition_penalty: GRPO passes all of them, so they change nothing."""
    r = check(HERE / "ok_instruct_sampling_defaults.yaml")
    assert r["status"] == "pass", r["message"]


def test_vllm_takes_explicit_sampling_params(built_fixtures, tmp_path):
    cfg = yaml.safe_load((HERE / "bad_min_p_in_generation_config.yaml").read_text())
    cfg.update(use_vllm=True, model_name_or_path=str(FIXTURES / "models" / "qwen2-minp"),
               dataset_path=str(FIXTURES / "data" / "chat.jsonl"), reward_funcs=[str(HERE / "rewards.py") + ":length_reward"])
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = check(path)
    assert r["status"] == "pass", r["message"]
    assert r["details"]["sampling"].startswith("vLLM samples with the SamplingParams TRL builds")


def test_token_type_ids_fix_drops_them_and_the_recheck_passes(fixture_copy):
    config = fixture_copy / "generation-settings" / "bad_token_type_ids_chat.yaml"
    tok_cfg = fixture_copy / "models" / "qwen2-tokentype" / "tokenizer_config.json"
    r = check(config)
    reaches, evidence = token_type_ids_reach_generate("grpo")
    if not reaches:
        assert r["status"] == "pass" and "token_type_ids" in r["details"]["token_type_ids"]
        return
    assert r["status"] == "fail", r["message"]
    assert "the tokenizer returns token_type_ids" in r["message"]
    assert "Qwen2ForCausalLM refuses" in r["message"] and "['token_type_ids']" in r["message"]
    assert r["details"]["trainer's prompt inputs"] == evidence
    assert r["fix"]["files"] == [str(tok_cfg)]
    code, report = run_json("check", str(config), "--select", "generation-settings", "--no-smoke", "--fix")
    r = result_of(report, "TD021")
    assert code == 0 and r["status"] == "pass" and r["fix"]["applied"], r
    assert json.loads(tok_cfg.read_text())["model_input_names"] == ["input_ids", "attention_mask"]


@pytest.mark.slow
def test_token_type_ids_crash_is_real_in_the_smoke_step(built_fixtures):
    """What TD021 predicts statically is what the installed trainer does: its real step on the twin stops in generate."""
    if not token_type_ids_reach_generate("grpo")[0]:
        pytest.skip("the installed GRPOTrainer passes input_ids and the attention mask only")
    code, report = check_here(str(HERE / "bad_token_type_ids_chat.yaml"), "--select", "smoke-step")
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "fail", smoke["message"]
    assert "token_type_ids" in smoke["message"] + json.dumps(smoke["details"])


@pytest.mark.skipif(not trl_has("ppo"), reason="the installed TRL has no PPO trainer")
def test_ppo_script_with_a_right_padding_tokenizer_fails_and_the_fix_pads_left(fixture_copy, monkeypatch):
    """Catalog H8: a script that loads the tokenizer as the checkpoint says (padding_side right) hands PPO a collator
    that pads queries on the right; from a config file TRL's example script pads left, so the same checkpoint passes."""
    folder = fixture_copy / "generation-settings"
    tok_cfg = fixture_copy / "models" / "qwen2-rightpad" / "tokenizer_config.json"
    monkeypatch.chdir(folder)
    command = ["--", "python", "ppo_script_right_padding.py", "--sft_model_path", "../models/qwen2-rightpad",
               "--reward_model_path", "../models/rm-qwen2", "--output_dir", "out/ppo", "--per_device_train_batch_size",
               "2", "--response_length", "16", "--stop_token", "eos", "--report_to", "none"]
    proc = run_doctor("check", "--no-smoke", "--select", "generation-settings", "--format", "json", *command)
    r = result_of(json.loads(proc.stdout), "TD021")
    assert proc.returncode == 1 and r["status"] == "fail", r["message"]
    assert "the script's tokenizer pads on the right" in r["message"] and "PPOTrainer" in r["message"]
    assert r["fix"]["files"] == [str(tok_cfg)]
    proc = run_doctor("check", "--no-smoke", "--select", "generation-settings", "--fix", "--format", "json", *command)
    r = result_of(json.loads(proc.stdout), "TD021")
    assert proc.returncode == 0 and r["status"] == "pass", r["message"]
    assert json.loads(tok_cfg.read_text())["padding_side"] == "left"


# -- docs/coverage.md H4: generation with gradient checkpointing still on ---------------------------------------------------

def _trl_release(release: str) -> dict:
    """The real trl `release` from PyPI (no dependencies) first on PYTHONPATH: its source is what is read."""
    from conftest import pypi_release

    return pypi_release("trl", release)


@pytest.mark.skipif(Version(version("transformers")) < Version("4.55"), reason="trl 0.21 and 0.22 need transformers>=4.55")
@pytest.mark.parametrize("release, status", [("0.21.0", "warn"), ("0.22.0", "pass")])
@pytest.mark.other_trl  # seconds long (a trainer run or a process of its own): CI's long selection
def test_checkpointed_generation_by_release(built_fixtures, release, status):
    """trl 0.21 generates with checkpointing on (no KV cache); 0.22 turns it off in unwrap_model_for_generation."""
    proc = run_doctor("check", str(HERE / "bad_checkpointing_generation_without_cache.yaml"), "--select",
                      "generation-settings", "--no-smoke", "--format", "json", env=_trl_release(release))
    r = result_of(json.loads(proc.stdout), "generation-settings")
    assert r["status"] == status, r
    if status == "warn":
        assert "turns the KV cache off (use_cache=False)" in r["message"] and "generating 64 tokens" in r["message"]
        assert "use_vllm: true" in r["fix"]["description"] and "trl>=0.22" in r["fix"]["description"]
    else:
        assert "turns gradient checkpointing off to generate" in r["details"]["generation and checkpointing"]
