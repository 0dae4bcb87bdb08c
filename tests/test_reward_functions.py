"""TD014 end to end: reward functions imported, bound and called as the installed TRL calls them, through the
real command on the tiny fixtures; reward weights and reward models checked from their files. The verdicts that
depend on the TRL release are asserted against what the installed trainer's source says, and the keywords the
static probe passes are checked against what the real trainer passes in the smoke step."""

from __future__ import annotations

import json
import shutil
import textwrap
from importlib.metadata import version

import pytest
from packaging.version import Version

from conftest import check_here, result_of, run_json
from trl_doctor.facts.rewards import reward_call

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

TRL = Version(version("trl"))
GRPO_CALL = reward_call("grpo")


def check(config, rule="reward-functions", *extra):
    code, report = check_here(str(config), "--select", rule, "--no-smoke", *extra)
    return code, result_of(report, rule)


def folder(built_fixtures):
    return built_fixtures / "reward-functions"


def test_reward_model_and_functions_pass_with_one_weight_each(built_fixtures):
    code, r = check(folder(built_fixtures) / "ok_grpo_chat_answers.yaml")
    assert code == 0 and r["status"] == "pass", r
    assert r["message"].startswith(f"3 reward source(s) as trl {version('trl')}'s GRPOTrainer calls them: reward model "
                                   "../models/rm-qwen2 (1-label Qwen2ForSequenceClassification); rewards.answer_reward (4 "
                                   "scores in [0, 0]); rewards.format_reward (4 scores in [0, 0.5])")
    d = r["details"]
    assert d["reward sources (in order)"] == ["reward model ../models/rm-qwen2", "rewards.answer_reward", "rewards.format_reward"]
    assert d["reward rewards.format_reward"] == [0.0, 0.5, 0.0, 0.5]  # one score per synthetic completion
    passed = d["arguments passed"].split(", ")
    assert "answer=" in passed and "prompts=" in passed and "completions=" in passed
    assert ("completion_ids=" in passed) == ("completion_ids" in GRPO_CALL.keywords)
    assert d["TRL calls"].startswith("trl/trainer/grpo_trainer.py:")
    assert "conversational: one assistant message each" in d["probe"]
    assert d["reward model"]["num_labels"] == 1


def test_missing_kwargs_is_named_with_what_trl_passes(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_no_kwargs.yaml")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith(f"reward function rewards.no_kwargs_reward cannot be called the way trl {version('trl')} "
                                   "calls it: it is `no_kwargs_reward(prompts, completions)`, TRL calls it with (answer=, ")
    assert "got an unexpected keyword argument" in r["message"] and "`**kwargs`" in r["message"]


@pytest.mark.slow
def test_static_probe_passes_what_the_real_trainer_passes(built_fixtures):
    """The smoke step records the keywords the installed trainer really passes; the static probe must bind the same."""
    config = built_fixtures / "smoke-step" / "bad_reward_no_kwargs.yaml"
    code, report = run_json("check", str(config), "--select", "smoke-step,reward-functions")
    static, smoke = result_of(report, "reward-functions"), result_of(report, "smoke-step")
    assert static["status"] == "fail" and smoke["status"] == "fail"
    real = smoke["message"].split("TRL calls it with (")[1].split(")")[0]
    assert static["message"].split("TRL calls it with (")[1].split(")")[0] == real
    # the same shared check names the same cause in both
    assert static["message"].split(" and Python says")[0] == smoke["message"].split(" and Python says")[0]


def test_one_score_per_batch_says_what_the_installed_trl_does(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_one_score_per_batch.yaml")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward function rewards.batch_reward returned 1 scores for 4 completions")
    if GRPO_CALL.checks_length:
        assert "returned 1 rewards, but 4 were expected" in r["message"]
    else:
        assert "a single score is broadcast to every completion" in r["message"]


def test_weights_must_match_the_sources(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_weights_count.yaml")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward_weights has 1 weight(s) [1.0] for 2 reward source(s) (rewards.answer_reward, "
                                   "rewards.format_reward,")
    assert "'Number of reward weights (1) must match number of reward functions (2)'" in r["message"]


def test_reward_model_with_two_labels(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_reward_model_two_labels.yaml")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward model ../models/rm-qwen2-2labels is a Qwen2ForSequenceClassification with 2 labels")
    assert "score.weight size mismatch ([2, hidden] in the checkpoint)" in r["message"]


