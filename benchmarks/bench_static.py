"""What `trl-doctor check --static` costs: the wall time of one config, in a fresh process each run, beside the
target (0.3 s on an idle machine: issue 32; it was 0.5 s), and what the command line's own import costs (`python -X importtime -c "import trl_doctor.front.cli"`); the CPU time beside the wall time, since a busy machine
stretches the wall time.

    python benchmarks/bench_static.py [--repeat N] [--config FILE] [--no-stack]

Every run is the installed console script, as pre-commit runs it. With --no-stack the runs see torch,
transformers, TRL, datasets, accelerate and peft as unimportable (a PYTHONPATH folder whose modules raise
ImportError), as in pre-commit's own hook environment. The first run is a warm-up that writes the bytecode caches, as
pip's install does for an installed package: into a temporary PYTHONPYCACHEPREFIX, even where the machine sets
PYTHONDONTWRITEBYTECODE=1 (this one does), so the tree is not written; --compile-each-run measures every run
compiling its modules again.
A measurement, not a test: it exits 0 whatever the figures (1 only when the check itself does not run).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "fixtures" / "smoke-step" / "ok_grpo_qwen2.yaml"
TARGET_S = 0.3
STACK = ("torch", "transformers", "trl", "datasets", "accelerate", "peft")


def _exe() -> str:
    exe = Path(sys.executable).with_name("trl-doctor")
    return str(exe) if exe.exists() else "trl-doctor"


def _env(no_stack: bool, folder: str) -> dict:
    env = dict(os.environ)
    if no_stack:
        for name in STACK:
            Path(folder, f"{name}.py").write_text(f"raise ImportError('{name}: not in this environment')\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH")) if p)
    return env


def _import_ms(env: dict) -> tuple[float, list[tuple[int, str]]]:
    """(the cumulative import time of trl_doctor.front.cli in ms, the five slowest top-level imports under it)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import trl_doctor.front.cli"], env=env,
                         capture_output=True, text=True).stderr
    rows = [(int(m.group(2)), m.group(3)) for m in re.finditer(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*\S+)", out)]
    total = next((us for us, name in rows if name.strip() == "trl_doctor.front.cli"), 0)
    top = sorted(((us, name.strip()) for us, name in rows if name.startswith("  ") and not name.startswith("   ")),
                 reverse=True)[:5]
    return total / 1000, top


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--no-stack", action="store_true", help="torch, transformers, TRL, ... unimportable")
    ap.add_argument("--compile-each-run", action="store_true", help="no bytecode caches: every run compiles")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        env = _env(args.no_stack, folder)
        if not args.compile_each_run:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(folder, "pycache"))
        cmd = [_exe(), "check", "--static", args.config]
        first = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if first.returncode not in (0, 1):
            print(f"the check did not run (exit {first.returncode}): {first.stderr.strip()}", file=sys.stderr)
            return 1
        times, cpu = [], []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        cli_ms, top = _import_ms(env)
    median = statistics.median(times)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"config: {args.config}")
    print(f"machine: {os.cpu_count()} cores, load average {load:.2f}; bytecode caches "
          f"{'off: every run compiles' if args.compile_each_run else 'written by the warm-up run, as an install does'}; "
          f"ML stack {'unimportable' if args.no_stack else 'installed (not imported)'}")
    print(f"check --static, fresh process, median of {args.repeat}: {median:.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f})   target <= {TARGET_S:.2g} s: "
          f"{'met' if median <= TARGET_S else 'NOT met'}")
    print(f"CPU time (user + sys), median: {statistics.median(cpu):.3f} s: on a busy machine (load above the core "
          "count) the wall time waits for a core, the CPU time much less")
    print(f"import trl_doctor.front.cli (python -X importtime): {cli_ms:.1f} ms; slowest under it: "
          + ", ".join(f"{name} {us / 1000:.1f} ms" for us, name in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
