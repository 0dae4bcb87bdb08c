"""trainer-config does not repeat batch-geometry: TRL's batch check (at the one process of the check) is left to
batch-geometry, which judges it at the launch's process count and offers the fix."""

from __future__ import annotations

import pytest

import json
import shutil
from importlib.metadata import version
from pathlib import Path

import yaml

from conftest import check_here, result_of, run_doctor

pytestmark = [pytest.mark.trl_pair, pytest.mark.pinned_releases]  # decided by the TRL release; recipes pin old ones

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def test_batch_error_is_batch_geometrys_not_repeated(built_fixtures, tmp_path):
    config = tmp_path / "batch.yaml"
    config.write_text(f"model_name_or_path: {FIX / 'models' / 'qwen2-chat'}\ndataset_path: {FIX / 'data' / 'chat.jsonl'}\n"
                      "reward_funcs: [rewards.length_reward]\nnum_generations: 2\nper_device_train_batch_size: 3\n")
    shutil.copy(FIX / "trainer-config" / "rewards.py", tmp_path)
    code, report = check_here(str(config), "--no-smoke", "--select", "trainer-config,batch-geometry",
                            "--num-processes", "1")
    config_result, geometry = result_of(report, "trainer-config"), result_of(report, "batch-geometry")
    assert geometry["status"] == "fail" and "num_generations" in geometry["message"]
    assert config_result["status"] == "pass"
    # where the installed TRL's config checks the batch, trainer-config says it left that to batch-geometry
    if "batch arithmetic" in config_result["details"]:
        assert config_result["details"]["batch arithmetic"].startswith("left to batch-geometry")


def test_a_launch_recipe_key_the_installed_trl_drops_is_named(built_fixtures, tmp_path):
    """`python -m trl.scripts.grpo --config recipe.yaml` with keys GRPOConfig lacks: trl before 0.19, and from 0.22,
    drops them without a word (a warning naming each, with the release a newer field arrives in); 0.19-0.21 stop."""
    from packaging.version import Version

    from trl_doctor.rules.trainer_config import load_arrivals, script_unknown_key_policy

    installed = version("trl")
    newer = next((a for a in load_arrivals() if "grpo" in a.trainers and Version(installed) < Version(a.since)), None)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text((built_fixtures / "data" / "prompts.jsonl").read_text())
    recipe = {"model_name_or_path": str(built_fixtures / "models" / "qwen2-chat"),
              "reward_model_name_or_path": str(built_fixtures / "models" / "rm-qwen2"),
              "dataset_name": "data", "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 2,
              "num_generations": 2, "max_completion_length": 8, "report_to": "none", "not_a_grpo_key": 1}
    if newer is not None:
        recipe[newer.key] = 1
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--format", "json", "--",
                      "python", "-m", "trl.scripts.grpo", "--config", "recipe.yaml", cwd=tmp_path)
    if script_unknown_key_policy("grpo")[0] == "stops":  # trl 0.19-0.21: the script stops before its trainer
        assert proc.returncode == 2 and "not_a_grpo_key" in proc.stderr, proc.stderr
        return
    result = result_of(json.loads(proc.stdout), "trainer-config")
    assert result["status"] == "warn", result
    assert "`not_a_grpo_key`" in result["message"] and f"in trl {installed}" in result["message"], result["message"]
    assert "parser ignores" in result["message"] and "without a word" in result["message"], result["message"]
    assert result["location"]["key"] in recipe and result["location"]["file"].endswith("recipe.yaml")
    if newer is not None:
        assert f"`{newer.key}` (arrives in trl {newer.since})" in result["message"], result["message"]


SCRIPT = """
from dataclasses import dataclass, field

from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments, TrlParser


@dataclass
class GRPOScriptArguments(ScriptArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["length"])


def length_reward(completions, **kwargs):
    return [-abs(20 - len(str(c))) / 20 for c in completions]


parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))
script_args, training_args, model_args = parser.parse_args_and_config()
dataset = load_dataset("json", data_files=DATA, split="train")
trainer = GRPOTrainer(model=model_args.model_name_or_path, reward_funcs=[length_reward], args=training_args,
                      train_dataset=dataset)
trainer.train()
"""


