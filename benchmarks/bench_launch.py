"""What `trl-doctor check -- python train.py ...` costs beside running the same script until it builds its trainer
(issue 11's figures), and what DoctorCallback costs at on_train_begin.

    python benchmarks/bench_launch.py [--repeat N]

The script is fixtures/launch/grpo_system_prompt.py with its recipe (TRL's parser, a dataset map, a model, two
reward functions). Figures, each the median of N runs interleaved so a busy machine weighs on all alike:

- (base) the script with the hooks only: a fresh `python` that imports trl_doctor's capture, runs the script
  until it constructs GRPOTrainer (models on the meta device) and exits: what the user's own script costs to
  reach its trainer, imports included;
- (a) `trl-doctor check --no-smoke -- python grpo_system_prompt.py --config ...`: the capture, the static
  rules and the probes (logits contract, termination); its overhead over (base) is what the rules add;
- (b) the same with the smoke step;
- (cb) DoctorCallback(smoke=False) at on_train_begin inside a real job (fixtures/launch/grpo_with_callback.py
  prints it): the target is under 2 s.

Each command runs through the installed console script in a fresh process, as a user meets it. The per-rule
durations of (a) come from its JSON report, to show where the overhead goes. A measurement: it exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "fixtures" / "launch"
SCRIPT = ["python", "grpo_system_prompt.py", "--config", "grpo_system_prompt.yaml"]
BASE = f"""
import sys, time
from trl_doctor.runtime.quiet import quiet_environment
quiet_environment()
from trl_doctor.capture.command import parse_command
from trl_doctor.capture.run import capture
cmd = parse_command({tuple(SCRIPT)!r})
captured = capture(cmd, timeout=300, load_weights=False, has_cuda=False, trust_remote_code=False)
assert captured.recorder.trainer_cls is not None
"""


def env() -> dict:
    e = dict(os.environ, TRL_DOCTOR_STREAM="0", TRL_DOCTOR_PROGRESS="0", HF_HUB_OFFLINE="1")
    e.pop("TRL_DOCTOR_FORKSERVER", None)
    return e


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=LAUNCH, env=env(), capture_output=True, text=True)
    return time.perf_counter() - start, proc


def doctor() -> str:
    exe = Path(sys.executable).with_name("trl-doctor")
    return str(exe) if exe.exists() else "trl-doctor"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    subprocess.run([sys.executable, str(ROOT / "fixtures" / "build.py")], check=True, capture_output=True)
    runs: dict[str, list[float]] = {"base": [], "a": [], "b": [], "cb": []}
    durations: dict[str, float] = {}
    for _ in range(args.repeat):
        t, p = timed([sys.executable, "-c", BASE])
        assert p.returncode == 0, p.stderr
        runs["base"].append(t)
        t, p = timed([doctor(), "check", "--no-smoke", "--format", "json", "--", *SCRIPT])
        assert p.returncode in (0, 1), p.stderr
        runs["a"].append(t)
        durations = {r["id"] + " " + r["rule"]: r["duration_s"] for r in json.loads(p.stdout)["results"]}
        t, p = timed([doctor(), "check", "--format", "json", "--", *SCRIPT])
        assert p.returncode in (0, 1), p.stderr
        runs["b"].append(t)
        _, p = timed([sys.executable, "grpo_with_callback.py"])
        found = re.search(r"the check at on_train_begin ([\d.]+)s", p.stdout)
        assert found, p.stdout + p.stderr
        runs["cb"].append(float(found.group(1)))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, median of {args.repeat}")
    print(f"(base) script with hooks only, to its trainer: {med['base']:.2f}s")
    static = sum(v for k, v in durations.items() if k.split()[1] not in ("logits-contract", "eos-termination", "smoke-step"))
    probes = sum(v for k, v in durations.items() if k.split()[1] in ("logits-contract", "eos-termination"))
    print(f"(a) check --no-smoke -- python ...:          {med['a']:.2f}s = {med['a'] / med['base']:.2f}x base "
          f"(rules inside: static {static:.2f}s, probes {probes:.2f}s)")
    print(f"(b) check -- python ... (smoke step):        {med['b']:.2f}s = {med['b'] / med['base']:.2f}x base "
          f"(smoke step adds {med['b'] - med['a']:.2f}s)")
    print(f"    (a) beyond base + its rules: {med['a'] - med['base'] - static - probes:+.2f}s")
    print(f"(cb) DoctorCallback(smoke=False) at on_train_begin: {med['cb']:.2f}s (target < 2 s)")
    print("per-rule durations of (a), last run:")
    for k, v in sorted(durations.items(), key=lambda kv: -kv[1]):
        print(f"    {k:32s} {v:6.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
