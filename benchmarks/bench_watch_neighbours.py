"""trl-doctor's watch against its three PyPI neighbours on the public-log corpus (fixtures/watch/public).

    python benchmarks/bench_watch_neighbours.py                       # print the table
    python benchmarks/bench_watch_neighbours.py --markdown out.md     # and write it as Markdown
    python benchmarks/bench_watch_neighbours.py --json out.json       # every tool's raw findings per case
    python benchmarks/bench_watch_neighbours.py --doc docs/watch.md   # the table in docs/watch.md, as kept there

Tools compared (each judged by the SAME rule, see `score`):

    trl-doctor  `trl-doctor watch LOG --format json` (this repository), run as a subprocess; a result with status
                warn or fail is a flag of its rule's kind.
    rldoctor    0.2.0 (import name `rl_doctor`), `rl-doctor diagnose PATH`: a post-hoc report of nine detectors.
    rlprobe     0.1.0, a flight recorder (`rlprobe.integrations.trl.attach`) + `rlprobe doctor RUN_DIR`.
    rlwatch     0.5.1, a live monitor (`rlwatch.attach(trainer=...)` -> a TRL TrainerCallback) whose alerts land
                in a SQLite file that `rlwatch diagnose` reads back.

The neighbours are NOT installed in the project's dev venv: they run from their own venv (--venv, default
$NEIGH_VENV or /tmp/neigh-venv), made with

    python3 -m venv /tmp/neigh-venv && /tmp/neigh-venv/bin/pip install rldoctor==0.2.0 rlprobe==0.1.0 rlwatch==0.5.1

Each neighbour is fed through a small adapter (NEIGHBOUR_ADAPTER below) that this script writes to a temp dir and
runs with the venv's python, one process per (tool, case). A tool that is not importable there gets the column
"not installed".

Feeding (the most favourable way each tool supports; metric values are never changed):
    every corpus log is read into its rows (one printed/JSON dict per line, or a trainer_state.json's log_history,
    or a JSON list), bare `nan`/`inf` read as floats, as TRL printed them. A row that has no `step` key gets its
    1-based position as the step (the corpus' printed lines carry no step; HF's `on_log` would pass
    state.global_step, which the lines do not record), times the case's `logging_steps` where the case knows the
    job's interval (trl-doctor gets the same interval as a recipe, --config, as its user would give it). Then
    rldoctor  the rows are written as a trainer_state.json ({"log_history": rows}) -- the file its README calls "the
              most widely available real training log" -- and read with `rl_doctor.ingest.load_run` +
              `rl_doctor.diagnosis.diagnose`, which is exactly what `rl-doctor diagnose PATH` does
              (rl_doctor/cli.py: _cmd_diagnose -> load_run -> _run_and_emit -> diagnose). Its alias resolver maps
              TRL's GRPO and PPO keys (rl_doctor/aliases.py).
    rlprobe   each row goes through the tool's own TRL key mapping `rlprobe.integrations.trl._map_logs` (what its
              TrainerCallback.on_log does) into `Recorder.log_step(step, ...)`; the recording is then judged by
              `rlprobe.doctor.diagnose(run_dir)`, the function behind `rlprobe doctor RUN_DIR --json`. The manifest's
              algorithm is the case's `trainer` (attach() derives it from the trainer's class name, GRPOTrainer ->
              "grpo"). `transformers` is stubbed (only `TrainerCallback` is needed to import the integration) when
              it is not installed in the venv.
    rlwatch   each row goes through the tool's own TRL callback (`rlwatch.core._build_trl_callback(monitor)`, its
              `on_log` maps TRL keys with its `metric_map` and calls `RLWatch.log_step`), with
              state.global_step = the row's step, on a monitor built like `rlwatch.attach(framework="manual")` but
              with storage in a temp dir (no alert channel enabled). The alerts are read back from the monitor's
              SQLite `alerts` table, which is what `rlwatch diagnose --format json` reports.

Mapping of each tool's findings to corpus kinds (warn/critical only; INFO/OK/SKIPPED are not flags):
    corpus kinds: zero-advantage, never-terminating, pg-term-gone, no-update, entropy-collapse, kl-blowup,
                  non-finite, grad-spike, lr-zero, reward-hacking (ppo-no-eos -> never-terminating,
                  ppo-negative-kl -> kl-blowup, as tests/test_watch_public.py's RULE does). Anything else is "other".
    trl-doctor  rule slug -> kind by the inverse of tests/test_watch_public.py's RULE (e.g. policy-gradient-gone ->
                pg-term-gone, learning-rate-zero -> lr-zero); any other slug (ratio-clipping, ...) -> other.
    rldoctor    (severity WARNING or CRITICAL; one finding per detector, split into its parts where one detector
                covers several failures, using the detector's own metrics and module thresholds)
                advantage_collapse -> zero-advantage
                entropy_collapse   -> entropy-collapse
                reward_hacking     -> reward-hacking (train reward vs held-out score divergence)
                length_pathology   -> never-terminating when its truncation part fired (median clipped ratio of
                                      the last quarter >= _TRUNC_WARN 5%); reward-hacking when its length-hacking
                                      part fired ("paid by the token"); other otherwise
                kl_drift           -> kl-blowup (KL high/extreme/accelerating); other for "KL pinned near 0"
                gradient_pathology -> non-finite (a logged non-finite grad_norm), no-update (>= 40% exact-zero
                                      grad_norm steps, or norm fell to <= 5% of its start), grad-spike (>= 3 spikes)
                clip_saturation, reward_composition, plateau -> other
    rlprobe     (severity warn or critical)
                KL_BLOWUP -> kl-blowup; ENTROPY_COLLAPSE -> entropy-collapse;
                REWARD_HACK_LENGTH, FORMAT_GAMING -> reward-hacking;
                DEGENERATE_GROUPS, ADV_COLLAPSE, REWARD_STD_DEATH -> zero-advantage (no reward spread -> no gradient);
                TRUNCATION_STARVE -> never-terminating;
                GRAD_PATHOLOGY -> non-finite (nan_count/inf_count evidence) or grad-spike (grad_norm evidence);
                CLIP_SATURATION, VALUE_DIVERGENCE, REPETITION_SPIRAL, REF_POLICY_DRIFT_ASYMMETRY,
                THROUGHPUT_ROT -> other
    rlwatch     (severity warning or critical)
                entropy_collapse -> entropy-collapse; kl_explosion -> kl-blowup; loss_nan -> non-finite;
                gradient_norm_spike -> grad-spike; reward_hacking (variance explosion / bimodal rewards) ->
                reward-hacking; reward_mean_drift upward ("may indicate reward hacking") -> reward-hacking,
                downward ("policy degradation") -> other; advantage_variance -> other

Scoring (identical for every tool, the rule of tests/test_watch_public.py): a case is right when every `expected`
kind is flagged and no flagged kind lies outside expected + acceptable_warnings. "other" is a false alarm on a
healthy case (expected == []) and ignored on a failing one, unless --strict-other (then it is wrong everywhere,
which is what the repository's own test applies to trl-doctor's extra slugs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "fixtures" / "watch" / "public"
TOOLS = ("trl-doctor", "rldoctor", "rlprobe", "rlwatch")
# tests/test_watch_public.py's RULE: corpus kind -> trl-doctor rule slug
RULE = {"zero-advantage": "zero-advantage", "never-terminating": "never-terminating", "pg-term-gone": "policy-gradient-gone",
        "no-update": "no-update", "entropy-collapse": "entropy-collapse", "kl-blowup": "kl-blowup",
        "non-finite": "non-finite", "grad-spike": "grad-spike", "lr-zero": "learning-rate-zero",
        "reward-hacking": "reward-hacking", "ppo-no-eos": "never-terminating", "ppo-negative-kl": "kl-blowup",
        "ratio-clipping": "ratio-clipping", "length-collapse": "length-collapse"}
# the kind each alias stands for when scoring
CANON = {"ppo-no-eos": "never-terminating", "ppo-negative-kl": "kl-blowup"}
SLUG_TO_KIND = {slug: kind for kind, slug in RULE.items() if kind not in CANON}
DEV_PYTHON = Path.home() / ".cache" / "trl-doctor-ci" / "venv-py311" / "bin" / "python"

# Runs inside the neighbours' venv: python adapter.py TOOL INPUT.json OUTPUT.json
# INPUT: {"rows": [[step, {metric: value}], ...], "trainer": "grpo"|"ppo"|..., "meta": {trainer_state scalars}}
# OUTPUT: {"installed": bool, "version": str, "flags": [{"kind", "detector", "severity", "note"}], "error": str}
NEIGHBOUR_ADAPTER = r'''
import json, math, os, sys, types, traceback
from pathlib import Path

tool, src, dst = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
job = json.loads(src.read_text())
rows, trainer, meta = job["rows"], job.get("trainer") or "unknown", job.get("meta") or {}
work = Path(os.getcwd())
out = {"installed": True, "version": "", "flags": [], "error": ""}


def flag(kind, detector, severity, note):
    out["flags"].append({"kind": kind, "detector": detector, "severity": severity, "note": str(note)[:300]})


def stub_transformers():
    """rlprobe's / rlwatch's TRL integrations import transformers.TrainerCallback, which is all they use of it."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        mod = types.ModuleType("transformers")
        class TrainerCallback:  # the HF base class holds no state; its hooks are no-ops
            pass
        mod.TrainerCallback = TrainerCallback
        sys.modules["transformers"] = mod


