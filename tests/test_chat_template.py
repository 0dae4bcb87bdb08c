"""TD012 chat-template through the CLI: a missing template, a template that raises, one that never opens the
assistant's turn, and the BOS as the installed TRL (and, up to 0.24, vLLM) tokenizes the prompts."""

from __future__ import annotations

import json
from importlib.metadata import version

from packaging.version import Version

from conftest import FIXTURES, check_here, result_of

TRL = Version(version("trl"))
HERE = FIXTURES / "chat-template"


def check(path):
    code, report = check_here(str(path), "--select", "chat-template", "--no-smoke")
    return code, result_of(report, "chat-template")


def test_conversational_prompts_without_a_template(built_fixtures):
    code, r = check(HERE / "bad_no_template.yaml")
    assert code == 1 and r["status"] == "fail"
    assert "16 of the 16 measured prompts are conversational" in r["message"]
    assert "gpt2-nopad has no chat template" in r["message"]
    # the installed transformers' own words ("Cannot use apply_chat_template() because ..." before 5.0)
    assert "ValueError: Cannot use" in r["message"] and "tokenizer.chat_template is not set" in r["message"]
    assert r["details"]["chat template"] == "none"


def test_prerendered_prompts_get_a_second_bos_where_trl_adds_special_tokens(built_fixtures):
    code, r = check(HERE / "bad_prerendered_double_bos.yaml")
    if TRL >= Version("0.26"):
        assert r["status"] == "warn"
        assert "16 of 16 plain-text prompts start with a duplicated BOS '<|begin_of_text|>'" in r["message"]
        assert "self.processing_class(text=prompts)" in r["message"]  # the installed trainer's own call, quoted
    else:
        assert r["status"] == "pass", r
        assert r["details"]["plain prompts tokenized"].startswith("without special tokens")


def test_plain_prompts_without_bos_where_trl_adds_no_special_tokens(built_fixtures):
    code, r = check(HERE / "bad_plain_prompts_without_bos.yaml")
    if TRL < Version("0.26"):
        assert r["status"] == "warn"
        assert "16 of 16 plain-text prompts reach the model without the BOS '<|begin_of_text|>'" in r["message"]
        assert "add_special_tokens=False" in r["message"] and "trl#3520" in r["message"]
    else:
        assert r["status"] == "pass", r
        assert r["details"]["plain prompts tokenized"].startswith("with special tokens")


def test_vllm_gets_two_bos_where_trl_sends_it_text(built_fixtures):
    code, r = check(HERE / "bad_vllm_double_bos.yaml")
    if TRL < Version("0.25"):
        assert r["status"] == "warn"
        assert "16 of 16 conversational prompts reach vLLM with two BOS '<|begin_of_text|>'" in r["message"]
        assert "trl#3853" in r["message"]
    else:
        assert r["status"] == "pass", r


def test_last_message_from_the_assistant_is_continued_not_flagged(built_fixtures, tmp_path):
    # a prompt ending with a partial assistant answer (prefill): no generation prompt is expected after it
    rows = [{"prompt": [{"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "The answer"}]}]
    data = tmp_path / "prefill.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    config = tmp_path / "prefill.yaml"
    config.write_text(f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\ndataset_path: {data}\n")
    code, r = check(config)
    assert code == 0 and r["status"] == "pass", r
    assert "generation prompt" not in r["details"]  # the probe is not run on a continued assistant message
