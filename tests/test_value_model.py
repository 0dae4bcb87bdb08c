"""TD005 end to end: PPO's value and reward models, through the real command.

The installed TRL (1.16) has no PPOTrainer, so there every PPO config fails this rule on the TRL version
as well; the model checks still run and are reported. The path where TRL has a PPOTrainer runs against the
real trl 1.12.0 (the last release with one, trl/experimental/ppo/ppo_trainer.py) and trl 0.12.2
(trl/trainer/ppo_trainer.py) from PyPI, installed without dependencies into a cache and put first on
PYTHONPATH.
"""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from packaging.version import Version

from conftest import check_here, real_trl, result_of, run_doctor, run_json, trl_has

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

INSTALLED_TRL = version("trl")
HAS_PPO = trl_has("ppo")  # read from TRL's files: the markers below are decided at collection
ERR_PREFIX = "AttributeError: 'NoneType' object has no attribute 'base_model_prefix'"
ERR_MODULES = "AttributeError: 'NoneType' object has no attribute 'modules'"


def no_ppo_message(reward: str) -> str:
    return (
        f"trl {INSTALLED_TRL} has no PPOTrainer: it was removed in trl 1.13.0 (the last release with it is trl 1.12.0, "
        "as trl.experimental.ppo.PPOTrainer). Pin `trl==1.12.0` (it needs transformers>=4.56.2) to train this PPO "
        f"config, or move to RLOO or GRPO (`trainer: rloo` with reward_model_name_or_path: {reward}), which need no "
        "value model"
    )


# -- real TRL releases that have a PPOTrainer ---------------------------------------------------------------

def evidence(env: dict, rel: str, needle: str) -> str:
    """`file:line: code` of the real release's trainer line that contains needle."""
    from pathlib import Path

    lines = (Path(env["PYTHONPATH"]) / rel).read_text().splitlines()
    line = next(i for i, code in enumerate(lines, 1) if needle in code)
    return f"{rel}:{line}: `{lines[line - 1].strip()}`"


# -- the installed TRL -----------------------------------------------------------------------------------

def test_healthy_config_status_for_the_installed_trl(built_fixtures):
    """The exact verdict on the healthy case with the TRL installed here: fail on the version from 1.13 on."""
    config = built_fixtures / "value-model" / "ok_reward_as_value.yaml"
    code, report = check_here(str(config), "--select", "value-model")
    result = result_of(report, "TD005")
    details = result["details"]
    assert details["trl"] == INSTALLED_TRL
    # the model checks ran and are reported whatever the TRL
    for role in ("reward model", "value model"):
        model = details[role]
        assert model["architectures"] == ["Qwen2ForSequenceClassification"]
        assert model["num_labels"] == 1 and model["score head"] == "Linear(32 → 1)" and model["vocab_size"] == 320
        assert model["tokenizer"] == "same ids as the policy's for all 320 tokens"
        assert model["path"] == str(built_fixtures / "models" / "rm-qwen2")
    if Version(INSTALLED_TRL) >= Version("1.13"):
        assert not HAS_PPO
        assert result["status"] == "fail" and code == 1
        assert result["message"] == no_ppo_message("../models/rm-qwen2")
        assert details["PPOTrainer"] is None
        assert details["pin"] == "trl==1.12.0"
        assert "also" not in details  # nothing else is wrong with this config
    else:
        assert HAS_PPO
        assert result["status"] == "pass" and code == 0