def run_rldoctor():
    import rl_doctor
    from rl_doctor.detectors.base import Severity
    from rl_doctor.detectors import grad_pathology as gp, length_hacking as lh, kl_drift as kd
    from rl_doctor.diagnosis import diagnose
    from rl_doctor.ingest import load_run
    out["version"] = rl_doctor.__version__
    # the rows as a HuggingFace trainer_state.json; `rl-doctor diagnose PATH` = load_run(PATH) + diagnose(run)
    path = work / "trainer_state.json"
    # (a trainer_state.json input keeps its own top-level scalars, which load_json reads as run config)
    path.write_text(json.dumps({**meta, "log_history": [dict(r, step=s) for s, r in rows]}))
    result = diagnose(load_run(str(path)))
    for f in result.findings:
        if f.severity < Severity.WARNING:
            continue
        sev, m, name = f.severity.name, f.metrics, f.detector
        if name == "advantage_collapse":
            flag("zero-advantage", name, sev, f.summary)
        elif name == "entropy_collapse":
            flag("entropy-collapse", name, sev, f.summary)
        elif name == "reward_hacking":
            flag("reward-hacking", name, sev, f.summary)
        elif name == "length_pathology":
            parts = 0
            if (m.get("truncation_rate") or 0) >= lh._TRUNC_WARN:
                flag("never-terminating", name, sev,
                     f"truncation_rate {m['truncation_rate']:.3g} (median, last quarter)")
                parts += 1
            if "paid by the token" in f.summary:
                flag("reward-hacking", name, sev, "length grew with reward, held-out flat")
                parts += 1
            if not parts:
                flag("other", name, sev, f.summary)
        elif name == "kl_drift":
            if m.get("kl_max", 1.0) <= kd._KL_FLAT and "pinned" in f.summary:
                flag("other", name + ":pinned", sev, f.summary)
            else:
                flag("kl-blowup", name, sev, f.summary)
        elif name == "gradient_pathology":
            parts = 0
            if m.get("n_nonfinite"):
                flag("non-finite", name, sev, f"{m['n_nonfinite']} non-finite grad_norm")
                parts += 1
            zero = m.get("zero_grad_step_frac") or 0.0
            g0, gnow = m.get("grad_initial") or 0.0, m.get("grad_current") or 0.0
            if zero >= gp._ZERO_STEP_WARN or (g0 > 0 and gnow / g0 <= gp._VANISH_RATIO):
                flag("no-update", name, sev, f"zero-grad steps {zero:.0%}, grad {g0:.3g} -> {gnow:.3g}")
                parts += 1
            if (m.get("n_spikes") or 0) >= 3:
                flag("grad-spike", name, sev, f"{m['n_spikes']} spikes")
                parts += 1
            if not parts:
                flag("other", name, sev, f.summary)
        else:  # clip_saturation, reward_composition, plateau, and any detector added later
            flag("other", name, sev, f.summary)


