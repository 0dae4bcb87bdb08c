"""TD011 context-length through the CLI on the tiny fixtures, and the shared prompt measurement it stands on:
the lengths must be the ones the installed TRL's own prompt path produces."""

from __future__ import annotations

import json
from importlib.metadata import version
from types import SimpleNamespace

import pytest
import yaml
from packaging.version import Version

from conftest import FIXTURES, check_here, result_of

TRL = Version(version("trl"))
HERE = FIXTURES / "context-length"


def check(path, *extra):
    code, report = check_here(path, "--select", "context-length", "--no-smoke", *extra)
    return code, result_of(report, "context-length"), report


def test_rotary_model_with_a_little_of_the_budget_past_its_context_warns(built_fixtures, tmp_path):
    """Any completion budget past a rotary model's positions is a warning (the model never saw those positions and
    vLLM refuses the length), however small the overflow: here 41 + 30 = 71 on 64 positions, 23 of them left."""
    config = tmp_path / "recipe.yaml"
    config.write_text((HERE / "bad_completion_budget_past_context.yaml").read_text().replace("../", f"{FIXTURES}/")
                      .replace("max_completion_length: 64", "max_completion_length: 30"))
    (tmp_path / "rewards.py").write_text((HERE / "rewards.py").read_text())
    code, r, _ = check(config)
    assert code == 0 and r["status"] == "warn", r
    assert "completions longer than 23 tokens (of max_completion_length 30)" in r["message"]
    assert "set max_completion_length: 23" in r["message"]


def test_a_budget_that_fits_passes(built_fixtures):
    code, r, _ = check(FIXTURES / "chat-template" / "ok_chatml.yaml")
    assert code == 0 and r["status"] == "pass", r
    assert "41 tokens" in r["message"] and "+ max_completion_length 256 = 297 fits the model's max_position_embeddings 512" \
        in r["message"]


def test_prompts_longer_than_the_model(built_fixtures):
    code, r, _ = check(HERE / "bad_long_prompts.yaml")
    assert code == 1 and r["status"] == "fail"
    assert "5 of 100 (5.0%) of the measured prompts are as long as the model's max_position_embeddings 512 or longer" \
        in r["message"]
    assert "rows 7, 27, 47, 67, 87" in r["details"]["prompts that do not fit with a full completion"]
    assert r["details"]["prompt tokens"].startswith("max 1271 (row 87), p99 1246")
    if TRL >= Version("0.28"):
        assert "not a field of GRPOConfig" in r["details"]["max_prompt_length"]
    else:  # max_prompt_length's default (512) truncates them to the whole context
        assert "after truncation to max_prompt_length 512 (untruncated 1271)" in r["message"]
        assert any("truncates 5 of 100" in a for a in r["details"]["also"])


def test_prompt_truncation_by_version(built_fixtures):
    code, r, _ = check(HERE / "bad_prompt_truncation.yaml")
    if TRL < Version("0.28"):
        assert code == 0 and r["status"] == "warn"
        assert r["message"].startswith("max_prompt_length 256 truncates 5 of 100 (5.0%) of the measured prompts")
        assert "TRL keeps their last 256 tokens" in r["message"]
        assert "'<|im_start|>user\\n' (4 tokens)" in r["message"]  # the template's opening tokens are cut
    else:  # the key is unknown (trainer-config says so) and nothing truncates the 1271-token prompts
        assert code == 1 and r["status"] == "fail"
        assert "not a field of GRPOConfig in trl" in r["details"]["max_prompt_length"]


def test_truncation_cutting_the_generation_prompt(built_fixtures):
    code, r, _ = check(HERE / "bad_truncation_cuts_generation_prompt.yaml")
    if TRL < Version("0.28"):
        assert code == 1 and r["status"] == "fail"
        assert ("max_prompt_length 6 is shorter than the 12 tokens the chat template writes after the last message "
                "('<|im_end|>\\n<|im_start|>assistant\\n'") in r["message"]
        assert "set max_prompt_length to at least 12" in r["message"]
    else:
        assert code == 0 and r["status"] == "pass"


@pytest.mark.skipif(TRL < Version("0.27"), reason="vllm_max_model_length is a GRPOConfig field from trl 0.27")
def test_vllm_context_fix_is_the_smallest_and_idempotent(fixture_copy):
    path = fixture_copy / "context-length" / "bad_vllm_context.yaml"
    before = path.read_text()
    code, r, _ = check(path)
    assert code == 1 and r["status"] == "fail"
    assert ("vLLM's context (vllm_max_model_length 48) is shorter than the longest prompt + max_completion_length "
            "= 41 + 64 = 105") in r["message"]
    assert r["fix"]["description"].startswith("set vllm_max_model_length: 105")
    code, r, report = check(path, "--fix")
    assert code == 0 and r["status"] == "pass" and r["fix"]["applied"], r
    after = path.read_text()
    assert after.startswith(before.splitlines()[0])  # the comment survives
    assert yaml.safe_load(after)["vllm_max_model_length"] == 105
    assert {k: v for k, v in yaml.safe_load(after).items() if k != "vllm_max_model_length"} == \
        {k: v for k, v in yaml.safe_load(before).items() if k != "vllm_max_model_length"}
    _, _, again = check(path, "--fix")
    assert again["applied"] == [] and path.read_text() == after


