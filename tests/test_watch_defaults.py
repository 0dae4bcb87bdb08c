"""Issue 43: the watch at the settings users keep. TRL's GRPOConfig and RLOOConfig log every 10 steps
(`logging_steps=10`) and save every 500; real runs (fixtures/_watch_runs.py --defaults: a tiny Qwen2 trained by TRL on
the CPU, in a process of its own) at those defaults, reporting to TensorBoard and to every tracker installed here
(trackio, wandb offline, MLflow's SQLite store), each writing where its own settings say. Evidence is counted in
optimizer steps: an induced failure from step 1 is flagged by step 20 by DoctorCallback(watch=True) inside the job,
and by `trl-doctor watch STORE --follow` on each store (the output folder's TensorBoard events, trackio's folder,
wandb's, MLflow's database), every one started before the job's first log, long before any checkpoint; the same run
made healthy is never flagged over 200 steps. PPO too, with trl 1.12.0 (PPOTrainer's last release) at PPOConfig's
defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, trl_doctor_exe, with_net_audit

pytestmark = [pytest.mark.slow, pytest.mark.trl_pair]


def _new_enough() -> bool:
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("trl")) >= Version("0.20")


def _tensorboard() -> bool:
    from importlib.util import find_spec

    return find_spec("tensorboard") is not None


needs = pytest.mark.skipif(not (_new_enough() and _tensorboard()), reason="the runs use the GRPO-style trainers of "
                           "trl >= 0.20 and write TensorBoard events (tensorboard installed)")


def defaults(kind: str = "grpo") -> dict:
    """The config class's own logging and saving settings (whatever this release has)."""
    from trl import GRPOConfig, RLOOConfig

    fields = (GRPOConfig if kind == "grpo" else RLOOConfig).__dataclass_fields__
    return {k: fields[k].default for k in ("logging_steps", "save_strategy", "save_steps")}


def trackers(every: bool = True) -> list[str]:
    """The trackers the job reports to: TensorBoard and trackio, and wandb and MLflow (`every`) where they are
    installed (each store's follower is a process of its own: the cases that only repeat another's path to the
    stores leave wandb and MLflow to the cases that read all four)."""
    from importlib.util import find_spec

    wanted = ("trackio", "wandb", "mlflow") if every else ("trackio",)
    return ["tensorboard"] + [t for t in wanted if find_spec(t) is not None]


def stores(tmp_path, report_to: list[str]) -> dict[str, object]:
    """Where each tracker writes (what the watch is pointed at) and the job's environment that says so."""
    where = {"tensorboard": tmp_path / "out", "trackio": tmp_path / "trackio", "wandb": tmp_path / "wb",
             "mlflow": tmp_path / "mlflow.db"}
    env = {"TRL_DOCTOR_REPORT_TO": ",".join(report_to), "TRACKIO_DIR": str(where["trackio"]), "WANDB_MODE": "offline",
           "WANDB_DIR": str(where["wandb"]), "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
           "MLFLOW_TRACKING_URI": f"sqlite:///{where['mlflow']}", "MLFLOW_DISABLE_TELEMETRY": "true"}
    if "wandb" in report_to:
        where["wandb"].mkdir()  # WANDB_DIR must exist; its wandb/ run folders appear when the job starts
    return {t: where[t] for t in report_to}, env