RLPROBE_KIND = {"KL_BLOWUP": "kl-blowup", "ENTROPY_COLLAPSE": "entropy-collapse",
                "REWARD_HACK_LENGTH": "reward-hacking", "FORMAT_GAMING": "reward-hacking",
                "DEGENERATE_GROUPS": "zero-advantage", "ADV_COLLAPSE": "zero-advantage",
                "REWARD_STD_DEATH": "zero-advantage", "TRUNCATION_STARVE": "never-terminating"}


def run_rlprobe():
    import rlprobe
    stub_transformers()
    from rlprobe.integrations.trl import _map_logs  # the TRL callback's logs-dict -> StepRecord mapping
    from rlprobe.recorder import Recorder
    from rlprobe.doctor import diagnose
    out["version"] = rlprobe.__version__
    run_dir = work / "rlprobe-run"
    rec = Recorder(run_dir, algorithm=trainer, run_id="corpus", capture_env=False, install_handlers=False)
    for step, row in rows:
        rec.log_step(int(step), **_map_logs(row))   # = RlprobeCallback.on_log
    rec.close()
    for f in diagnose(run_dir):                     # = `rlprobe doctor RUN_DIR --json`
        if f.severity not in ("warn", "critical"):
            continue
        sid = f.signature_id
        if sid == "GRAD_PATHOLOGY":
            metric = (f.evidence or [{}])[0].get("metric", "")
            kind = "non-finite" if "nan_count" in metric else "grad-spike"
        else:
            kind = RLPROBE_KIND.get(sid, "other")
        flag(kind, sid, f.severity, f.explanation)


