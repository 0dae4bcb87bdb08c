"""The completions themselves (issue 61, item 3): the watch reads the text the policy generated where it is at hand
(the live trainer's newest batch inside the job; TRL's log_completions parquet files; the trackio and wandb tables)
and degenerate-completions (TW013) judges it: repetition loops, groups of copies, a switch of language, a format
dropped, a collapse to a few words. The tables here are written as TRL 1.16's GRPOTrainer.log writes them
(pandas' to_parquet of step, prompt, completion, one column a reward function, advantage); one real job on the CPU
shows the rule inside the job and from each store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from test_watch import state_file, watch_json

ROW = {"loss": 0.01, "grad_norm": 0.4, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
       "frac_reward_zero_std": 0.2, "completions/mean_length": 120.0, "completions/clipped_ratio": 0.05, "kl": 0.01,
       "entropy": 0.6, "epoch": 0.1}
GOOD = ["<think>Two and two make four.</think><answer>4</answer>", "<think>2+2 is 4.</think><answer>4</answer>",
        "<think>Adding: 4.</think><answer>4</answer>", "<think>It is four.</think><answer>4</answer>"]


def job(tmp_path: Path, batches: dict[int, list[list[str]]], prompt=lambda g: f"What is {g}+{g}? Think first.") -> str:
    """A job's output folder: checkpoint-N/trainer_state.json and completions/completions_<step>.parquet, one
    group of completions a prompt."""
    import pandas as pd

    steps = max(batches)
    out = tmp_path / "out"
    (out / "completions").mkdir(parents=True)
    state_file(out, [ROW] * steps)
    (out / f"checkpoint-{steps}").mkdir()
    (out / "trainer_state.json").rename(out / f"checkpoint-{steps}" / "trainer_state.json")
    for step, groups in batches.items():
        rows = [{"step": step, "prompt": [{"role": "user", "content": prompt(g)}],
                 "completion": [{"role": "assistant", "content": text}], "format_reward": 1.0, "advantage": 0.0}
                for g, group in enumerate(groups) for text in group]
        pd.DataFrame(rows).to_parquet(out / "completions" / f"completions_{step:05d}.parquet")
    return str(out)


def verdict(path: str) -> dict:
    _, results, stderr = watch_json(path)
    assert "degenerate-completions" in results, f"{path}: {stderr}"
    return results["degenerate-completions"]


@pytest.mark.release_free
def test_healthy_completions_pass_and_none_at_hand_is_a_skip(tmp_path):
    found = verdict(job(tmp_path, {10: [GOOD, GOOD[::-1]], 20: [GOOD[1:] + GOOD[:1], GOOD], 30: [GOOD, GOOD[::-1]]}))
    assert found["status"] == "pass" and "24 completions over 3 steps" in found["message"], found
    (tmp_path / "bare").mkdir()
    found = verdict(str(state_file(tmp_path / "bare", [ROW] * 3)))
    assert found["status"] == "skip" and "log_completions=True" in found["message"], found


@pytest.mark.release_free
def test_repetition_loops_over_two_steps_fail(tmp_path):
    loop = ["<think>Let me see. " + "the answer is 4. " * 12 for _ in range(4)]
    found = verdict(job(tmp_path, {10: [GOOD, GOOD], 20: [loop[:3] + GOOD[:1], loop], 30: [loop, loop]}))
    assert found["status"] == "fail" and "repetition loops" in found["message"], found
    assert "7 of 8 at step 20, 8 of 8 at step 30" in found["message"] and "x12" in found["message"]


@pytest.mark.release_free
def test_groups_of_copies_fail_and_one_step_of_them_is_a_warn(tmp_path):
    copies = [["<answer>4</answer>"] * 4, ["<answer>7</answer>"] * 4]
    found = verdict(job(tmp_path, {10: [GOOD, GOOD], 20: copies, 30: copies}))
    assert found["status"] == "fail" and "copies" in found["message"] and "2 of 2 groups at step 30" in found["message"]
    found = verdict(job(tmp_path / "one", {10: copies}))
    assert found["status"] == "warn", found


@pytest.mark.release_free
def test_a_language_switch_a_dropped_format_and_a_collapse_are_warns(tmp_path):
    chinese = ["<think>二加二等于四，所以答案是四。</think><answer>四</answer>"] + GOOD[1:]
    chinese = [c.replace("Two and two make four.", "二加二等于四，所以答案是四，这个很简单。") for c in chinese]
    switched = [["<think>二加二等于四，所以答案是四，这个很简单。</think><answer>4</answer>",
                 "<think>答案是四，因为二加二等于四。</think><answer>4</answer>",
                 "<think>我们计算二加二，得到四。</think><answer>4</answer>", GOOD[0]]] * 2
    found = verdict(job(tmp_path / "a", {10: [GOOD, GOOD], 20: switched, 30: switched}))
    assert found["status"] == "warn" and "another language" in found["message"] and "CJK" in found["message"], found
    bare = [["Four, since two and two make four in the end.", "It is four because two plus two is four."] * 2] * 2
    found = verdict(job(tmp_path / "b", {10: [GOOD, GOOD], 20: bare, 30: bare}))
    assert found["status"] == "warn" and "the format dropped" in found["message"] and "<answer>" in found["message"]
    long = [[" ".join(["step"] * 40) + " <answer>4</answer>"] * 4] * 2
    short = [["4", "4.", "four", "4"]] * 2
    found = verdict(job(tmp_path / "c", {10: long, 20: short, 30: short}))
    assert found["status"] == "warn" and "collapsed to a few words" in found["message"], found


@pytest.mark.release_free
def test_the_facts_read_loops_scripts_and_formats():
    from trl_doctor.facts.completions import loop, markers, script

    assert loop("Let me think. " + "the answer is 4. " * 5) == (" the answer is 4.", 5) or \
        loop("Let me think. " + "the answer is 4. " * 5)[1] >= 5
    assert loop("a" * 40) == ("a", 40)
    assert loop("The quick brown fox jumps over the lazy dog and goes home.") is None
    assert loop("ha ha") is None  # too short to call a loop
    assert script("二加二等于四，所以答案是四。") == "CJK" and script("Привет, как дела у тебя?") == "CYRILLIC"
    assert script("4 + 4") is None
    assert markers("<think>x</think> \\boxed{4} #### 4") == {"<think>", "</think>", "\\boxed{", "####"}


JOB = """
import io, json, sys
sys.path.insert(0, sys.argv[1])
import _watch_runs
from trl import GRPOConfig
from trl_doctor import DoctorCallback

