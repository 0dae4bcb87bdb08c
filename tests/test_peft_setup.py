"""TD016 end to end through the real command on the tiny fixtures: an adapter folder given as the model, new
tokens under LoRA (and the fix, applied twice), reentrant gradient checkpointing where the installed stack leaves
input gradients off (and the fix, then a real training step), and LoRA keys without use_peft. The rule's claims
about what TRL does are checked against the installed TRL and PEFT themselves."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from conftest import check_here, result_of, run_json

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

TRL = Version(version("trl"))


def check(config, *extra):
    code, report = check_here(config, "--select", "peft-setup", "--no-smoke", *extra)
    return code, result_of(report, "peft-setup"), report


def loads_through_create_model_from_path() -> bool:
    from trl_doctor.facts.trl.installed import trainer_source

    return "create_model_from_path(" in trainer_source("grpo")[1]


def test_lora_on_a_base_model_passes_and_names_who_enables_input_gradients(built_fixtures):
    code, r, _ = check(built_fixtures / "peft-setup" / "ok_lora_base.yaml")
    assert code == 0 and r["status"] == "pass", r
    assert r["message"].startswith("LoRA on the base model ../models/qwen2-chat: q_proj, v_proj match modules of "
                                   "Qwen2ForCausalLM; no new tokens (the tokenizer's 320 tokens "
                                   "fit the 320 embedding rows); gradient checkpointing ")
    assert r["details"]["lora keys"] == {"lora_r": 8, "lora_alpha": 16, "lora_target_modules": ["q_proj", "v_proj"]}
    from trl import GRPOConfig

    if GRPOConfig.__dataclass_fields__["gradient_checkpointing"].default:  # on by default from the 1.x BaseConfig
        assert r["details"]["input gradients (TRL)"].startswith("trl/trainer/grpo_trainer.py")
        assert "enables input gradients" in r["message"]
    else:
        assert r["message"].endswith("; gradient checkpointing off")


@pytest.mark.parametrize("case", ["bad_adapter_with_use_peft.yaml", "bad_adapter_as_model.yaml"])
def test_adapter_folder_as_the_model(built_fixtures, case):
    code, r, _ = check(built_fixtures / "peft-setup" / case)
    assert code == 1 and r["status"] == "fail"
    base = built_fixtures / "models" / "qwen2-chat"
    assert r["message"].startswith(f"model_name_or_path ../models/qwen2-chat-lora is a PEFT adapter (LORA r=4 on q_proj, "
                                   f"v_proj over {base}), not a model: ")
    assert "AutoPeftModelForCausalLM.from_pretrained('../models/qwen2-chat-lora').merge_and_unload()" in r["message"]
    if loads_through_create_model_from_path():
        assert "'Unrecognized model in ... Should have a `model_type` key in its config.json'" in r["message"]
        assert "reads AutoConfig.from_pretrained(model_id) first" in r["details"]["model loading"]
    elif case == "bad_adapter_with_use_peft.yaml":
        assert "builds a fresh 'default' adapter in place of the loaded one" in r["message"]
    else:
        assert "with this adapter attached and frozen" in r["message"]


def test_adapter_claims_hold_for_the_installed_stack(built_fixtures):
    """What the message says happens to an adapter folder, done with the installed TRL, transformers and PEFT."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    adapter = str(built_fixtures / "models" / "qwen2-chat-lora")
    if loads_through_create_model_from_path():
        from trl.trainer.utils import create_model_from_path

        with pytest.raises(ValueError, match="Unrecognized model"):
            create_model_from_path(adapter)
        return
    model = AutoModelForCausalLM.from_pretrained(adapter)  # transformers attaches the adapter to its base
    loaded = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert loaded and all(p.abs().sum() > 0 for p in loaded) and not any(p.requires_grad for p in model.parameters())
    wrapped = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    assert all(torch.count_nonzero(p) == 0 for n, p in wrapped.named_parameters() if "lora_B" in n)