def test_reward_model_tokenizer_without_pad_or_eos(fixture_copy):
    model = fixture_copy / "models" / "rm-nopad"
    shutil.copytree(fixture_copy / "models" / "rm-qwen2", model)
    tok_config = json.loads((model / "tokenizer_config.json").read_text())
    tok_config.pop("pad_token", None)
    tok_config.pop("eos_token", None)
    (model / "tokenizer_config.json").write_text(json.dumps(tok_config))
    (model / "special_tokens_map.json").unlink(missing_ok=True)
    config = fixture_copy / "reward-functions" / "rm_nopad.yaml"
    config.write_text("model_name_or_path: ../models/qwen2-chat\ndataset_path: ../data/chat.jsonl\n"
                      "reward_model_name_or_path: ../models/rm-nopad\n")
    code, r = check(config)
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("reward model ../models/rm-nopad: its tokenizer has no pad token")
    assert "Cannot handle batch sizes > 1 if no padding token is defined" in r["message"]
    # with an eos token TRL falls back to it: no failure
    tok_config["eos_token"] = "<|im_end|>"
    (model / "tokenizer_config.json").write_text(json.dumps(tok_config))
    code, r = check(config)
    assert r["status"] == "pass", r
    assert "uses the eos token '<|im_end|>'" in r["details"]["reward model"]["pad"]


def test_nan_depends_on_how_the_installed_trl_sums(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_nan_reward.yaml")
    assert "rewards.ratio_reward returned NaN for 4 of 4 completions" in r["message"]
    if GRPO_CALL.nan_ignored:
        assert r["status"] == "warn" and code == 0 and "nansum" in r["message"]
    else:
        assert r["status"] == "fail" and "loss become NaN" in r["message"]


def test_none_depends_on_the_installed_trl(built_fixtures):
    code, r = check(folder(built_fixtures) / "bad_all_none.yaml")
    if GRPO_CALL.none_allowed:
        assert r["status"] == "warn"
        assert r["message"].startswith("4 of the 4 probe completions get no score from any reward source")
    else:
        assert r["status"] == "fail"
        assert "must be real number, not NoneType" in r["message"]
    code, r = check(folder(built_fixtures) / "ok_partial_none.yaml")
    assert r["status"] == ("pass" if GRPO_CALL.none_allowed else "fail"), r


def test_async_reward_function(built_fixtures):
    code, r = check(folder(built_fixtures) / "ok_async_judge.yaml")
    if GRPO_CALL.awaits_async:
        assert r["status"] == "pass" and "rewards.judge_reward (4 scores in [1, 1])" in r["message"]
    else:
        assert r["status"] == "fail" and "is `async def`" in r["message"] and "without awaiting" in r["message"]


def test_rloo_with_reward_functions(built_fixtures):
    code, r = check(folder(built_fixtures) / "ok_rloo_text.yaml")
    if reward_call("rloo").takes_reward_funcs:
        assert r["status"] == "pass" and "RLOOTrainer calls them: rewards.length_reward" in r["message"]
        assert "plain text" in r["details"]["probe"]
    else:
        assert r["status"] == "fail" and "pin trl>=0.22" in r["message"]


def test_printing_reward_keeps_the_report_clean_and_a_slow_one_is_named(built_fixtures, tmp_path):
    (tmp_path / "noisy.py").write_text(textwrap.dedent("""
        import time

        def chatty(completions, **kwargs):
            print("scoring", len(completions), "completions")
            return [1.0 for _ in completions]

        def slow(completions, **kwargs):
            time.sleep(3)
            return [1.0 for _ in completions]
    """))
    data = built_fixtures / "data" / "prompts.jsonl"
    config = tmp_path / "noisy.yaml"
    config.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\ndataset_path: {data}\n"
                      "reward_funcs: [noisy.chatty]\n")
    code, r = check(config)  # run_json parses stdout: a print inside the probe would break it
    assert r["status"] == "pass"
    assert r["details"]["printed by noisy.chatty"] == "scoring 4 completions"
    config.write_text(config.read_text().replace("noisy.chatty", "noisy.slow"))
    code, r = check(config, "reward-functions", "--user-code-timeout", "1")  # the worker's fence stops it
    assert code == 1 and r["status"] == "fail"
    assert r["message"] == "noisy.py (calling noisy.slow) did not finish within 1 s (--user-code-timeout): stopped"


def test_each_config_gets_its_own_rewards_module(built_fixtures, tmp_path):
    """Two configs in one process, each with a `rewards.py`: the second must not see the first's module."""
    check(folder(built_fixtures) / "ok_grpo_chat_answers.yaml")  # imports reward-functions/rewards.py
    (tmp_path / "rewards.py").write_text("def only_here(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    config = tmp_path / "mine.yaml"
    config.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n"
                      f"dataset_path: {built_fixtures / 'data' / 'prompts.jsonl'}\nreward_funcs: [rewards.only_here]\n")
    code, r = check(config)
    assert r["status"] == "pass", r["message"]


