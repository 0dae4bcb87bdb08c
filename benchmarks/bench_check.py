"""Wall-clock figures for the commands a user runs, on the built fixtures. Prints a table; asserts nothing.

    python benchmarks/bench_check.py [--repeat N]

Measured through the installed console script, in fresh processes, as a user meets them: `--help` and
`rules` (must stay instant: no torch, transformers or trl import), a static check without the smoke step,
and the full check with the GRPO smoke step on the miniature twin (with the child's own import and step times).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))


def exe() -> str:
    path = Path(sys.executable).with_name("trl-doctor")
    return str(path) if path.exists() else "trl-doctor"


def timed(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([exe(), *args], capture_output=True, text=True)
    return time.perf_counter() - start, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    import build

    build.build()
    cfg = str(ROOT / "fixtures" / "smoke-step" / "ok_grpo_qwen2.yaml")
    cases = [
        ("trl-doctor --help", ["--help"]),
        ("trl-doctor rules", ["rules"]),
        ("check --no-smoke (static rules)", ["check", cfg, "--no-smoke", "--format", "json"]),
        ("check (with GRPO smoke step)", ["check", cfg, "--format", "json"]),
    ]
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; repeat {opts.repeat}")
    print(f"{'command':40} {'min s':>8} {'median s':>9}")
    smoke_details = []
    last_report = None
    for label, args in cases:
        times = []
        for _ in range(opts.repeat):
            t, out = timed(args)
            times.append(t)
            if "--format" in args and "smoke" in label and "no-smoke" not in label:
                report = json.loads(out)
                last_report = report
                smoke_details.append(next(r for r in report["results"] if r["rule"] == "smoke-step")["details"])
        print(f"{label:40} {min(times):8.2f} {statistics.median(times):9.2f}")
    if smoke_details:
        d = smoke_details[-1]
        print(f"smoke step child: imports {d['import_s']} s (overlapping the parent's rules), "
              f"step {d['step_s']} s, wait after the spec {d['wall_s']} s, peak host {d['peak host MB']} MB, model: {d['model']}")
    if last_report:
        print("\nper rule in the full check (duration_s; the trainer-run rules share one child process):")
        for r in last_report["results"]:
            print(f"  {r['id']} {r['rule']:26} {r['status']:5} {r['duration_s']:.3f}")
    print("\nsmoke step alone per healthy fixture (--select smoke-step):")
    for path in sorted((ROOT / "fixtures" / "smoke-step").glob("ok_*.yaml")):
        t, out = timed(["check", str(path), "--select", "smoke-step", "--format", "json"])
        r = json.loads(out)["results"][0]
        d = r["details"]
        extra = f"step {d['step_s']} s, imports {d['import_s']} s, {d.get('trainer')}" if r["status"] == "pass" else r["message"][:90]
        print(f"  {path.name:28} {r['status']:5} wall {t:6.2f} s  {extra}")


if __name__ == "__main__":
    main()
