"""The migration table (trl_doctor/data/migrations.yaml) with real version strings, and trainer-config's use of it
through the command: the hint, the consequence per release, and the safe rename."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import yaml

from conftest import real_trl, result_of, run_doctor
from trl_doctor.rules.trainer_config import load_migrations, migration_for, unknown_key_policy

pytestmark = pytest.mark.trl_pair  # decided by the TRL / transformers pair, not by vLLM

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "trainer-config"


@pytest.mark.parametrize("key, installed, expected", [
    ("torch_dtype", {"trl": "0.26.2"}, None),  # still accepted, as a deprecated alias
    ("torch_dtype", {"trl": "0.27.0"}, "dtype"),
    ("torch_dtype", {"trl": "1.16.0"}, "dtype"),
    ("max_prompt_length", {"trl": "0.27.2"}, None),
    ("max_prompt_length", {"trl": "0.28.0"}, ""),  # removed, no replacement
    ("warmup_ratio", {"transformers": "5.14.1"}, None),
    ("warmup_ratio", {"transformers": "5.15.0"}, "warmup_steps"),
    ("overwrite_output_dir", {"transformers": "4.57.6"}, None),
    ("overwrite_output_dir", {"transformers": "5.0.0"}, ""),
    ("num_generation", {"trl": "1.16.0", "transformers": "5.23.0"}, None),  # a typo is not a migration
    ("ppo_epochs", {"trl": "0.11.4"}, None),  # PPOv1's own config
    ("ppo_epochs", {"trl": "0.12.0"}, "num_ppo_epochs"),
    ("init_kl_coef", {"trl": "1.12.0"}, "kl_coef"),
    ("adap_kl_ctrl", {"trl": "0.15.2"}, ""),
])
def test_the_table_answers_by_release(key, installed, expected):
    entry = migration_for(key, installed, trainer="ppo")
    if expected is None:
        assert entry is None
    else:
        assert entry is not None and (entry.replacement or "") == expected


def test_every_entry_is_complete():
    for entry in load_migrations():
        assert entry.package in ("trl", "transformers", "accelerate") and entry.since and entry.note
        assert not entry.same_meaning or entry.replacement, entry  # a safe rename needs a new name


def test_a_ppo_key_does_not_explain_another_trainers_config():
    assert migration_for("steps", {"trl": "1.16.0"}, trainer="grpo") is None
    assert migration_for("steps", {"trl": "1.12.0"}, trainer="ppo").replacement == "total_episodes"


@pytest.mark.slow
@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_ppov1_keys_on_the_last_release_with_ppo(built_fixtures, tmp_path):
    """Catalog A8: a PPOv1 recipe on trl 1.12.0 (the new PPOConfig) is told what each key became, the one rename
    with the same meaning is fixed, and the new-API recipe passes."""
    env = real_trl("1.12.0")
    for name in ("bad_ppov1_keys.yaml", "ok_ppo.yaml"):
        (tmp_path / name).write_text((FIX / name).read_text().replace("../", f"{FIX.parent}/"))
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json",
                      str(tmp_path / "bad_ppov1_keys.yaml"), env=env)
    report = json.loads(proc.stdout)
    result = result_of(report, "TD009")
    messages = [result["message"], *result["details"].get("also", [])]
    assert proc.returncode == 1 and len(messages) == 3, messages
    joined = " | ".join(messages)
    assert "`ppo_epochs` was renamed `num_ppo_epochs`" in joined and "no adaptive KL controller" in joined
    assert "`adap_kl_ctrl` was removed in trl 0.12.0" in joined
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--fix", str(tmp_path / "bad_ppov1_keys.yaml"),
                      env=env)
    fixed = yaml.safe_load((tmp_path / "bad_ppov1_keys.yaml").read_text())
    assert fixed.get("num_ppo_epochs") == 4 and "ppo_epochs" not in fixed  # the same-meaning rename only
    assert "init_kl_coef" in fixed and "adap_kl_ctrl" in fixed  # the others change what is trained: told, not applied
    proc = run_doctor("check", "--static", "--select", "trainer-config", str(tmp_path / "ok_ppo.yaml"), env=env)
    assert proc.returncode == 0, proc.stdout


def test_no_far_fetched_hints(built_fixtures, tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text((FIX / "ok_grpo.yaml").read_text().replace("../", f"{FIX.parent}/")
                      + "hub_model_revision: main\nchat_template: chatml\n")
    shutil.copy(FIX / "rewards.py", tmp_path)
    proc = run_doctor("check", "--static", "--select", "trainer-config", "--format", "json", str(config))
    message = result_of(json.loads(proc.stdout), "trainer-config")["message"]
    assert "'hub_model_revision'" in message and "'chat_template'" in message and "did you mean" not in message


def test_the_consequence_follows_the_installed_trl(built_fixtures):
    policy, _ = unknown_key_policy()
    proc = run_doctor("check", "--static", "--select", "trainer-config", str(FIX / "bad_unknown_key.yaml"))
    if policy == "stops":
        assert "stops on it at start-up" in proc.stdout
    else:  # trl <= 0.18: the value is lost without a word
        assert "drops it without a word" in proc.stdout


def test_fix_renames_a_key_with_the_same_meaning(built_fixtures, tmp_path):
    from importlib.metadata import version

    from packaging.version import Version

    if Version(version("trl")) < Version("0.27.0"):
        pytest.skip("this TRL still takes torch_dtype")
    config = tmp_path / "recipe.yaml"
    config.write_text((FIX / "bad_renamed_torch_dtype.yaml").read_text().replace("../", f"{FIX.parent}/"))
    shutil.copy(FIX / "rewards.py", tmp_path)
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--fix", str(config))
    assert proc.returncode == 0, proc.stdout
    text = config.read_text()
    assert "\ntorch_dtype:" not in text and "\ndtype: bfloat16" in text  # the comment line keeps its words
