"""Issue 46: the watch on TRL's AsyncGRPOTrainer's logs (trl.experimental.async_grpo), from the outside (`trl-doctor
watch PATH`) and inside the job (DoctorCallback(watch=True)).

The logs are real runs of TRL 1.16's AsyncGRPOTrainer on the CPU (fixtures/_async_grpo_runs.py: TRL's trainer and
rollout code, a sampler copy of the policy in place of `vllm serve`, the FlashAttention-3 kernel replaced by the same
attention in torch), at AsyncGRPOConfig's own logging (every step), committed under fixtures/watch/async-grpo/. What
each rule reads of them is in trl_doctor/facts/metrics.py and docs/watch.md."""

from __future__ import annotations

import copy
import io
import json
import sys

import pytest

from conftest import FIXTURES, run_doctor

RUNS = FIXTURES / "watch" / "async-grpo"
HEALTHY, CONSTANT = RUNS / "healthy.json", RUNS / "constant_reward.json"
JUDGED = ("zero-advantage", "never-terminating", "policy-gradient-gone", "no-update", "entropy-collapse", "non-finite",
          "grad-spike", "learning-rate-zero", "ratio-clipping")


def watch_json(*args: str) -> tuple[int, dict, dict]:
    proc = run_doctor("watch", *args, "--format", "json")
    report = json.loads(proc.stdout)
    return proc.returncode, {r["rule"]: r for r in report["results"]}, report


def altered(tmp_path, source, change) -> str:
    """The run's trainer_state.json with `change(row)` applied to each training row, written to tmp_path."""
    state = json.loads(source.read_text())
    state = copy.deepcopy(state)
    for row in state["log_history"]:
        if "loss" in row:
            change(row)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))
    return str(path)


@pytest.mark.release_free
def test_the_fixtures_are_async_grpo_s_own_logs():
    """What the committed runs hold, as TRL 1.16's AsyncGRPOTrainer logged it: its own names, none of GRPOTrainer's
    group share, a log every step, and a first `ratio` of 1 (the CPU attention scores what the sampler sampled)."""
    for path in (HEALTHY, CONSTANT):
        state = json.loads(path.read_text())
        assert state["built_by"] == "fixtures/_async_grpo_runs.py" and state["logging_steps"] == 1
        rows = [r for r in state["log_history"] if "loss" in r]
        assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
        names = set().union(*rows)
        assert {"reward", "reward_std", "ratio", "kl", "entropy", "clip_ratio/region_mean", "completions/clipped_ratio",
                "sample/staleness_mean", "batch/samples_per_step", "perf/fwd_bwd_s"} <= names
        assert not names & {"frac_reward_zero_std", "completions/mean_terminated_length", "rewards/length_reward/mean"}
        assert abs(rows[0]["ratio"] - 1) < 1e-3, rows[0]["ratio"]


@pytest.mark.release_free
def test_a_healthy_async_grpo_run_is_never_flagged():
    code, results, report = watch_json(str(HEALTHY))
    assert report["trainer"] == "async_grpo"
    assert code == 0, {k: r["message"] for k, r in results.items() if r["status"] not in ("pass", "skip")}
    for slug in JUDGED:
        assert results[slug]["status"] == "pass", (slug, results[slug]["message"])
    assert results["zero-advantage"]["message"].endswith("(reward_std: at least 0.2884 over 10 logs)")
    assert "completions/clipped_ratio" in results["never-terminating"]["message"]
    kl = results["kl-blowup"]
    assert kl["status"] == "skip" and "no reference model" in kl["message"], kl
    assert results["reward-hacking"]["status"] == "skip"  # one reward function: nothing to trade


@pytest.mark.release_free
def test_every_group_tied_fails_zero_advantage_from_step_1_and_nothing_else_is_flagged():
    code, results, _ = watch_json(str(CONSTANT))
    assert code == 1
    zero = results["zero-advantage"]
    assert zero["status"] == "fail" and zero["details"]["since"] == "step 1", zero
    assert "AsyncGRPO logs the mean of its trained samples' group spreads" in zero["message"]
    assert "the trainer has no KL term: the loss is 0" in zero["message"]
    gone = results["policy-gradient-gone"]  # AsyncGRPO's loss is 0 exactly with every advantage 0
    assert gone["status"] == "fail" and "the loss and grad_norm are 0" in gone["message"], gone
    assert {k for k, r in results.items() if r["status"] in ("warn", "fail")} == {"zero-advantage",
                                                                                 "policy-gradient-gone"}
    assert "no gradient at all: the trainer has no KL term" in results["grad-spike"]["message"]


@pytest.mark.release_free
def test_a_tie_shorter_than_the_patience_is_not_yet_a_verdict(tmp_path):
    """4 tied steps (logs 7-10) of 5 needed: not a pass and not a fail. AsyncGRPO has no KL term: with loss and
    grad_norm 0 at each tied step every signal agrees those steps changed nothing (a warn, issue 61); with a gradient
    left a skip that says how much is needed."""
    state = json.loads(CONSTANT.read_text())
    healthy = json.loads(HEALTHY.read_text())["log_history"]
    state["log_history"] = healthy[:6] + state["log_history"][6:]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))
    _, results, _ = watch_json(str(path))
    assert results["zero-advantage"]["status"] == "warn", results["zero-advantage"]
    assert "every signal agrees" in results["zero-advantage"]["message"]
    state["log_history"] = [dict(r, grad_norm=0.5) if "loss" in r else r for r in state["log_history"]]
    path.write_text(json.dumps(state))
    _, results, _ = watch_json(str(path))
    assert results["zero-advantage"]["status"] == "skip", results["zero-advantage"]
    assert "too little evidence yet, 5 logs in a row are needed" in results["zero-advantage"]["message"]