def test_missing_value_model_is_fixed_from_the_reward_model(fixture_copy):
    config = fixture_copy / "value-model" / "bad_no_value_model.yaml"
    original = config.read_text()
    code, report = check_here(str(config), "--select", "value-model")
    result = result_of(report, "TD005")
    assert code == 1 and result["status"] == "fail"
    assert result["message"].startswith(
        "no value model: bad_no_value_model.yaml sets no `value_model_path`, and PPOTrainer dies at start-up without one ("
    )
    assert ERR_PREFIX in result["message"] and "the reward model ../models/rm-qwen2 can be its start" in result["message"]
    assert result["details"]["value_model_path"] is None
    assert result["details"]["reward model"]["num_labels"] == 1
    if not HAS_PPO:
        assert result["details"]["also"] == [f"fail: {no_ppo_message('../models/rm-qwen2')}"]
    assert result["fix"]["files"] == [str(config)] and result["fix"]["applied"] is False
    assert "set value_model_path: ../models/rm-qwen2 in bad_no_value_model.yaml" in result["fix"]["description"]

    diff = run_doctor("check", str(config), "--select", "value-model", "--diff")
    assert "+value_model_path: ../models/rm-qwen2\n" in diff.stdout
    assert config.read_text() == original  # --diff changes nothing

    code, report = run_json("check", str(config), "--select", "value-model", "--fix")
    result = result_of(report, "TD005")
    assert config.read_text() == original + "value_model_path: ../models/rm-qwen2\n"  # comments and key order kept
    assert (config.parent / "bad_no_value_model.yaml.trl-doctor.bak").read_text() == original
    assert report["applied"] == [{"file": str(config), "backup": str(config) + ".trl-doctor.bak"}]
    assert result["fix"]["applied"] is True
    assert result["details"]["value_model_path"] == "../models/rm-qwen2"
    assert result["details"]["value model"] == result["details"]["reward model"]
    if HAS_PPO:
        assert result["status"] == "pass" and code == 0
    else:
        # the value model is there now; what is left is the TRL without a PPOTrainer, and only that
        assert result["status"] == "fail" and code == 1
        assert result["message"] == no_ppo_message("../models/rm-qwen2")
        assert "also" not in result["details"]

    # a second --fix changes nothing
    code, report = run_json("check", str(config), "--select", "value-model", "--fix")
    assert report["applied"] == []
    assert config.read_text() == original + "value_model_path: ../models/rm-qwen2\n"


@pytest.mark.parametrize("case, role, expected", [
    ("bad_reward_two_labels.yaml", "reward model",
     "reward model ../models/rm-qwen2-2labels/config.json is a Qwen2ForSequenceClassification with 2 labels (id2label "
     "{'0': 'LABEL_0', '1': 'LABEL_1'}, score head Linear(32 → 2)): PPO takes one scalar per token"),
    ("bad_reward_vocab_smaller.yaml", "reward model",
     "reward model ../models/rm-gpt2-vocab300/config.json has vocab_size 300 but the policy's tokenizer has ids up to "
     "319 ('Ġplease'): PPO feeds the policy's ids to it, and the first forward fails with 'index out of range in self'"),
    ("bad_reward_tokenizer_differs.yaml", "reward model",
     "reward model ../models/rm-qwen2-othertok has a tokenizer that numbers tokens differently from the policy's: "
     "'<|im_start|>' is id 1 for the policy and 0 there, '<|im_end|>' is id 2 for the policy and 1 there (2 of 320 "
     "differ)"),
    ("bad_no_reward_model.yaml", None,
     "no reward model: bad_no_reward_model.yaml sets no `reward_model_path`, so PPOConfig falls back to "
     "'EleutherAI/pythia-160m', a causal LM"),
])
def test_broken_models_are_named(built_fixtures, case, role, expected):
    code, report = check_here(str(built_fixtures / "value-model" / case), "--select", "value-model")
    result = result_of(report, "value-model")
    assert code == 1 and result["status"] == "fail"
    assert result["message"].startswith(expected), result["message"]
    assert result["fix"] is None  # another checkpoint is needed: nothing to rewrite
    if role is not None:
        assert result["details"][role]["config.json"].endswith("config.json")
    also = result["details"].get("also", [])
    assert (f"fail: {no_ppo_message(result['details']['reward_model_path'] or '<a reward model>')}" in also) is not HAS_PPO
    if case == "bad_reward_vocab_smaller.yaml":  # both problems of that reward model, as data
        details = result["details"]
        reward = details["reward model"]
        assert reward["vocab_size"] == 300 and reward["architectures"] == ["GPT2ForSequenceClassification"]
        assert reward["tokenizer differences"][:2] == [
            {"token": "<|im_start|>", "policy id": 1, "id here": None},
            {"token": "<|im_end|>", "policy id": 2, "id here": None},
        ]
        assert details["highest id PPO feeds the reward/value models"] == 319
        assert details["value model"]["tokenizer"] == "same ids as the policy's for all 320 tokens"
        assert any("numbers tokens differently" in a for a in also)


