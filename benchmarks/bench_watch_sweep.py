"""The watch on one public sweep it was not developed on: 27 GRPO runs of Sunshine535/nips-grpo-dynamics @ cbe351c
(results/logs/exp1a/rho*_seed*.log: Qwen2.5-7B-Instruct + LoRA on GSM8K, nine rho values x three seeds, 200 steps,
logging_steps 5), each judged by its author's own eval of the trained model (results/logs/evals/eval_rho*_seed*.log,
"gsm8k_accuracy").

    git clone https://github.com/Sunshine535/nips-grpo-dynamics /tmp/nips-grpo-dynamics
    python benchmarks/bench_watch_sweep.py /tmp/nips-grpo-dynamics [--trl-doctor EXE]

Labels, fixed before any run is read: eval accuracy >= 0.5 healthy, < 0.1 failed, between: not scored. A healthy run
is right when the watch neither warns nor fails, except a warn that names a saturation ("saturated": issue 61's
"saturation at most a warn that names it"); a failed run is right when the watch warns or fails on anything. Each
log is read as its user would point the watch at it: the whole stdout file with `--config` giving logging_steps 5.
Run from outside the repository when EXE is another checkout's (`python -m trl_doctor` puts the working folder first
on sys.path)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

COMMIT = "cbe351c88454653d9dae581a278dd352b2f659b0"
RHOS = ("0.10", "0.30", "0.50", "0.70", "1.00", "1.50", "2.00", "3.00", "5.00")


def show(repo: Path, path: str) -> bytes:
    """A file at COMMIT, byte for byte (tqdm's carriage returns kept)."""
    return subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{path}"], capture_output=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of Sunshine535/nips-grpo-dynamics holding commit " + COMMIT)
    parser.add_argument("--trl-doctor", default="trl-doctor", help="the trl-doctor to run (default: the one on PATH)")
    args = parser.parse_args(argv)
    right = scored = 0
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "recipe.yaml"
        recipe.write_text("logging_steps: 5\n")
        for seed in (42, 43, 44):
            for rho in RHOS:
                name = f"rho{rho}_seed{seed}"
                accuracy = float(re.findall(r'"gsm8k_accuracy":\s*([0-9.]+)',
                                            show(args.repo, f"results/logs/evals/eval_{name}.log").decode())[-1])
                log = Path(tmp) / f"{name}.log"
                log.write_bytes(show(args.repo, f"results/logs/exp1a/{name}.log"))
                proc = subprocess.run([args.trl_doctor, "watch", str(log), "--config", str(recipe), "--format", "json"],
                                      capture_output=True, text=True, cwd=tmp)
                results = json.loads(proc.stdout)["results"]
                flags = [(r["rule"], r["status"], "saturated" in r.get("message", "")) for r in results
                         if r["status"] in ("warn", "fail")]
                label = "healthy" if accuracy >= 0.5 else "failed" if accuracy < 0.1 else "between"
                ok = None
                if label == "healthy":
                    ok = not [f for f in flags if not (f[1] == "warn" and f[2])]
                elif label == "failed":
                    ok = bool(flags)
                scored += ok is not None
                right += bool(ok)
                said = ", ".join(f"{rule} {status}" + (" (saturated)" if saturated else "")
                                 for rule, status, saturated in flags) or "-"
                print(f"{name:16} eval {accuracy:<6} {label:8} {'right' if ok else 'WRONG' if ok is False else '':6} {said}")
    print(f"right: {right} of {scored}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
