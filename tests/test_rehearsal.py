"""The rehearsal (TD025, issue 60) against TRL's own run of the same job, on the releases a public failure spans.

huggingface/trl#3384 (trl 0.16.1): `metric_for_best_model: eval_reward` stops GRPO at its first evaluation with
transformers' KeyError, because GRPOTrainer.log() rebuilt its logs before the best-model check saw them; trl#5811
(1.5.0) updates them in place and the job trains. fixtures/rehearsal/bad_best_eval_reward_before_trl15.yaml is that
job; here TRL's own train() (one step, an evaluation and a checkpoint) is the ground truth on trl 1.4.0 (the bug) and
on the installed release (fixed), each in a process of its own beside the doctor's check of the same recipe."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import FIXTURES, real_trl, result_of, run_doctor
from truths import truth_run

pytestmark = pytest.mark.other_trl

GROUND_TRUTH = r"""
import json, sys
import yaml
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer

recipe = yaml.safe_load(open(sys.argv[1]))
data = load_dataset("json", data_files=recipe["dataset_path"], split="train")
args = GRPOConfig(output_dir=sys.argv[2], use_cpu=True, bf16=False, report_to=[], max_steps=1, eval_steps=1,
                  save_steps=1, per_device_eval_batch_size=4, max_completion_length=8,
                  **{k: recipe[k] for k in ("num_generations", "per_device_train_batch_size", "eval_strategy",
                                            "load_best_model_at_end", "metric_for_best_model")})
trainer = GRPOTrainer(model=recipe["model_name_or_path"], args=args, train_dataset=data,
                      eval_dataset=data.select(range(4)),
                      reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions])
try:
    trainer.train()
    print(json.dumps({"trained": True}))
except Exception as exc:
    print(json.dumps({"trained": False, "error": f"{type(exc).__name__}: {exc}"}))
"""


def _recipe(tmp_path):
    text = (FIXTURES / "rehearsal" / "bad_best_eval_reward_before_trl15.yaml").read_text()
    text = text.replace("../models/", f"{FIXTURES}/models/").replace("../data/", f"{FIXTURES}/data/")
    (tmp_path / "rewards.py").write_text((FIXTURES / "rehearsal" / "rewards.py").read_text())
    path = tmp_path / "bad_best_eval_reward_before_trl15.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("release", ["1.4.0", None], ids=["trl-1.4.0", "installed"])
def test_the_best_metric_a_release_never_hands_its_check_is_found_as_its_own_train_stops(built_fixtures, tmp_path,
                                                                                        release):
    recipe = _recipe(tmp_path)
    env = real_trl(release, "grpo") if release else {}
    truth = truth_run(f"rehearsal/best-metric-{release or 'installed'}", [sys.executable, "-W", "ignore", "-c",
                      GROUND_TRUTH, str(recipe), str(tmp_path / "out")], tmp_path, env=env, tmp=tmp_path,
                      reads=("fixtures/rehearsal", "fixtures/data"))  # recorded: tests/truths.py
    said = json.loads(truth.stdout.strip().splitlines()[-1])
    proc = run_doctor("check", str(recipe), "--select", "rehearsal", "--format", "json", env=env or None, cwd=tmp_path)
    found = result_of(json.loads(proc.stdout), "rehearsal")
    if said["trained"]:
        assert found["status"] == "pass", found
    else:
        assert said["error"].startswith("KeyError") and found["status"] == "fail", (said, found)
        assert "'eval_reward', which is not found in the evaluation metrics" in found["message"], found
        assert "'eval_reward', which is not found in the evaluation metrics" in said["error"]
    assert said["trained"] == (release is None)  # the bug is 1.4.0's, fixed in the installed release (>= 1.5)