def test_vllm_context_above_the_model(fixture_copy):
    if TRL < Version("0.27"):
        pytest.skip("vllm_max_model_length is a GRPOConfig field from trl 0.27")
    path = fixture_copy / "context-length" / "ok_vllm_colocate.yaml"
    path.write_text(path.read_text().replace("vllm_max_model_length: 128", "vllm_max_model_length: 4096"))
    code, r, _ = check(path)
    assert r["status"] == "fail"
    assert "vllm_max_model_length 4096 is larger than the model's max_position_embeddings 512" in r["message"]
    assert r["fix"]["description"].startswith("set vllm_max_model_length: 512")


# -- the shared measurement -------------------------------------------------------------------------------------------

def _context(config):
    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config

    return Context(load_config(config), Options(smoke=False))


def _trl_prompt_ids(tok, prompts):
    """Prompt ids from the installed TRL's own code: GRPOTrainer._tokenize_prompts (trl >= 1.0) on a stand-in
    trainer, or what 0.14-0.23's _prepare_inputs does inline (maybe_apply_chat_template, no special tokens)."""
    from trl import GRPOTrainer

    if hasattr(GRPOTrainer, "_tokenize_prompts"):
        fake = SimpleNamespace(processing_class=tok, _is_vlm=False, environment_factories=None, tools=None,
                               chat_template=None, chat_template_kwargs={})
        return GRPOTrainer._tokenize_prompts(fake, prompts)[0]
    from trl.data_utils import maybe_apply_chat_template

    texts = [maybe_apply_chat_template({"prompt": p}, tok)["prompt"] for p in prompts]
    return tok(texts, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("config", ["chat-template/ok_llama3_chat.yaml", "chat-template/bad_plain_prompts_without_bos.yaml",
                                    "chat-template/ok_chatml.yaml"])
def test_measured_lengths_are_the_installed_trls(built_fixtures, config):
    from trl_doctor.facts.inputs.chat import prompt_lengths

    with _context(FIXTURES / config) as ctx:
        facts = prompt_lengths(ctx)
        assert prompt_lengths(ctx) is facts  # measured once per run, shared by the rules
        ids = _trl_prompt_ids(ctx.tokenizer, list(ctx.dataset["prompt"]))
    assert facts["lengths"] == [len(x) for x in ids]
    assert facts["heads"] == [list(x[:2]) for x in ids]


def test_large_dataset_is_sampled_evenly(built_fixtures, tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "what is two plus " + "three " * (i % 7)}]} for i in range(2500)]
    data = tmp_path / "big.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "big.yaml"
    config.write_text(f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\ndataset_path: {data}\n"
                      "max_completion_length: 32\n")
    code, r, _ = check(config)
    assert r["status"] == "pass"
    assert r["details"]["prompts measured"] == "1000 rows evenly spaced over 2500"
    from trl_doctor.facts.inputs.chat import sample_indices

    picked = sample_indices(2500)
    assert len(picked) == 1000 and picked[0] == 0 and picked[-1] >= 2490 and picked == sorted(set(picked))


def test_over_the_character_budget_the_longest_stay_exact(built_fixtures, monkeypatch):
    from trl_doctor.facts.inputs import chat as _chat

    monkeypatch.setattr(_chat, "CHAR_BUDGET", 20_000)
    monkeypatch.setattr(_chat, "LONGEST_EXACT", 10)
    with _context(HERE / "bad_long_prompts.yaml") as ctx:
        facts = _chat.prompt_lengths(ctx)
        exact = ctx.tokenizer.apply_chat_template(ctx.dataset[87]["prompt"], add_generation_prompt=True, tokenize=True)
        exact = exact["input_ids"] if hasattr(exact, "keys") else exact
    assert facts["estimated"] > 0 and "estimated from their characters" in facts["measured"]
    assert facts["max"] == len(exact) == 1271 and facts["longest_row"] == 87  # the maximum is tokenized, not estimated
    assert all(n is not None and n > 0 for n in facts["lengths"])


def test_server_mode_pass_message_names_the_servers_setting(built_fixtures, tmp_path):
    from conftest import result_of

    from pathlib import Path

    fix = Path(__file__).resolve().parent.parent / "fixtures"
    config = tmp_path / "server.yaml"
    config.write_text(f"model_name_or_path: {fix / 'models' / 'qwen2-chat'}\ndataset_path: {fix / 'data' / 'chat.jsonl'}\n"
                      "use_vllm: true\nvllm_mode: server\nmax_completion_length: 32\n")
    code, report = check_here(str(config), "--no-smoke", "--select", "context-length")
    r = result_of(report, "context-length")
    if r["details"].get("vLLM mode") != "server":
        pytest.skip("the installed TRL has no vllm_mode: server")
    assert r["status"] == "pass" and "vLLM's server needs --max-model-len" in r["message"]
    assert "vLLM's the server's" not in r["message"]