def test_new_tokens_under_lora_are_fixed_once(fixture_copy):
    config = fixture_copy / "peft-setup" / "bad_added_tokens_frozen.yaml"
    code, r, _ = check(config)
    assert code == 0 and r["status"] == "warn"
    assert r["message"].startswith("'<search>' (id 320), '</search>' (id 321) new to the tokenizer's vocabulary, but LoRA "
                                   "freezes the input embedding `embed_tokens` and the LM head `lm_head`: neither is in "
                                   "lora_modules_to_save")
    assert "24,576 parameters" in r["message"]  # 384 rows x 32, twice (tied: PEFT copies both)
    assert r["fix"]["files"] == [str(config)]

    code, r, report = check(config, "--fix")
    assert code == 0 and r["status"] == "pass", r
    assert yaml.safe_load(config.read_text())["lora_modules_to_save"] == ["embed_tokens", "lm_head"]
    assert "# Tool tokens added by the training script" in config.read_text()  # comments kept
    before = config.read_bytes()
    code, r, report = check(config, "--fix")
    assert report["applied"] == [] and config.read_bytes() == before


def test_gpt2_names_and_kept_entries(fixture_copy):
    """The module names come from the architecture (GPT-2: wte), and entries the config lists are kept."""
    config = fixture_copy / "peft-setup" / "gpt2.yaml"
    config.write_text("model_name_or_path: ../models/gpt2-nopad\nadded_tokens: ['<tool>']\ndataset_path: ../data/prompts.jsonl\n"
                      "use_peft: true\nlora_target_modules: [c_attn, c_proj]\nlora_modules_to_save: [lm_head]\n")
    code, r, _ = check(config)
    assert r["status"] == "warn"
    assert "'<tool>' (id 320) new to the tokenizer's vocabulary; the tokenizer has 321 tokens for 320 embedding rows" in r["message"]
    assert "`wte` is not in lora_modules_to_save ['lm_head']" in r["message"]
    check(config, "--fix")
    assert yaml.safe_load(config.read_text())["lora_modules_to_save"] == ["lm_head", "wte"]


@pytest.mark.slow
def test_reentrant_checkpointing(fixture_copy):
    config = fixture_copy / "peft-setup" / "bad_gc_reentrant.yaml"
    code, r, _ = check(config)
    if TRL >= Version("0.16"):
        assert r["status"] == "pass", r
        assert "enables input gradients" in r["details"]["gradient checkpointing"]
        # and the real trainer agrees: LoRA + reentrant checkpointing takes a step
        config.write_text(config.read_text() + "gradient_checkpointing_kwargs: {use_reentrant: true}\n")
        code, report = run_json("check", str(config), "--select", "smoke-step,peft-setup")
        assert result_of(report, "smoke-step")["status"] == "pass"
        assert result_of(report, "peft-setup")["status"] == "pass"
        return
    assert code == 1 and r["status"] == "fail"
    assert "never calls enable_input_require_grads()" in r["message"]
    assert "'element 0 of tensors does not require grad and does not have a grad_fn'" in r["message"]
    # the real trainer fails exactly so, and trains once the fix is written
    code, report = run_json("check", str(config), "--select", "smoke-step")
    assert "element 0 of tensors does not require grad" in result_of(report, "smoke-step")["message"]
    code, r, _ = check(config, "--fix")
    assert r["status"] == "pass"
    assert yaml.safe_load(config.read_text())["gradient_checkpointing_kwargs"] == {"use_reentrant": False}
    code, report = run_json("check", str(config), "--select", "smoke-step")
    assert result_of(report, "smoke-step")["status"] == "pass"
    before = config.read_bytes()
    code, r, report = check(config, "--fix")
    assert report["applied"] == [] and config.read_bytes() == before