def test_added_tokens_past_the_reward_vocabulary(fixture_copy):
    config = fixture_copy / "value-model" / "scratch.yaml"
    config.write_text((fixture_copy / "value-model" / "ok_reward_as_value.yaml").read_text() + "added_tokens: ['<search>']\n")
    code, report = check_here(str(config), "--select", "value-model")
    result = result_of(report, "TD005")
    assert code == 1 and result["status"] == "fail"
    assert result["message"].startswith(
        "reward and value model ../models/rm-qwen2/config.json has vocab_size 320 but the policy's tokenizer has ids up to "
        "320 ('<search>')"
    )


# -- a TRL that has a PPOTrainer ------------------------------------------------------------------------

@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_with_a_ppo_trainer_the_healthy_and_the_fixed_config_pass(fixture_copy):
    env = real_trl("1.12.0")
    ok = fixture_copy / "value-model" / "ok_reward_as_value.yaml"
    code, report = run_json("check", str(ok), "--select", "value-model", env=env)
    result = result_of(report, "TD005")
    assert code == 0 and result["status"] == "pass", result
    assert result["message"] == (
        "value and reward model ../models/rm-qwen2: 1-label Qwen2ForSequenceClassification (Linear(32 → 1)) covering the "
        "policy's 320 token ids; trl.experimental.ppo.PPOTrainer in trl 1.12.0 takes them"
    )
    assert result["details"]["trl"] == "1.12.0" and result["details"]["PPOTrainer"] == "trl.experimental.ppo.PPOTrainer"

    config = fixture_copy / "value-model" / "bad_no_value_model.yaml"
    code, report = run_json("check", str(config), "--select", "value-model", env=env)
    result = result_of(report, "TD005")
    assert code == 1 and result["status"] == "fail"
    assert f"dies at start-up without one ({ERR_PREFIX} in trl 1.12.0)" in result["message"]
    where = evidence(env, "trl/experimental/ppo/ppo_trainer.py", "getattr(value_model, value_model.base_model_prefix)")
    assert result["details"]["value_model=None fails at"] == where
    assert "also" not in result["details"]

    code, report = run_json("check", str(config), "--select", "value-model", "--fix", env=env)
    result = result_of(report, "TD005")
    assert code == 0 and result["status"] == "pass" and result["fix"]["applied"] is True
    assert "value_model_path: ../models/rm-qwen2\n" in config.read_text()


def _ppo_env() -> dict:
    return {} if HAS_PPO else real_trl("1.12.0")


# these need a TRL with PPO: the installed one where it has it (the legacy lane), else trl 1.12.0 from PyPI
NEEDS_PPO = pytest.mark.trl_pair if HAS_PPO else pytest.mark.other_trl


@NEEDS_PPO
def test_causal_lm_value_model_is_trained_and_causal_lm_reward_model_warns(built_fixtures):
    """A causal-LM folder loaded as TRL's PPO example loads it (AutoModelForSequenceClassification, num_labels=1)
    gets a new score head: PPOTrainer optimises the value model's with the policy, never the reward model's."""
    env = _ppo_env()
    folder = built_fixtures / "value-model"
    code, report = run_json("check", str(folder / "ok_value_is_causal_lm.yaml"), "--select", "value-model", env=env)
    result = result_of(report, "TD005")
    assert code == 0 and result["status"] == "pass", result
    assert result["message"].startswith("value model ../models/qwen2-chat: a Qwen2ForCausalLM with a new 1-label score "
                                        "head (Linear(32 → 1)) that PPOTrainer trains; reward model ../models/rm-qwen2: "
                                        "1-label Qwen2ForSequenceClassification (Linear(32 → 1)); both cover")
    value = result["details"]["value model"]
    assert value["new score head"] == ("Qwen2ForCausalLM holds no score head: AutoModelForSequenceClassification"
                                       ".from_pretrained(path, num_labels=1) initialises Linear(32 → 1) at random")
    trained = value["value head training"]
    assert "self.model = PolicyAndValueWrapper(self.policy_model, self.value_model)" in trained
    assert "new score head" not in result["details"]["reward model"]

    code, report = run_json("check", str(folder / "bad_reward_is_causal_lm.yaml"), "--select", "value-model", env=env)
    result = result_of(report, "TD005")
    assert code == 0 and result["status"] == "warn", result
    assert result["message"].startswith(
        "reward model ../models/qwen2-chat/config.json is a Qwen2ForCausalLM without a trained score head: loaded as "
        "TRL's PPO example loads it, AutoModelForSequenceClassification.from_pretrained(path, num_labels=1), it gets a "
        "new, randomly initialised Linear(32 → 1), and PPO never trains the reward model")