def job(name: str, out, steps: int, env: dict) -> subprocess.Popen:
    full = dict(os.environ)
    full.update(with_net_audit(env))
    return subprocess.Popen([sys.executable, str(FIXTURES / "_watch_runs.py"), "--defaults", name, str(out), str(steps)],
                            env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def followers(where: dict) -> dict[str, subprocess.Popen]:
    """`trl-doctor watch STORE --follow` on each store, started before the job (the stores do not exist yet)."""
    env = dict(os.environ)
    env.update(with_net_audit({}))
    return {t: subprocess.Popen([trl_doctor_exe(), "watch", str(path), "--follow", "--interval", "0.5", "--format",
                                 "json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for t, path in where.items()}


def followed_job(tmp_path, name: str, report_to: list[str],
                 more_env: dict | None = None) -> tuple[dict, str, dict, dict]:
    """A 40-step job reporting to `report_to`, each store followed from before the job: (where each tracker wrote,
    the job's stderr, each follower's (stdout, stderr), each follower's exit status). The job's own first verdict
    came within 20 optimizer steps."""
    where, env = stores(tmp_path, report_to)
    watching = followers(where)
    try:
        proc = job(name, tmp_path / "out", 40, {**env, **(more_env or {})})
        _, said = proc.communicate(timeout=600)
        assert proc.returncode == 0, said[-3000:]
        seen = {t: w.communicate(timeout=180) for t, w in watching.items()}
    finally:
        for w in watching.values():
            w.kill()
    first = re.search(r"trl-doctor watch, step (\d+): TW\d+ [a-z-]+ (warn|fail)", said)
    assert first and int(first.group(1)) <= 20, said[-3000:]  # inside: within 20 optimizer steps of its start
    return where, said, seen, {t: w.returncode for t, w in watching.items()}


@needs
def test_the_defaults_are_what_the_issue_says():
    """GRPOConfig and RLOOConfig log every 10 steps from TRL 0.20 on (trl 0.15's inherit transformers' 500)."""
    for kind in ("grpo", "rloo"):
        assert defaults(kind)["logging_steps"] == 10 and defaults(kind)["save_steps"] == 500


@needs
@pytest.mark.parametrize("name, rule, every", [
    ("zero_advantage", "zero-advantage", True),  # a constant reward from step 1
    ("never_terminating", "never-terminating", True),  # every stop token suppressed
    ("lr_zero", "learning-rate-zero", False),
    ("diverging", None, False),  # learning rate 5: the KL is flagged (a warn) at step 20, the job stopped later
    ("rloo_zero_advantage", "zero-advantage", True),  # RLOO, its constant reward
])
def test_an_induced_failure_is_flagged_by_step_20_inside_the_job_and_from_each_store(tmp_path, name, rule, every):
    """Each store's follower is started first, on a store that does not exist yet; the job then trains with
    DoctorCallback(watch=True), logging to TensorBoard and trackio (and wandb and MLflow: `every`), no checkpoint for
    500 steps. All flag the failure at the second log, step 20; the callback stops the job there."""
    where, said, seen, codes = followed_job(tmp_path, name, trackers(every))
    for tracker, (stdout, stderr) in seen.items():
        outside = re.match(r"step (\d+): TW\d+ [a-z-]+ (warn|fail)", stderr)
        assert outside and int(outside.group(1)) <= 20, (tracker, stderr)  # the first line --follow prints
        report = json.loads(stdout)
        assert report["config"].startswith(str(where[tracker])), (tracker, report["config"])
        if rule is not None:
            assert codes[tracker] == 1, (tracker, stderr)
            assert rule in [r["rule"] for r in report["results"] if r["status"] == "fail"], (tracker, report)
    stopped = json.loads((tmp_path / "out" / "job.json").read_text())
    assert stopped["logging_steps"] == 10 and stopped["save_steps"] == 500
    if rule is None:
        return
    assert stopped["global_step"] <= 20, said[-3000:]  # the callback stopped the job there
    report = json.loads((tmp_path / "out" / "trl-doctor-watch.json").read_text())
    assert rule in [r["rule"] for r in report["results"] if r["status"] == "fail"], said[-3000:]
    assert "trl-doctor watch: stopping the job at step" in said


@needs
@pytest.mark.parametrize("name, every", [("healthy", True), ("rloo_healthy", False)])
def test_a_healthy_run_is_never_flagged_over_200_steps_inside_and_from_each_store(tmp_path, name, every):
    where, env = stores(tmp_path, trackers(every))
    proc = job(name, tmp_path / "out", 200, env)
    _, said = proc.communicate(timeout=900)
    assert proc.returncode == 0, said[-3000:]
    assert json.loads((tmp_path / "out" / "job.json").read_text())["global_step"] == 200
    assert "trl-doctor watch, step" not in said, said[-3000:]  # no verdict changed to warn or fail
    for tracker, path in where.items():
        run = subprocess.run([trl_doctor_exe(), "watch", str(path), "--format", "json"], capture_output=True,
                             text=True, timeout=120)
        report = json.loads(run.stdout)
        flagged = {r["rule"]: r["message"] for r in report["results"] if r["status"] in ("warn", "fail")}
        assert run.returncode == 0 and not flagged, (tracker, flagged)
        assert report["config"].startswith(str(path)), (tracker, report["config"])


# PPO: trl.experimental.ppo of trl 1.12.0 (PPOTrainer's last release), from PyPI, at PPOConfig's own logging and saving
# settings (logging_steps 10, save_steps 500; its PPOTrainer logs every update whatever logging_steps says, and its loop
# ignores should_training_stop: the callback's stop is WatchStopped raised from train()). PPO's metric names are its
# own (objective/scores, val/num_eos_tokens, lr), read from each tracker's store as from the job's callback.
PPO_FAILURES = {"ppo_constant_reward": ("zero-advantage", True), "ppo_never_terminating": ("never-terminating", False),
                "ppo_lr_zero": ("learning-rate-zero", False),
                "ppo_diverging": (None, False)}  # learning rate 5: approxkl 2.6e4 at step 1, a warn (ratio-clipping)


@pytest.fixture(scope="module")
def trl_112():
    from conftest import real_trl

    return {**real_trl("1.12.0"), "OMP_NUM_THREADS": "1"}


needs_tensorboard = pytest.mark.skipif(not _tensorboard(), reason="the jobs write TensorBoard events (tensorboard "
                                       "installed: pip install 'trl-doctor[watch]')")


@needs_tensorboard
@pytest.mark.other_trl
@pytest.mark.parametrize("name", list(PPO_FAILURES))
def test_a_ppo_failure_is_flagged_by_step_20_inside_the_job_and_from_each_store(tmp_path, trl_112, name):
    rule, every = PPO_FAILURES[name]
    where, said, seen, _ = followed_job(tmp_path, name, trackers(every), trl_112)
    stopped = json.loads((tmp_path / "out" / "job.json").read_text())
    assert stopped["logging_steps"] == 10 and stopped["save_steps"] == 500, stopped
    for tracker, (stdout, stderr) in seen.items():
        outside = re.match(r"step (\d+): TW\d+ [a-z-]+ (warn|fail)", stderr)
        assert outside and int(outside.group(1)) <= 20, (tracker, stderr)
        report = json.loads(stdout)
        assert report["trainer"] == "ppo" and report["config"].startswith(str(where[tracker])), (tracker, report)
        if rule is not None:
            assert rule in [r["rule"] for r in report["results"] if r["status"] == "fail"], (tracker, report)
    if rule is not None:
        assert stopped["global_step"] <= 20 and "trl-doctor watch stopped the job at step" in said, said[-3000:]


@needs_tensorboard
@pytest.mark.other_trl
def test_a_healthy_ppo_run_is_never_flagged_over_200_steps_inside_and_from_each_store(tmp_path, trl_112):
    """Its objective/kl, the k1 estimate over a batch of 4, is below 0 in about 4 logs of 10 (kl-blowup once warned at
    step 198 on 3 logs in a row)."""
    where, env = stores(tmp_path, trackers(False))  # TensorBoard and trackio: the failures' cases read all four
    proc = job("ppo_healthy", tmp_path / "out", 200, {**env, **trl_112})
    _, said = proc.communicate(timeout=900)
    assert proc.returncode == 0, said[-3000:]
    assert json.loads((tmp_path / "out" / "job.json").read_text())["global_step"] == 200
    assert "trl-doctor watch, step" not in said, said[-3000:]
    for tracker, path in where.items():
        run = subprocess.run([trl_doctor_exe(), "watch", str(path), "--format", "json"], capture_output=True,
                             text=True, timeout=120)
        report = json.loads(run.stdout)
        flagged = {r["rule"]: r["message"] for r in report["results"] if r["status"] in ("warn", "fail")}
        assert run.returncode == 0 and not flagged and report["trainer"] == "ppo", (tracker, flagged)
        scores = next(r for r in report["results"] if r["rule"] == "zero-advantage")
        assert scores["status"] == "pass" and "(200 logs)" in scores["message"], (tracker, scores)  # the whole run
