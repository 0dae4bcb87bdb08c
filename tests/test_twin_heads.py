"""The step's twins are built as TRL builds the models, and its probes do not assume what a model has (issue 21).

- A reward or value model loaded with `AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)` from a
  causal-LM checkpoint (TRL's PPO example pointed at the SFT model) gets a fresh 1-row score head, as transformers
  gives it: the step must not fail on a 2-row twin head that the real checkpoint does not have. A real checkpoint
  whose score head has 2 rows is still the real size mismatch.
- A remote-code model without get_output_embeddings() leaves the termination probe nothing to hook: the probe is
  skipped with its reason, and the step still runs.
"""

from __future__ import annotations

import inspect
import json

import pytest

from conftest import FIXTURES, real_trl, result_of, run_doctor, run_json

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("built_fixtures")]

LAUNCH = FIXTURES / "launch"


def _ppo_env() -> dict:
    from trl_doctor.facts.trl.installed import trainer_class

    return {} if trainer_class("ppo") is not None else real_trl("1.12.0")


def _ppo_example(reward_path: str, env: dict) -> dict:
    proc = run_doctor("check", "--select", "smoke-step", "--format", "json", "--", "python", "ppo_example.py",
                      "--sft_model_path", "../models/qwen2-chat", "--reward_model_path", reward_path,
                      "--output_dir", "out/ppo", "--per_device_train_batch_size", "2", "--response_length", "16",
                      "--stop_token", "eos", "--report_to", "none", cwd=LAUNCH, env=env)
    assert proc.stdout, proc.stderr
    return result_of(json.loads(proc.stdout), "smoke-step")


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_ppo_example_with_a_causal_lm_reward_path_takes_its_step():
    env = _ppo_env()
    step = _ppo_example("../models/qwen2-chat", env)
    assert step["status"] == "pass", step
    assert step["details"]["trainer"] == "PPOTrainer" and step["details"]["optimizer steps"] == 1
    # the real checkpoint's config says num_labels 2 (transformers' default) over no score head: not a mismatch
    assert "size mismatch" not in json.dumps(step)
    # a reward checkpoint whose score head really has 2 rows still cannot load as num_labels=1
    step = _ppo_example("../models/rm-qwen2-2labels", env)
    assert step["status"] == "fail" and "the models stage failed" in step["message"], step
    assert "ignore_mismatched_sizes" in step["message"]


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_termination_probe_is_skipped_on_a_model_without_output_embeddings(tmp_path):
    """PPO generates and scores through the model's forward, so the step runs; the probe says why it could not."""
    env = _ppo_env()
    config = tmp_path / "ppo_remote_nohead.yaml"
    config.write_text((FIXTURES / "smoke-step" / "ok_ppo_qwen2.yaml").read_text().replace("../", f"{FIXTURES}/")
                      .replace("models/qwen2-chat", "models/remote-nohead"))
    proc = run_doctor("check", str(config), "--trust-remote-code", "--select", "smoke-step,eos-termination",
                      "--format", "json", env={**env, "HF_MODULES_CACHE": str(tmp_path / "m")})
    report = json.loads(proc.stdout)
    step = result_of(report, "smoke-step")
    # the fixture's remote code calls LlamaModel.forward with past_key_values, which transformers 5.2x deprecates (a
    # warn naming transformers' words, heard in the step: issue 46); nothing else may turn the step from a pass
    heard = step["details"].get("library warnings", [])
    assert step["status"] == ("warn" if heard else "pass"), step
    assert all("past_key_values" in w for w in heard), heard
    assert step["details"]["model class"] == "TinyRemoteForCausalLM"
    assert step["details"]["termination probe"] == (
        "skipped: TinyRemoteForCausalLM.get_output_embeddings() returns None: the termination probe cannot watch "
        "the logits")
    assert result_of(report, "eos-termination")["status"] == "pass"


def _fused_lm_head() -> bool:
    from trl import GRPOTrainer

    return "fused_lm_head=True" in inspect.getsource(GRPOTrainer)


def test_grpo_step_on_a_model_without_output_embeddings_is_judged_by_the_trainer_alone(tmp_path):
    """Whatever the installed GRPO does with the model, the outcome is the trainer's, not the probe's hook."""
    config = FIXTURES / "logits-contract" / "bad_remote_no_output_embeddings.yaml"
    code, report = run_json("check", str(config), "--trust-remote-code", "--select", "smoke-step,eos-termination",
                            env={"HF_MODULES_CACHE": str(tmp_path / "m")})
    step, eos = result_of(report, "smoke-step"), result_of(report, "eos-termination")
    assert "register_forward_hook" not in json.dumps(step), step
    assert eos["status"] in ("pass", "warn"), eos
    if _fused_lm_head():  # the trainer itself projects through get_output_embeddings(): the step really stops
        assert step["status"] == "fail" and "'NoneType' object has no attribute 'weight'" in step["message"], step
    else:
        assert step["status"] == "pass", step
        assert "TinyRemoteForCausalLM.get_output_embeddings() returns None" in step["details"]["termination probe"]
        assert "TinyRemoteForCausalLM.get_output_embeddings() returns None" in eos["details"]["termination probe"]
