"""The watch inside real jobs (issue 33): TRL's GRPO and RLOO trained on the CPU on a tiny Qwen2 with one failure
induced each (fixtures/_watch_runs.py), DoctorCallback(watch=True) judging every log. Each failure is flagged from the
step it starts and the job stops cleanly with a checkpoint; the same runs made healthy are not stopped; two processes
under torchrun (gloo) stop at the same step."""

from __future__ import annotations

import io
import math
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, trl_doctor_exe

pytestmark = pytest.mark.slow


def _new_enough() -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("trl")) >= Version("0.20")


needs_trl = pytest.mark.skipif(not _new_enough(), reason="the runs use GRPOConfig.generation_kwargs and the "
                                                        "GRPO-style RLOOTrainer of trl >= 0.20")


def run(name: str, tmp_path, steps: int = 8, **more):
    sys.path.insert(0, str(FIXTURES))
    import _watch_runs
    from transformers import TrainerCallback

    from trl_doctor import DoctorCallback

    class Tracker(TrainerCallback):  # stands where a tracker's callback (wandb, trackio) stands: after the defaults
        rows: list = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.rows.append(dict(logs or {}))

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch=True, stream=stream)
    tracker = Tracker()
    tracker.rows = []
    trainer = _watch_runs.trainer(name, str(tmp_path / "out"), steps, callbacks=[tracker, callback], **more)
    trainer.train()  # returns normally, stopped or not
    callback.tracked = tracker.rows
    return trainer, callback, stream.getvalue()


@needs_trl
@pytest.mark.parametrize("name, rule, stop", [
    ("zero_advantage", "TW001", 5),  # a constant reward: 5 logs in a row from step 1
    ("rloo_zero_advantage", "TW001", 5),
    ("never_terminating", "TW002", 5),  # every stop token suppressed
    ("lr_zero", "TW009", 2),  # learning_rate 0: 2 logs
])
def test_an_induced_failure_stops_the_job_with_a_checkpoint(tmp_path, name, rule, stop):
    trainer, callback, said = run(name, tmp_path)
    assert callback.watcher.stopped_at == stop and trainer.state.global_step == stop, said
    result = next(r for r in callback.watch_report.results if r.id == rule)
    assert result.status.value == "fail" and result.details["since"] == "step 1", result
    assert f"trl-doctor watch, step {stop}: {rule}" in said and "stopping the job" in said
    out = tmp_path / "out"
    assert (out / f"checkpoint-{stop}" / "trainer_state.json").is_file()
    report = json.loads((out / "trl-doctor-watch.json").read_text())
    assert {r["id"]: r["status"] for r in report["results"]}[rule] == "fail"
    # the trackers receive the verdicts with the metrics: 0 failing rules until the decision, then the rule's level
    rows = [r for r in callback.tracked if "loss" in r]
    assert [r["doctor/fail"] > 0 for r in rows] == [False] * (stop - 1) + [True]
    assert rows[-1][f"doctor/{result.rule}"] == 2

@needs_trl
@pytest.mark.parametrize("name", ["healthy", "rloo_healthy"])
def test_the_same_runs_made_healthy_are_not_stopped(tmp_path, name):
    trainer, callback, said = run(name, tmp_path)
    assert callback.watcher.stopped_at is None and trainer.state.global_step == 8, said
    assert callback.watch_report.ok and not said
    assert not any((tmp_path / "out").glob("checkpoint-*"))  # save_strategy "no": only a stop saves


@needs_trl
def test_a_diverging_learning_rate_is_flagged_at_the_step_it_starts(tmp_path):
    trainer, callback, said = run("diverging", tmp_path)  # learning_rate 5: the policy collapses after step 1
    flagged = {r.id: r for r in callback.watch_report.results if r.status.value in ("fail", "warn")}
    assert callback.watcher.stopped_at == 6, said  # step 2 + 5 logs of zero advantage - 1
    # the collapse starts at step 2: the KL jumps, the entropy falls to 0, no group has a reward spread
    assert {flagged[r].details["since"] for r in ("TW001", "TW005", "TW006")} == {"step 2"}, flagged


