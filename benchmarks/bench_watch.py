"""What the watch costs (issues 33, 43): `trl-doctor watch` on a 20,000-step trainer_state.json and on the TensorBoard
event file of the same 20,000 logs (target: <= 1 s each), the callback's judging per log as the history grows, and its
share of a real GRPO job's time (target: <= 1% a step).

    python benchmarks/bench_watch.py            # all three
    python benchmarks/bench_watch.py --no-job   # without the real GRPO run (no TRL training)

The 20,000 rows are the real healthy GRPO run's rows (fixtures/zero-advantage/ok_grpo_healthy.json) repeated with
noise, every metric TRL 1.16 logs in each: what a job logging every step for 20,000 steps leaves."""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = ROOT / "fixtures" / "zero-advantage" / "ok_grpo_healthy.json"


def big_state(path: Path, steps: int = 20_000) -> int:
    rows = [r for r in json.loads(HEALTHY.read_text())["log_history"] if "loss" in r]
    rng = random.Random(0)
    history = []
    for i in range(steps):
        row = {k: (v * (0.9 + 0.2 * rng.random()) if isinstance(v, float) else v) for k, v in rows[i % len(rows)].items()}
        row["step"] = i + 1
        history.append(row)
    path.write_text(json.dumps({"log_history": history, "max_steps": steps, "logging_steps": 1}, indent=2))
    return path.stat().st_size


def big_events(folder: Path, steps: int = 20_000) -> Path:
    """The same rows as TensorBoard's writer stores them for a job (`train/<metric>` scalars at each step, as
    transformers' TensorBoardCallback adds them), through torch's SummaryWriter."""
    from torch.utils.tensorboard import SummaryWriter

    rows = [r for r in json.loads(HEALTHY.read_text())["log_history"] if "loss" in r]
    rng = random.Random(0)
    writer = SummaryWriter(str(folder / "runs" / "bench"))
    for i in range(steps):
        for k, v in rows[i % len(rows)].items():
            if k != "step" and isinstance(v, (int, float)):
                writer.add_scalar(f"train/{k}", v * (0.9 + 0.2 * rng.random()), i + 1)
    writer.close()
    return next((folder / "runs" / "bench").glob("events.out.tfevents.*"))


def cli_seconds(path: Path, fmt: str, runs: int = 5) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (user + sys of the child) of `trl-doctor watch PATH --format FMT`, each run fresh."""
    exe = Path(sys.executable).with_name("trl-doctor")
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([str(exe), "watch", str(path), "--format", fmt], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert proc.returncode in (0, 1), proc.stderr
    return walls, cpus


def byte_compile() -> None:
    """trl-doctor's modules byte-compiled first, as `pip install` leaves a wheel's (an editable install under
    PYTHONDONTWRITEBYTECODE=1 would compile them in every run)."""
    import compileall

    for folder in ("trl_doctor", "rules"):
        compileall.compile_dir(str(ROOT / folder), quiet=1)


def per_log_ms(sizes=(100, 1_000, 10_000, 20_000)) -> dict[int, float]:
    """The callback's judging of one log, after `n` logs (the main process's on_log, no process group)."""
    from types import SimpleNamespace as NS

    from trl_doctor.watch.job import Watcher

    rows = [r for r in json.loads(HEALTHY.read_text())["log_history"] if "loss" in r]
    watcher = Watcher()
    args = NS(output_dir=tempfile.mkdtemp(), beta=0.04, max_completion_length=12, fp16=False, bf16=False)
    watcher.begin(args, None)
    state, control = NS(global_step=0, is_world_process_zero=True), NS(should_save=False, should_training_stop=False)
    out, n = {}, 0
    for size in sizes:
        while n < size:  # the history a job has logged by then (judged as it grew; not timed here)
            n += 1
            watcher.history.add(dict(rows[n % len(rows)]), step=n)
        samples = []
        for _ in range(5):
            n += 1
            state.global_step = n
            start = time.perf_counter()
            watcher.on_log(args, state, control, dict(rows[n % len(rows)]))
            samples.append(time.perf_counter() - start)
        out[size] = statistics.median(samples) * 1000
    return out


def job_share(steps: int = 12) -> tuple[float, float]:
    """A real GRPO run on the CPU (fixtures/_watch_runs.py, healthy) with the watch: the seconds the callback spent
    judging, and the run's training seconds."""
    sys.path.insert(0, str(ROOT / "fixtures"))
    import _watch_runs

    from trl_doctor import DoctorCallback

    callback = DoctorCallback(preflight=False, watch=True)
    with tempfile.TemporaryDirectory() as out:
        trainer = _watch_runs.trainer("healthy", out, steps, callbacks=[callback])
        start = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - start
    return callback.watcher.seconds, total


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trainer_state.json"
        size = big_state(path)
        byte_compile()
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before the runs")
        for fmt in ("json", "table"):
            walls, cpus = cli_seconds(path, fmt)
            print(f"trl-doctor watch --format {fmt}, 20,000-step trainer_state.json ({size / 1e6:.1f} MB): median "
                  f"{statistics.median(walls):.2f} s wall (best {min(walls):.2f}), {statistics.median(cpus):.2f} s CPU, "
                  f"over {len(walls)} runs (target <= 1 s)")
        if "--no-tensorboard" not in sys.argv:
            events = big_events(Path(tmp))
            walls, cpus = cli_seconds(events, "json")
            print(f"trl-doctor watch --format json, the same 20,000 logs as a TensorBoard event file "
                  f"({events.stat().st_size / 1e6:.1f} MB): median {statistics.median(walls):.2f} s wall (best "
                  f"{min(walls):.2f}), {statistics.median(cpus):.2f} s CPU, over {len(walls)} runs (target <= 1 s)")
    for n, ms in per_log_ms().items():
        print(f"callback: judging one log after {n:>6,} logs: {ms:.2f} ms")
    if "--no-job" not in sys.argv:
        judging, total = job_share()
        print(f"callback in a real GRPO run on the CPU (12 steps): {judging:.3f} s judging of {total:.1f} s, "
              f"{100 * judging / total:.2f}% (target <= 1%)")


if __name__ == "__main__":
    main()