@pytest.mark.release_free
def test_async_grpo_s_kl_is_not_judged_as_a_kl_to_a_reference(tmp_path):
    """A `kl` of 20 nats in every log: GRPO's would be a blow-up; AsyncGRPO's is no KL to a reference (kl-blowup
    skips). The same rows without AsyncGRPO's own names are read as GRPO's, and fail."""
    high = altered(tmp_path, HEALTHY, lambda row: row.update(kl=20.0))
    _, results, _ = watch_json(high)
    assert results["kl-blowup"]["status"] == "skip", results["kl-blowup"]
    assert "k3 estimate of KL(sampler || trained policy)" in results["kl-blowup"]["message"]
    (tmp_path / "grpo").mkdir()
    bare = altered(tmp_path / "grpo", HEALTHY, lambda row: [row.update(kl=20.0)] + [
        row.pop(k) for k in list(row) if k.startswith(("sample/", "batch/", "perf/"))])
    _, results, report = watch_json(bare)
    assert report["trainer"] == "grpo" and results["kl-blowup"]["status"] == "fail", results["kl-blowup"]


@pytest.mark.release_free
def test_an_inf_reward_says_what_it_does_to_async_grpo(tmp_path):
    """AsyncGRPO standardizes a group's rewards itself (no NaN advantage set to 0, as GRPOTrainer's): an inf makes the
    group's advantages NaN."""
    path = altered(tmp_path, HEALTHY, lambda row: row.update(reward=float("inf")) if row["step"] >= 6 else None)
    _, results, _ = watch_json(path)
    found = results["non-finite"]
    assert found["status"] == "fail" and found["details"]["since"] == "step 6", found
    assert "AsyncGRPO computes the group's advantages from its rewards' mean and std" in found["message"]


@pytest.mark.release_free
def test_two_reward_functions_are_read_by_reward_hacking(tmp_path):
    """AsyncGRPO logs a function's mean as `rewards/<f>` (trl <= 0.16's spelling): reward-hacking reads both."""
    def two(row):
        row["rewards/format"] = row["reward"] / 2
        row["rewards/answer"] = row["reward"] / 2

    state = json.loads(HEALTHY.read_text())
    rows = [r for r in state["log_history"] if "loss" in r]
    state["log_history"] = [dict(rows[i % len(rows)], step=i + 1) for i in range(12)]
    source = tmp_path / "long.json"
    source.write_text(json.dumps(state))
    (tmp_path / "two").mkdir()
    _, results, _ = watch_json(altered(tmp_path / "two", source, two))
    hacking = results["reward-hacking"]
    assert hacking["status"] == "pass" and "format" in hacking["message"] and "answer" in hacking["message"], hacking


# -- inside the job: a real AsyncGRPOTrainer with DoctorCallback(watch=True) -------------------------------------------
def _has_async_grpo() -> bool:
    from importlib.metadata import version
    from importlib.util import find_spec

    from packaging.version import Version

    return Version(version("trl")) >= Version("1.16") and find_spec("trl.experimental.async_grpo") is not None


needs_async = pytest.mark.skipif("not _has_async_grpo()", reason="the runs drive trl 1.16's AsyncGRPOTrainer and its "
                                                               "rollout loop's own code")


def live(tmp_path, name: str, steps: int, **more):
    sys.path.insert(0, str(FIXTURES))
    import _async_grpo_runs

    from trl_doctor import DoctorCallback

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch=True, stream=stream)
    trainer = _async_grpo_runs.train(name, str(tmp_path / "out"), steps, callbacks=[callback], **more)
    return trainer, callback, stream.getvalue()


@needs_async
@pytest.mark.slow
@pytest.mark.trl_pair
@pytest.mark.parametrize("logging_steps, stop", [
    (None, 5),  # AsyncGRPOConfig's own: a log a step, 5 in a row
    (5, 10),  # a log covers 5 steps (each reward_std the window's mean): 2 logs, at step 10
])
def test_the_callback_stops_a_tied_async_grpo_job(tmp_path, logging_steps, stop):
    more = {} if logging_steps is None else {"logging_steps": logging_steps}
    trainer, callback, said = live(tmp_path, "constant_reward", 14, **more)
    assert callback.watcher.trainer_kind == "async_grpo"
    assert callback.watcher.stopped_at == stop and trainer.state.global_step == stop, said
    result = next(r for r in callback.watch_report.results if r.rule == "zero-advantage")
    assert result.status.value == "fail" and result.details["since"] == f"step {logging_steps or 1}", result
    assert f"trl-doctor watch, step {stop}: TW001" in said
    assert (tmp_path / "out" / f"checkpoint-{stop}" / "trainer_state.json").is_file()


@needs_async
@pytest.mark.slow
@pytest.mark.trl_pair
def test_the_callback_lets_a_healthy_async_grpo_job_run():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as out:
        trainer, callback, said = live(Path(out), "healthy", 8)
    assert callback.watcher.stopped_at is None and trainer.state.global_step == 8, said
    statuses = {r.rule: r.status.value for r in callback.watch_report.results}
    assert {s for s in statuses.values()} <= {"pass", "skip"}, statuses
    assert statuses["zero-advantage"] == "pass" and statuses["kl-blowup"] == "skip"