def test_a_users_script_names_every_later_releases_key_its_parser_drops(built_fixtures, tmp_path):
    """Issue 30, class 7: an open-r1-style script (its own TrlParser over its own dataclass, GRPOConfig and ModelConfig)
    run on trl <= 0.17 with a recipe written for a later release. The keys a later release brings are named from the
    generated table of every release's fields, not only the hand-kept list: `vllm_server_base_url` (GRPOConfig from
    0.18) was passed over ("accepts all N keys")."""
    from packaging.version import Version

    from trl_doctor.rules.trainer_config import script_unknown_key_policy

    installed = version("trl")
    if Version(installed) >= Version("0.18") or script_unknown_key_policy("grpo")[0] == "stops":
        pytest.skip(f"trl {installed} has vllm_server_base_url, or its parser stops on unknown keys")
    (tmp_path / "train.py").write_text(SCRIPT.replace("DATA", repr(str(built_fixtures / "data" / "prompts.jsonl"))))
    recipe = {"model_name_or_path": str(built_fixtures / "models" / "qwen2-chat"), "dataset_name": "unused",
              "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 2, "num_generations": 2,
              "max_completion_length": 8, "report_to": "none", "vllm_server_base_url": "http://10.0.0.2:8000"}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--format", "json", "--",
                      "python", "train.py", "--config", "recipe.yaml", cwd=tmp_path)
    result = result_of(json.loads(proc.stdout), "trainer-config")
    assert result["status"] == "warn", result
    assert "`vllm_server_base_url` (arrives in trl 0.18" in result["message"], result["message"]
    assert result["details"]["dropped keys"]["vllm_server_base_url"].startswith("a GRPOConfig field from trl 0.18")


@pytest.mark.parametrize("how", ["drops", "returns-the-rest", "asks-to-drop"])
def test_a_key_no_dataclass_of_the_scripts_trlparser_takes_is_named(built_fixtures, tmp_path, how):
    """Issue 30, class 7: a recipe key that no dataclass of the script's own TrlParser takes (a misspelling, an
    SFTConfig key such as `packing` in a GRPO recipe: both in Neelectric/open-r1_olmo's grpo_config_v01.07.yaml) is
    dropped without a word by trl <= 0.18's parser. The capture sees the parser's dataclasses, so the key is named;
    a script that asks for the rest (return_remaining_strings=True) gets them, and nothing is said."""
    import inspect

    from trl import TrlParser

    from trl_doctor.rules.trainer_config import unknown_key_policy

    asks = "fail_with_unknown_args" in inspect.signature(TrlParser.parse_args_and_config).parameters
    if how == "asks-to-drop" and not asks:
        pytest.skip(f"trl {version('trl')}'s TrlParser has no fail_with_unknown_args (it drops by default)")
    if how != "asks-to-drop" and unknown_key_policy()[0] == "stops":
        pytest.skip(f"trl {version('trl')}'s TrlParser stops on a key no dataclass takes (it drops none)")
    script = SCRIPT.replace("DATA", repr(str(built_fixtures / "data" / "prompts.jsonl")))
    keeps_rest = how == "returns-the-rest"
    if keeps_rest:
        script = script.replace("parser.parse_args_and_config()",
                                "parser.parse_args_and_config(return_remaining_strings=True)[:3]")
    elif how == "asks-to-drop":  # trl >= 0.19: a script may ask its parser to drop what it stops on by default
        script = script.replace("parser.parse_args_and_config()",
                                "parser.parse_args_and_config(fail_with_unknown_args=False)")
    (tmp_path / "train.py").write_text(script)
    recipe = {"model_name_or_path": str(built_fixtures / "models" / "qwen2-chat"), "dataset_name": "unused",
              "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 2, "num_generations": 2,
              "max_completion_length": 8, "report_to": "none", "packing": False, "reward_func": ["length"]}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--format", "json", "--",
                      "python", "train.py", "--config", "recipe.yaml", cwd=tmp_path)
    result = result_of(json.loads(proc.stdout), "trainer-config")
    if keeps_rest:
        assert result["status"] == "pass", result
        return
    assert result["status"] == "warn", result
    assert "`reward_func`, `packing`" in result["message"] or "`packing`, `reward_func`" in result["message"], result
    dropped = result["details"]["dropped keys"]
    assert dropped["packing"] == ("known to no dataclass of the script's parser "
                                  "(GRPOScriptArguments, GRPOConfig, ModelConfig)"), dropped
    assert result["details"]["trl's parser"].startswith("the script's TrlParser (GRPOScriptArguments, GRPOConfig"), result