RLWATCH_KIND = {"entropy_collapse": "entropy-collapse", "kl_explosion": "kl-blowup", "loss_nan": "non-finite",
                "gradient_norm_spike": "grad-spike", "reward_hacking": "reward-hacking"}


def run_rlwatch():
    import sqlite3
    import importlib.metadata as md
    import rlwatch  # noqa: F401
    stub_transformers()
    from rlwatch.config import RLWatchConfig
    from rlwatch.core import RLWatch, _build_trl_callback
    out["version"] = md.version("rlwatch")
    config = RLWatchConfig(run_id="corpus", framework="manual")   # all alert channels off by default
    config.storage.log_dir = str(work / "rlwatch_logs")
    monitor = RLWatch(config)
    monitor.start()
    callback = _build_trl_callback(monitor)()       # what rlwatch.attach(trainer=trainer) registers
    for step, row in rows:
        callback.on_log(None, types.SimpleNamespace(global_step=int(step)), None, logs=row)
    monitor.stop()
    conn = sqlite3.connect(str(work / "rlwatch_logs" / config.storage.db_name))
    for det, sev, msg, values in conn.execute(
            "SELECT detector, severity, message, metric_values_json FROM alerts WHERE run_id = ? ORDER BY step",
            ("corpus",)):
        if sev not in ("warning", "critical"):
            continue
        if det == "reward_mean_drift":
            direction = (json.loads(values) if isinstance(values, str) else {}).get("direction")
            kind = "reward-hacking" if direction == "up" else "other"
        else:
            kind = RLWATCH_KIND.get(det, "other")
        flag(kind, det, sev, msg)


try:
    {"rldoctor": run_rldoctor, "rlprobe": run_rlprobe, "rlwatch": run_rlwatch}[tool]()