@needs_trl
def test_on_fail_warn_says_so_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # a job's log: no terminal, 80 columns
    sys.path.insert(0, str(FIXTURES))
    import _watch_runs

    from trl_doctor import DoctorCallback

    stream = io.StringIO()
    callback = DoctorCallback(preflight=False, watch={"zero-advantage": {"patience": 3}}, on_fail="warn", stream=stream)
    trainer = _watch_runs.trainer("zero_advantage", str(tmp_path / "out"), 6, callbacks=[callback])
    trainer.train()
    assert trainer.state.global_step == 6 and callback.watcher.stopped_at is None
    assert "trl-doctor watch, step 3: TW001 zero-advantage fail" in stream.getvalue()  # patience 3, from the dict
    said = stream.getvalue().splitlines()  # the job's log: wrapped to 80 columns, continuation lines indented
    assert max(len(line) for line in said) <= 80 and any(line.startswith("    ") for line in said), said


@needs_trl
@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "torchrun")),
                    reason="torchrun is not installed")
def test_two_processes_stop_at_the_same_step(tmp_path):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = tmp_path / "ddp"
    proc = subprocess.run([torchrun, "--nproc_per_node", "2", str(FIXTURES / "_watch_runs.py"), "--distributed",
                           "zero_advantage", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    # only the main process judges: the other stops on the verdict it receives through the process group
    assert [r["stopped_at"] for r in ranks] == [5, 5] and [r["global_step"] for r in ranks] == [5, 5]
    assert (out / "checkpoint-5").is_dir()
    assert proc.stderr.count("stopping the job at step 5") + proc.stdout.count("stopping the job at step 5") == 1


@needs_trl
def test_two_processes_agree_when_one_is_late(tmp_path):
    """Rank 1 reaches every log 1.5 s late: rank 0 waits for it in the verdict's broadcast (the job's own process
    group), both stop at the same step, and the job ends with nothing left waiting."""
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed")
    out = tmp_path / "ddp"
    proc = subprocess.run([torchrun, "--nproc_per_node", "2", str(FIXTURES / "_watch_runs.py"), "--distributed",
                           "zero_advantage", str(out), "--slow", "1:1.5"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["stopped_at"] for r in ranks] == [5, 5] and [r["global_step"] for r in ranks] == [5, 5]
    assert ranks[1]["slept"] == 7.5 and ranks[0]["slept"] == 0  # 5 steps late on rank 1 only
    assert ranks[0]["train_s"] >= 7.5  # rank 0 waited for rank 1 (in the broadcast or in DDP's own all-reduce)


# PPO: trl.experimental.ppo of trl 1.12.0 (PPOTrainer's last release), from PyPI, in a process of its own
PPO_CASES = {  # run: (rule flagged, its status, since, the step the job stops at or None)
    "ppo_constant_reward": ("TW001", "fail", "step 1", 5),  # objective/scores 0 in every log
    "ppo_never_terminating": ("TW002", "fail", "step 1", 5),  # val/num_eos_tokens 0
    "ppo_lr_zero": ("TW009", "fail", "step 1", 2),
    # approxkl 2.6e4 at step 1 in every run; what follows is chaotic (lr 5: the 6th digit of step 1's approxkl differs
    # from run to run on one machine, single-threaded, deterministic algorithms on), so where the job stops, if it does,
    # is not asserted: the committed rows of one such run (fixtures/ratio-clipping/bad_ppo_lr_5.json) hold the rest.
    # Some runs die in TRL itself before any stop: the policy emits nothing but padding and PPOTrainer's masked_var
    # raises "The sum of the mask is zero" (CI, 2026-11-29); the watch had flagged the divergence from step 1.
    "ppo_diverging": ("TW011", "warn", "step 1", None),
}


@pytest.fixture(scope="module")
def ppo_runs(tmp_path_factory):
    from conftest import real_trl

    env = real_trl("1.12.0")
    out = tmp_path_factory.mktemp("ppo")
    proc = subprocess.run([sys.executable, str(FIXTURES / "_watch_runs.py"), "--ppo", str(out), *PPO_CASES, "ppo_healthy"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {name: json.loads((out / f"{name}.json").read_text()) for name in [*PPO_CASES, "ppo_healthy"]}
    for name, run in runs.items():  # and from the outside: `trl-doctor watch OUTPUT_DIR` on its TensorBoard events
        outside = subprocess.run([trl_doctor_exe(), "watch", str(out / name), "--format", "json"], capture_output=True,
                                 text=True, timeout=120)
        run["outside"] = json.loads(outside.stdout) if outside.stdout.startswith("{") else {"error": outside.stderr}
    return runs


@pytest.mark.parametrize("name", list(PPO_CASES))
def test_ppo_failures_are_flagged_and_stopped(ppo_runs, name):
    """At PPOConfig's own logging and saving settings (logging_steps 10, save_steps 500): its PPOTrainer logs every
    update whatever logging_steps says, and the watch counts what the job logged (one step a log)."""
    rule, status, since, stop = PPO_CASES[name]
    run = ppo_runs[name]
    assert run["died"] is None or stop is None, run["died"]  # only the chaotic run may die in TRL itself
    assert run["settings"]["logging_steps"] == 10 and run["settings"]["save_steps"] == 500, run["settings"]
    assert run["logged_steps"][:2] == [1, 2], run["logged_steps"]
    # from the outside, on the job's TensorBoard events: the same rule, from the same step
    outside = {r["id"]: r for r in run["outside"].get("results", [])}
    assert "runs" in run["outside"].get("config", ""), run["outside"]
    assert outside[rule]["status"] in ("warn", "fail") and outside[rule]["details"]["since"] == since, outside[rule]
    assert run["results"][rule]["status"] == status and run["results"][rule]["since"] == since, run["results"][rule]
    if stop is None:  # a chaotic run: wherever it stopped, it stopped as every stop does
        if run["died"] is not None:  # or TRL's own loop gave up on it first, after the watch's verdict above
            assert run["died"].startswith("ValueError: The sum of the mask is zero"), run["died"]
            assert run["stopped_at"] is None and run["raised"] is None, run
            return
        stop = run["stopped_at"]
        if stop is None:  # it trained to its end, where PPOConfig's save_strategy ("steps") saves its last step
            assert run["raised"] is None and run["global_step"] == 8, run
            assert run["checkpoints"] in ([], ["checkpoint-8"]), run
            return
    # PPOTrainer's loop ignores should_training_stop: the stop is WatchStopped from train(), after the checkpoint
    assert run["stopped_at"] == stop and run["global_step"] == stop, run["said"]
    assert run["checkpoints"] == [f"checkpoint-{stop}"]
    assert run["raised"].startswith(f"trl-doctor watch stopped the job at step {stop}") and "PPOTrainer" in run["raised"]


def test_ppo_diverging_names_the_policy_not_the_stop_tokens(ppo_runs):
    """Completions ended at step 1 (before any update) in every run: where eos is gone later, never-terminating blames
    the policy, not the stop tokens. The live run is chaotic; the committed rows of one (written by the same script)
    are judged for the fail itself."""
    found = ppo_runs["ppo_diverging"]["results"]["TW002"]
    if found["status"] == "fail":
        assert "the stop tokens work and the policy stopped emitting them" in found["message"], found
    proc = subprocess.run([sys.executable, "-m", "trl_doctor", "watch", str(FIXTURES / "ratio-clipping" / "bad_ppo_lr_5.json"),
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    found = next(r for r in json.loads(proc.stdout)["results"] if r["id"] == "TW002")
    assert found["status"] == "fail" and found["details"]["since"] == "step 2", found
    assert "the stop tokens work and the policy stopped emitting them" in found["message"]


def test_a_healthy_ppo_run_is_not_stopped(ppo_runs):
    run = ppo_runs["ppo_healthy"]
    assert run["stopped_at"] is None and run["raised"] is None and run["died"] is None, run
    assert run["global_step"] == 8 and not run["said"]
    assert {r["status"] for r in run["results"].values()} <= {"pass", "skip"}, run["results"]
    assert run["checkpoints"] in ([], ["checkpoint-8"])  # only the last step's save (PPOConfig saves "steps")
    flagged = [r["rule"] for r in run["outside"].get("results", []) if r["status"] in ("warn", "fail")]
    assert "runs" in run["outside"].get("config", "") and not flagged, run["outside"]  # nor from the outside


@needs_trl
def test_a_reward_of_inf_is_flagged_at_the_step_it_starts(tmp_path):
    trainer, callback, said = run("non_finite", tmp_path)  # the reward returns inf from its 3rd call (step 3)
    result = next(r for r in callback.watch_report.results if r.id == "TW007")
    assert result.status.value == "fail" and result.details["since"] == "step 3", result
    assert callback.watcher.stopped_at == 3 and trainer.state.global_step == 3
    # TRL 1.x turns the NaN advantages into 0: the loss stays finite, only the reward shows it
    assert all(math.isfinite(row["loss"]) for row in trainer.state.log_history if "loss" in row)


# --- issue 44, class 1: the watch's own trouble never takes the job down or stops it --------------------------------

WATCH_PLUGIN = '''from trl_doctor import passed, rule
from trl_doctor.errors import InputError

ALL = ("grpo", "rloo", "ppo", "other")


@rule(id="XT301", slug="xt-raises", title="raises", trainers=ALL, watch_only=True)
def raises(ctx):
    raise RuntimeError("a plugin's own bug")
    yield passed("never")


def _deep(n):
    return _deep(n + 1)


@rule(id="XT302", slug="xt-recursion", title="recursion", trainers=ALL, watch_only=True)
def recursion(ctx):
    _deep(0)
    yield passed("never")


@rule(id="XT303", slug="xt-input", title="input", trainers=ALL, watch_only=True)
def input_error(ctx):
    raise InputError("a plugin that raises InputError")
    yield passed("never")
'''

HOSTILE_JOB = '''import sys
sys.path.insert(0, sys.argv[2])
import _watch_runs
import trl
from trl_doctor import DoctorCallback

original = trl.GRPOTrainer.log


def log(self, logs, *args, **kwargs):  # the job logs a value no float holds, and a None, at every log
    return original(self, dict(logs, big=10 ** 400, none=None), *args, **kwargs)


trl.GRPOTrainer.log = log
trainer = _watch_runs.trainer("zero_advantage", sys.argv[1], 8, callbacks=[DoctorCallback(preflight=False, watch=True)])
trainer.train()
print("trained to step", trainer.state.global_step)
'''


@needs_trl
def test_the_watch_s_own_trouble_is_a_line_and_the_job_goes_on_to_its_verdict(tmp_path):
    """A real GRPO job (a constant reward: zero-advantage fails at step 5) with three plugin watch rules that crash
    (RuntimeError, RecursionError, InputError), a logged value no float holds next to a None, and an output_dir the
    job cannot write (immutable: even root cannot). Each crash is one line, once; no crash stops the job; the verdict
    stops it at step 5, without the checkpoint it cannot write instead of dying of OSError."""
    site = tmp_path / "site"
    dist = site / "xt_watch_rules-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "xt_watch_rules.py").write_text(WATCH_PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: xt-watch-rules\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[trl_doctor.rules]\nxt = xt_watch_rules\n")
    (tmp_path / "job.py").write_text(HOSTILE_JOB)
    out = tmp_path / "out"
    out.mkdir()
    if subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode != 0:
        out.rmdir()
        out.write_text("a file where the output folder would be\n")  # where chattr cannot: no folder can be made
        out = out / "run"
    try:
        proc = subprocess.run([sys.executable, str(tmp_path / "job.py"), str(out), str(FIXTURES)], capture_output=True,
                              text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(site)))
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "out")], capture_output=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert "trained to step 5" in proc.stdout, log[-3000:]
    for rule in ("XT301 xt-raises", "XT302 xt-recursion", "XT303 xt-input"):
        assert log.count(f"trl-doctor watch, step 1: {rule} error: the rule crashed") == 1, log[-3000:]
    assert "trl-doctor watch: stopping the job at step 5 (TW001 zero-advantage" in log.replace("\n    ", " ")
    assert "cannot be written" in log and "the job stops without a checkpoint of this step" in log.replace("\n    ", " ")