def test_reentrant_checkpointing_with_deepspeed_gets_no_fix(fixture_copy):
    if TRL >= Version("0.16"):
        pytest.skip(f"trl {TRL} enables input gradients itself")
    config = fixture_copy / "peft-setup" / "bad_gc_reentrant.yaml"
    config.write_text(config.read_text() + "deepspeed: zero3.json\n")
    code, r, _ = check(config)
    assert r["status"] == "fail" and r["fix"] is None
    assert "upgrade to trl>=0.16" in r["message"]


def test_no_peft_is_a_skip(built_fixtures):
    code, r, _ = check(built_fixtures / "smoke-step" / "ok_grpo_qwen2.yaml")
    assert r["status"] == "skip" and "use_peft" in r["message"]


def test_rloo_without_peft_support_says_lora_is_ignored(built_fixtures, tmp_path):
    from trl_doctor.facts.rewards import reward_call

    config = tmp_path / "rloo.yaml"
    config.write_text(f"trainer: rloo\nmodel_name_or_path: {built_fixtures / 'models' / 'gpt2-nopad'}\n"
                      f"dataset_path: {built_fixtures / 'data' / 'prompts.jsonl'}\nreward_model_path: "
                      f"{built_fixtures / 'models' / 'rm-gpt2-vocab300'}\nuse_peft: true\nlora_r: 8\n")
    code, r, _ = check(config)
    if reward_call("rloo").takes_reward_funcs:  # the GRPO-style RLOOTrainer (trl >= 0.22) takes a peft_config
        assert r["status"] == "pass", r
    else:
        assert r["status"] == "warn" and "takes no peft_config (the PPO-style RLOOTrainer of trl < 0.22)" in r["message"]


# -- target_modules as TRL hands them to PEFT (issue 21, class 6) -----------------------------------------------------

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"
RECIPE = ["python", "grpo_lora_recipe.py", "--model_name_or_path", "../models/qwen2-chat", "--dataset_name",
          "../data/chat.jsonl", "--output_dir", "out/lora", "--num_generations", "2", "--per_device_train_batch_size",
          "2", "--max_completion_length", "32", "--report_to", "none", "--use_peft", "--lora_target_modules"]
LINEAR = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"