def test_call_contract_of_trl_0152():
    """The source reading on a known release's trainer text (trl 0.15.2, as its wheel ships it, when present)."""
    from pathlib import Path

    from trl_doctor.facts.rewards import parse_reward_call

    legacy = Path.home() / ".cache" / "trl-doctor-ci" / "venv-legacy-trl0152" / "lib"
    found = sorted(legacy.glob("python3*/site-packages/trl/trainer/grpo_trainer.py"))
    if not found:
        pytest.skip("no trl 0.15.2 installation to read")
    call = parse_reward_call("trl/trainer/grpo_trainer.py", found[0].read_text())
    assert call.keywords == ("prompts", "completions") and call.extras == ()
    assert call.excluded_columns == ("prompt", "completion")
    assert not call.none_allowed and not call.nan_ignored and not call.awaits_async and not call.checks_length
    assert call.eos_pad_for_reward_models


def test_call_contract_reads_what_is_passed_only_to_a_job_with_environments():
    """trl 1.16 sets `reward_kwargs["environments"] = self.environments` inside `if self.environments is not None:`:
    passed with an environment_factory only (TRL's grpo_2048.py's reward takes it); other conditional entries stay
    out of the contract."""
    from trl_doctor.facts.rewards import parse_reward_call

    text = """
        reward_kwargs["trainer_state"] = self.state
        if self.environments is not None:
            reward_kwargs["environments"] = self.environments
        if self.other:
            reward_kwargs["sometimes"] = 1
        out = reward_func(prompts=prompts, completions=completions, **reward_kwargs)
"""
    call = parse_reward_call("trl/trainer/grpo_trainer.py", text)
    assert call.extras == ("trainer_state",) and call.environment_extras == ("environments",)
    assert call.call_names() == ("prompts", "completions", "trainer_state")
    assert call.call_names(environments=True)[-1] == "environments"
    if GRPO_CALL is not None and GRPO_CALL.extras:  # the installed TRL, where it has environment_factory
        import inspect

        from trl import GRPOTrainer

        takes = "environment_factory" in inspect.signature(GRPOTrainer.__init__).parameters
        assert ("environments" in GRPO_CALL.environment_extras) == takes, GRPO_CALL


def test_builtin_reward_names(built_fixtures, tmp_path):
    """`reward_funcs` names from trl.rewards, as `trl grpo` resolves them; a required argument the dataset lacks
    is named as a missing column."""
    import importlib.util

    data = built_fixtures / "data" / "chat_answers.jsonl"
    model = built_fixtures / "models" / "qwen2-chat"
    config = tmp_path / "builtin.yaml"
    config.write_text(f"model_name_or_path: {model}\ndataset_path: {data}\nreward_funcs: [accuracy_reward]\n")
    code, r = check(config)
    assert code == 1 and r["status"] == "fail"
    if importlib.util.find_spec("trl.rewards") is None:
        assert "is neither a dotted path nor one of trl.rewards" in r["message"]
        return
    assert r["message"].startswith("reward function accuracy_reward cannot be called the way trl")
    assert "missing a required argument: 'solution'" in r["message"]
    assert r["message"].endswith("`solution` needs a dataset column of that name (or a default value)")
    config.write_text(config.read_text().replace("accuracy_reward", "think_format_reward"))
    code, r = check(config)
    assert r["status"] == "pass" and "think_format_reward (4 scores in [0, 1])" in r["message"], r


def test_reward_reading_the_trainer_state(built_fixtures, tmp_path):
    """trl >= 0.21 passes `trainer_state`: a curriculum reward reading it must work at step 0."""
    (tmp_path / "curriculum.py").write_text(
        "def staged(completions, trainer_state=None, **kwargs):\n"
        "    progress = trainer_state.global_step / max(trainer_state.max_steps, 1) if trainer_state else 0.0\n"
        "    return [progress + trainer_state.epoch if trainer_state else 0.0 for _ in completions]\n")
    config = tmp_path / "curriculum.yaml"
    config.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\n"
                      f"dataset_path: {built_fixtures / 'data' / 'prompts.jsonl'}\nreward_funcs: [curriculum.staged]\n"
                      "max_steps: 100\n")
    code, r = check(config)
    assert r["status"] == "pass", r["message"]
    assert r["details"]["reward curriculum.staged"] == [0.0, 0.0, 0.0, 0.0]
    assert ("trainer_state=" in r["details"]["arguments passed"]) == ("trainer_state" in GRPO_CALL.extras)