except ImportError as exc:
    out = {"installed": False, "version": "", "flags": [], "error": f"{type(exc).__name__}: {exc}"}
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-1500:]
dst.write_text(json.dumps(out))
'''

_DICT = re.compile(r"\{.*\}")


def _float_marks(value):
    if isinstance(value, str) and value.lower() in ("nan", "-nan", "inf", "-inf", "infinity", "-infinity"):
        return float(value)
    return value


def parse_line(text: str) -> dict | None:
    """One printed (Python repr) or JSON dict, read as trl-doctor reads it (data, never evaluated): bare nan/inf
    become floats."""
    from trl_doctor.watch.history import parse_row

    row = parse_row(text)
    return {k: _float_marks(v) for k, v in row.items()} if row is not None else None


def read_rows(path: Path, meta: dict | None = None) -> list[tuple[float, dict]]:
    """The log's metric rows, in order, each with its step (the row's own `step`, else its 1-based position).
    A trainer_state.json's top-level scalars (global_step, max_steps, logging_steps...) go into `meta`."""
    if path.is_dir():  # a job's TensorBoard run: its scalars by step, as trl-doctor's reader (tensorboard's Event) reads
        from trl_doctor.watch.source import read

        history = read(path)
        if meta is not None:
            meta.update({k: v for k, v in history.args.items() if k in ("max_steps", "logging_steps")})
        return [(log.step, dict(log.values)) for log in history.logs]
    text = path.read_text(errors="replace")
    rows: list[dict] = []
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")) and not stripped.startswith("{'"):
        try:
            payload = json.loads(text)
            if isinstance(payload, dict) and isinstance(payload.get("log_history"), list):
                rows = [r for r in payload["log_history"] if isinstance(r, dict)]
                if meta is not None:
                    meta.update({k: v for k, v in payload.items() if isinstance(v, (int, float, str, bool))})
            elif isinstance(payload, list):
                rows = [r for r in payload if isinstance(r, dict)]
        except ValueError:
            rows = []
    if not rows:
        for line in text.splitlines():
            match = _DICT.search(line)
            if match and (row := parse_line(match.group(0))) is not None:
                rows.append(row)
    out = []
    for i, row in enumerate(rows, 1):
        row = {k: _numeric(v) for k, v in row.items()}  # transformers 5 prints '0.25': the same number, as a float
        step = row.get("step")
        out.append((step if isinstance(step, (int, float)) and not isinstance(step, bool) else i, row))
    return out


def _numeric(value):
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def load_cases(folder: Path) -> list[dict]:
    cases = []
    for path in [folder / "cases.yaml", *sorted(p for p in folder.glob("cases-*.yaml"))]:
        if path.is_file():
            for case in (yaml.safe_load(path.read_text()) or {}).get("cases") or []:
                cases.append({**case, "_from": path.name})
    return cases


def canon(kind: str) -> str:
    return CANON.get(kind, kind)


def score(case: dict, flagged: set[str], strict_other: bool = False,
          deferred: set[str] = frozenset()) -> tuple[bool, list[str], list[str]]:
    """(right, missed kinds, false alarms) -- the same rule for every tool. A kind the excerpt is too short to show
    (`evidence_short_of`: the job had it) is right when flagged, or when the tool says it needs more logs to judge."""
    expected = {canon(k) for k in case.get("expected") or []}
    short = {canon(k) for k in case.get("evidence_short_of") or []}
    allowed = expected | short | {canon(k) for k in case.get("acceptable_warnings") or []}
    missed = sorted((expected - flagged) | (short - flagged - set(deferred)))
    extra = flagged - allowed
    if "other" in extra and expected and not strict_other:
        extra.discard("other")
    return not missed and not extra, missed, sorted(extra)


def run_trl_doctor(log: Path, python: str, root: Path, timeout: int, every: int | None = None) -> dict:
    """`trl-doctor watch LOG --format json` as its user runs it: the console script beside `python` (the dev venv's),
    with the job's logging interval given as a recipe (--config) where the log's lines carry no step."""
    exe = Path(python).with_name("trl-doctor")
    with tempfile.TemporaryDirectory() as tmp:
        recipe = []
        if every:
            (Path(tmp) / "recipe.yaml").write_text(f"logging_steps: {every}\n")
            recipe = ["--config", str(Path(tmp) / "recipe.yaml")]
        proc = subprocess.run([str(exe), "watch", str(log), "--format", "json", *recipe],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {"installed": True, "flags": [], "error": f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"}
    results = report.get("results", [])
    flags = [{"kind": SLUG_TO_KIND.get(r["rule"], "other"), "detector": r["rule"], "severity": r["status"],
              "note": r.get("message", "")[:300]} for r in results if r.get("status") in ("warn", "fail")]
    # a rule that says it cannot judge yet and how much it needs (issue 43 item 3): a deferral, not a pass
    deferred = [SLUG_TO_KIND.get(r["rule"], "other") for r in results
                if r.get("status") == "skip" and "needed" in r.get("message", "")]
    return {"installed": True, "version": "", "flags": flags, "deferred": deferred, "error": ""}


def run_neighbour(tool: str, rows, trainer: str, meta: dict, python: Path, timeout: int) -> dict:
    if not python.is_file():
        return {"installed": False, "flags": [], "error": f"no {python}"}
    with tempfile.TemporaryDirectory() as tmp:
        adapter, src, dst = Path(tmp) / "adapter.py", Path(tmp) / "in.json", Path(tmp) / "out.json"
        adapter.write_text(NEIGHBOUR_ADAPTER)
        src.write_text(json.dumps({"rows": rows, "trainer": trainer, "meta": meta}))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        try:
            proc = subprocess.run([str(python), str(adapter), tool, str(src), str(dst)], capture_output=True,
                                  text=True, timeout=timeout, cwd=tmp, env=env)
        except subprocess.TimeoutExpired:
            return {"installed": True, "flags": [], "error": f"timed out after {timeout}s"}
        if not dst.is_file():
            return {"installed": True, "flags": [], "error": f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"}
        return json.loads(dst.read_text())


def cell(result: dict, verdict: tuple[bool, list[str], list[str]] | None) -> str:
    if not result.get("installed"):
        return "not installed"
    if result.get("error") and not result.get("flags"):
        return "error: " + result["error"].splitlines()[0][:60]
    right, missed, extra = verdict
    kinds = sorted({f["kind"] for f in result["flags"]})
    text = ("✓ " if right else "✗ ") + (", ".join(kinds) if kinds else "—")
    notes = []
    if missed:
        notes.append("missed " + ", ".join(missed))
    if extra:
        notes.append("false " + ", ".join(extra))
    return text + (f" ({'; '.join(notes)})" if notes else "")


def neighbour_versions(python: Path, tools) -> dict[str, str]:
    """Each neighbour's installed version, as its venv's pip metadata says."""
    names = [t for t in tools if t != "trl-doctor"]
    if not python.is_file() or not names:
        return {}
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: out[n] = 'not installed'\n"
            "print(json.dumps(out))")
    proc = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, timeout=60)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {}


def md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=os.environ.get("NEIGH_VENV", "/tmp/neigh-venv"),
                    help="venv holding rldoctor, rlprobe, rlwatch (default $NEIGH_VENV or /tmp/neigh-venv)")
    ap.add_argument("--python", default=str(DEV_PYTHON if DEV_PYTHON.is_file() else sys.executable),
                    help="python of the venv that has trl-doctor's dependencies (default: the dev venv)")
    ap.add_argument("--cases-dir", default=str(PUBLIC))
    ap.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    ap.add_argument("--doc", metavar="PATH", help="write the table into PATH's <!-- neighbours:begin/end --> block")
    ap.add_argument("--json", metavar="PATH", help="also write every tool's findings per case as JSON")
    ap.add_argument("--strict-other", action="store_true",
                    help="count a flag of no corpus kind as wrong on failing cases too (default: healthy cases only)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of " + ",".join(TOOLS))
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each flag's detector and message")
    args = ap.parse_args(argv)

    tools = [t for t in args.tools.split(",") if t in TOOLS]
    folder = Path(args.cases_dir)
    vpy = Path(args.venv) / "bin" / "python"
    cases = load_cases(folder)
    table, dump = [], []
    totals = {t: 0 for t in tools}
    for case in cases:
        log = folder / case["file"]
        meta: dict = {}
        rows = read_rows(log, meta)
        every = case.get("logging_steps")
        if every:  # lines without a step: every tool gets the job's interval (trl-doctor as --config, the rest as steps)
            rows = [(i * every, row) for i, (_, row) in enumerate(rows, 1)]
            meta.setdefault("logging_steps", every)
        results = {}
        for tool in tools:
            if tool == "trl-doctor":
                res = run_trl_doctor(log, args.python, ROOT, args.timeout, every)
            else:
                res = run_neighbour(tool, rows, str(case.get("trainer") or "unknown"), meta, vpy, args.timeout)
            verdict = None
            if res.get("installed") and not (res.get("error") and not res.get("flags")):
                verdict = score(case, {f["kind"] for f in res["flags"]}, args.strict_other, set(res.get("deferred", ())))
                totals[tool] += verdict[0]
            results[tool] = (res, verdict)
            if args.verbose:
                for f in res.get("flags", []):
                    print(f"  [{case['file']}] {tool}: {f['kind']} <- {f['detector']} ({f['severity']}): "
                          f"{f['note'][:160]}", file=sys.stderr)
                if res.get("error"):
                    print(f"  [{case['file']}] {tool}: ERROR {res['error']}", file=sys.stderr)
        expected = ", ".join(case.get("expected") or []) or "— (healthy / false alarm)"
        if case.get("evidence_short_of"):
            expected = f"{', '.join(case['evidence_short_of'])} (too short to show: flag or defer)"
        if case.get("acceptable_warnings"):
            expected += f" [ok: {', '.join(case['acceptable_warnings'])}]"
        table.append([case["file"], str(len(rows)), expected] + [cell(*results[t]) for t in tools])
        dump.append({"file": case["file"], "from": case["_from"], "rows": len(rows),
                     "expected": case.get("expected") or [],
                     "acceptable_warnings": case.get("acceptable_warnings") or [],
                     "results": {t: {**results[t][0], "right": bool(results[t][1] and results[t][1][0])}
                                 for t in tools}})
    header = ["case (log file)", "rows", "expected"] + list(tools)
    installed = {t: any(d["results"][t].get("installed") for d in dump) for t in tools}
    table.append(["**runs right**", "", f"of {len(cases)}"] +
                 [f"{totals[t]}/{len(cases)}" if installed[t] else "not installed" for t in tools])

    for row in table:
        print(" | ".join(row))
    if args.markdown or args.doc:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in table]
        versions = ", ".join(f"{t} {v}" for t, v in neighbour_versions(vpy, tools).items())
        legend = ("\n✓ = every expected kind flagged and nothing flagged outside expected + acceptable_warnings "
                  "(\"other\" = a finding of no corpus kind; a false alarm on healthy cases"
                  + (" and everywhere" if args.strict_other else "") + "). "
                  f"Generated by `python benchmarks/bench_watch_neighbours.py --doc docs/watch.md` ({versions}).\n")
        text = "\n".join(lines) + "\n" + legend
        if args.markdown:
            Path(args.markdown).write_text(text)
            print(f"wrote {args.markdown}", file=sys.stderr)
        if args.doc:
            doc = Path(args.doc).read_text()
            begin, end = "<!-- neighbours:begin -->\n", "<!-- neighbours:end -->"
            if begin not in doc or end not in doc:
                raise SystemExit(f"{args.doc}: no {begin.strip()} ... {end} block to write the table into")
            head, rest = doc.split(begin, 1)
            Path(args.doc).write_text(head + begin + text + rest[rest.index(end):])
            print(f"wrote the table into {args.doc}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