@pytest.mark.slow
@NEEDS_PPO
def test_ppo_example_with_a_causal_lm_path_warns_on_the_reward_model_only(built_fixtures):
    """TRL's PPO example builds both models from one causal-LM path (as its own launch line does with pythia):
    the value model's new head is trained (a pass for it, said in the details), the reward model's is not (a warn);
    a script that passes the value model as an AutoModelForCausalLM object fails: PPO calls .score on it."""
    env = _ppo_env()
    launch = ["python", "ppo_example.py", "--sft_model_path", "../models/qwen2-chat", "--reward_model_path",
              "../models/qwen2-chat", "--output_dir", "out/ppo", "--per_device_train_batch_size", "2",
              "--response_length", "16", "--stop_token", "eos", "--report_to", "none"]
    cwd = built_fixtures / "launch"
    proc = run_doctor("check", "--no-smoke", "--select", "value-model", "--format", "json", "--", *launch, cwd=cwd, env=env)
    result = result_of(json.loads(proc.stdout), "value-model")
    assert proc.returncode == 0 and result["status"] == "warn", result
    assert result["message"].startswith("reward model ../models/qwen2-chat/config.json is a Qwen2ForCausalLM without a "
                                        "trained score head: the script's Qwen2ForSequenceClassification has a new, "
                                        "randomly initialised Linear(32 → 1)")
    value = result["details"]["value model"]
    assert value["loaded as"] == "Qwen2ForSequenceClassification (the script's own object)"
    assert "PolicyAndValueWrapper(self.policy_model, self.value_model)" in value["value head training"]
    assert "also" not in result["details"]  # the value model is no finding

    proc = run_doctor("check", "--no-smoke", "--select", "value-model", "--format", "json", "--", *launch,
                      "--value_as_causal_lm", cwd=cwd, env=env)
    result = result_of(json.loads(proc.stdout), "value-model")
    assert proc.returncode == 1 and result["status"] == "fail", result
    assert result["message"].startswith("value model ../models/qwen2-chat/config.json: the script passes it as a "
                                        "Qwen2ForCausalLM, which has no `score` head: PPO calls model.score(...) on it "
                                        "('Qwen2ForCausalLM' object has no attribute 'score'")


@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_trl_0_12_fails_on_modules_instead(built_fixtures):
    """Up to 0.12 the dropout loop runs over the value model before anything else touches it."""
    config = built_fixtures / "value-model" / "bad_no_value_model.yaml"
    env = real_trl("0.12.2")
    code, report = run_json("check", str(config), "--select", "value-model", env=env)
    result = result_of(report, "TD005")
    assert code == 1 and result["status"] == "fail"
    assert f"dies at start-up without one ({ERR_MODULES} in trl 0.12.2)" in result["message"]
    assert result["details"]["PPOTrainer"] == "trl.PPOTrainer"
    assert result["details"]["value_model=None fails at"] == evidence(env, "trl/trainer/ppo_trainer.py", "disable_dropout_in_model(module)")
    assert result["fix"]["files"] == [str(config)] and result["fix"]["applied"] is False


def test_explain_names_the_last_release_with_ppo():
    proc = run_doctor("explain", "TD005")
    assert proc.returncode == 0
    assert proc.stdout.count("1.12.0") >= 2 and "1.13.0 and later" in proc.stdout
    assert "'NoneType' object has no attribute 'modules'" in proc.stdout
    assert "'NoneType' object has no attribute 'base_model_prefix'" in proc.stdout