stream = io.StringIO()
callback = DoctorCallback(preflight=False, watch=True, stream=stream)
default = GRPOConfig.__dataclass_fields__["logging_steps"].default
trainer = _watch_runs.trainer("diverging", sys.argv[2], 30, callbacks=[callback], logging_steps=default,
                              log_completions=True, report_to=["trackio", "wandb"])
trainer.train()
import wandb

wandb.finish()  # as the job's process ending does (TRL's TrackioCallback finishes trackio's run itself)
json.dump({"default": default, "step": trainer.state.global_step, "said": stream.getvalue(),
           "stopped_for": callback.watcher.stopped_for}, open(sys.argv[3], "w"))
"""


@pytest.mark.slow
def test_a_real_job_s_completions_are_judged_inside_it_and_from_its_trackers(tmp_path):
    """TRL's GRPOTrainer on the CPU at its default logging_steps (10), log_completions on, trackio and wandb (offline)
    as report_to: at lr 5 the policy collapses and every group's completions are the same text from step 10. The job
    is stopped at step 20 with TW013 among the failures; trackio's database, wandb's run folder and the output
    folder's parquet files (beside checkpoint-20) give the same verdict from the outside. The job runs in a process
    of its own: the trackers read their folders from the environment when they are imported."""
    pytest.importorskip("trackio")
    pytest.importorskip("wandb")
    from importlib.metadata import version

    from packaging.version import Version
    if Version(version("trl")) < Version("1.10"):
        pytest.skip("TRL writes the completions' parquet files from 1.10")
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path),
           "WANDB_SILENT": "true", "WANDB_PROJECT": "degenerate", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(tmp_path / "job.py"), str(FIXTURES), str(tmp_path / "out"),
                           str(tmp_path / "job.json")], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["default"] == 10 and job["step"] == 20, job
    assert "step 20: TW013 degenerate-completions fail: copies" in job["said"], job["said"]
    assert "TW013 degenerate-completions" in job["stopped_for"]
    for store in (tmp_path / "trackio", tmp_path / "wandb", tmp_path / "out" / "checkpoint-20"):
        found = verdict(str(store))
        assert found["status"] == "fail" and "copies" in found["message"], (store, found)