def _adapted(target_modules) -> list[str]:
    """The modules the installed TRL + PEFT adapt on the tiny Qwen2 for this ModelConfig value (raises as PEFT does)."""
    import warnings

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig, get_peft_config

    from conftest import FIXTURES

    model = AutoModelForCausalLM.from_pretrained(FIXTURES / "models" / "qwen2-chat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft = get_peft_model(model, get_peft_config(ModelConfig(use_peft=True, lora_target_modules=target_modules)))
    return sorted({n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in peft.named_parameters() if ".lora_A" in n})


def test_the_target_module_claims_hold_for_the_installed_stack(built_fixtures):
    assert _adapted(["q_proj,", "v_proj"]) == ["v_proj"]  # the comma-suffixed name is dropped without a word
    with pytest.raises(ValueError, match="not found in the base model"):
        _adapted(["q_proj,"])
    with pytest.raises(ValueError, match="not found in the base model"):  # one item: TRL makes it a regex string
        _adapted(["q_proj"])
    assert _adapted("all-linear") == sorted(LINEAR.split(", "))
    assert _adapted(["q_proj", "v_proj"]) == ["q_proj", "v_proj"]


def test_trailing_comma_in_a_config_file_fails_and_is_fixed(fixture_copy):
    config = fixture_copy / "peft-setup" / "bad_lora_target_trailing_comma.yaml"
    code, r, _ = check(config)
    assert code == 1 and r["status"] == "fail", r
    assert r["message"] == (
        "lora_target_modules ['q_proj,', 'v_proj'] (from bad_lora_target_trailing_comma.yaml): `q_proj,` matches no "
        f"module of Qwen2ForCausalLM, so PEFT {version('peft')} adapts only v_proj and says nothing about it; its "
        f"Linear layers are named {LINEAR}; `q_proj,` has a trailing comma: on a command line write "
        "`--lora_target_modules q_proj v_proj` (spaces, no commas), in a config file `lora_target_modules: [q_proj, "
        "v_proj]`")
    code, r, _ = check(config, "--fix")
    assert code == 0 and r["status"] == "pass", r
    assert yaml.safe_load(config.read_text())["lora_target_modules"] == ["q_proj", "v_proj"]


@pytest.mark.parametrize("targets, status", [("[q_proj]", "fail"), ("q_proj, v_proj", "fail"), ("'.*\\.q_proj'", "pass"),
                                             ("[q_proj, v_proj]", "pass"), ("all-linear", "pass"),
                                             ("'(.*)*z'", "warn")])
def test_target_modules_as_trl_hands_them_to_peft(built_fixtures, tmp_path, targets, status):
    base = (built_fixtures / "peft-setup" / "ok_lora_base.yaml").read_text()
    config = tmp_path / "lora.yaml"
    config.write_text(base.replace("lora_target_modules: [q_proj, v_proj]", f"lora_target_modules: {targets}")
                      .replace("../", f"{built_fixtures}/"))
    (tmp_path / "rewards.py").write_text((built_fixtures / "peft-setup" / "rewards.py").read_text())
    code, r, _ = check(config)
    assert r["status"] == status, r
    if targets == "[q_proj]":
        assert r["message"].startswith("lora_target_modules 'q_proj' (TRL's ModelConfig turns the one-item list "
                                       "['q_proj'] from lora.yaml into this string) matches no module: PEFT reads a "
                                       "string as one regular expression"), r["message"]
        assert "(model.layers.0.self_attn.q_proj)" in r["message"] and "'.*\\.q_proj'" in r["message"]
    if targets == "q_proj, v_proj":
        assert "--lora_target_modules q_proj v_proj" in r["message"], r["message"]
    if targets == "'(.*)*z'":  # backtracking that never ends on long module names: named, never run
        assert "nests quantifiers" in r["message"] and "q_proj" in r["message"], r["message"]


@pytest.mark.parametrize("argv, status", [(['"q_proj",', '"v_proj"'], "fail"), (["q_proj", "v_proj"], "pass"),
                                          (["all-linear"], "pass")])
def test_target_modules_from_a_launch_command_line(built_fixtures, argv, status):
    """The script's own TrlParser reads the command line (nargs='+'): `"q_proj", "v_proj"` arrives as the shell
    leaves it, ['q_proj,', 'v_proj']."""
    import json
    import shlex

    from conftest import run_doctor

    command = [*RECIPE, *shlex.split(" ".join(argv))]
    proc = run_doctor("check", "--no-smoke", "--select", "peft-setup", "--format", "json", "--", *command, cwd=LAUNCH)
    r = result_of(json.loads(proc.stdout), "peft-setup")
    assert r["status"] == status, r
    if status == "fail":
        assert r["message"].startswith("lora_target_modules ['q_proj,', 'v_proj'] (the script's LoraConfig): `q_proj,` "
                                       "matches no module of Qwen2ForCausalLM"), r["message"]
        assert "has a trailing comma: on a command line write `--lora_target_modules q_proj v_proj`" in r["message"]
        assert r.get("fix") is None  # the command line is the user's to edit


def test_a_peft_config_of_another_kind_keeps_its_kind():
    """Issue 58, class 5: a script's PromptTuningConfig or DoRA was flattened into LoRA keys (lora_r...), so the step
    trained a LoRA and peft-setup judged one. Its kind is kept beside the keys; a LoRA's are as before."""
    from peft import LoraConfig, PromptTuningConfig

    from trl_doctor.capture.to_config import _peft_keys

    keys = _peft_keys(PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=8), None)
    assert keys == {"use_peft": True, "peft_type": "PROMPT_TUNING", "lora_task_type": "CAUSAL_LM"}
    dora = _peft_keys(LoraConfig(r=4, target_modules=["q_proj"], use_dora=True), None)
    assert dora["peft_type"] == "LORA" and dora["use_dora"] is True and dora["lora_r"] == 4
