"""The accuracy harness (issue 30): trl-doctor against TRL itself, case by case.

For every case of tools/accuracy/cases.yaml (and every corpus case, corpus/*/case.yaml) whose `requires` the
installed releases meet:

1. the ground truth: the command run for real for one optimizer step on the CPU (tools/accuracy/truth.py, which
   changes only what a CPU needs and says what): it trains (exit 0), or it crashes with an error at a line;
2. the doctor: `trl-doctor check --format json -- COMMAND`, the command unchanged;
3. the comparison: right; a false alarm (a `fail`, an `error` or exit 2 where TRL trains); a wrong cause (exit 2 whose
   line is not TRL's error); a miss (TRL crashes, the doctor passes). A rule `error` is counted on its own too.

`python tools/accuracy/run.py [--write docs/accuracy.md] [--only NAME...] [--record]` prints the table and writes it.

The ground truth is TRL's behaviour, not the doctor's: for a case whose inputs and releases are unchanged it is the
same every run, and one CPU step of a real recipe takes minutes (cookbook_grpo_lora's: 16 accumulated micro-batches,
four to seven minutes on two cores). `--record` keeps each ground truth it runs in tools/accuracy/truths.json under a key: the
case's entry, the contents of every file it reads from this repository (its command's files and folders, its corpus
folder, the data, the ground truth's own code and the builders of the models it loads) and the releases installed
(Python, torch, transformers, TRL and the rest of the stack, and what the case requires). A run whose key matches a
record takes the truth from it and says so; any change to any of those inputs, or another release, runs TRL again
(TRL_DOCTOR_ACCURACY_LIVE=1 always does). The doctor's side is run every time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
STANDIN = ROOT / "fixtures" / "models" / "qwen2-chat"
TIMEOUT = 600
LIVE_ENV = "TRL_DOCTOR_ACCURACY_LIVE"  # set: every ground truth is run, none read from the record
REPORTS_ENV = "TRL_DOCTOR_ACCURACY_REPORTS"  # a folder: each doctor run of a case kept for whoever asks again
TRL_REPO_ENV = "TRL_DOCTOR_TRL_REPO"  # a TRL git repository (a clone, or `fetch`'s bare copy) for the examples' cases


@dataclass
class Case:
    name: str
    source: str
    command: list[str]
    cwd: Path
    requires: dict
    options: tuple[str, ...] = ()  # trl-doctor's own options (a corpus case's --target)
    hub: dict | None = None  # the stand-in Hugging Face cache's environment (tools/accuracy/hub.py), for hub ids
    trl_repo: str | None = None  # a TRL git ref whose examples/ the case runs from (TRL_REPO_ENV names the repository)
    notebook: str | None = None  # a notebook of that ref run as a script: its code cells (ensure_trl_repo writes it)
    imports: tuple[str, ...] = ()  # modules the case's script needs importable (torchvision for a VLM's processor)
    entry: dict | None = None  # the case's own entry (cases.yaml's, or the corpus case.yaml's), for the record's key


# what a rule's fail may be about when the CPU run had to change it: a launch-machine finding, not a false alarm
EXCUSED = {"precision-and-attention": {"attn_implementation", "bf16", "fp16", "tf32"},
           "distributed-setup": {"deepspeed", "launcher"}, "gpu-capacity": {"use_cpu"},
           "vllm-server": {"use_vllm"}, "vllm-weights": {"use_vllm"}, "vllm-tokenizer-drift": {"use_vllm"},
           # the trackers' and the hub's credentials: the CPU run turns both off, so it cannot see them fail
           "run-phases": {"push_to_hub", "report_to"}}


@dataclass
class Outcome:
    case: Case
    release: str
    truth: str  # "trains" or "crashes: Type: message (at file:line)"
    truth_error: str | None
    doctor: str  # "exit 0", "exit 1: rule fail, ...", "exit 2: line"
    verdict: str  # right / false alarm / wrong cause / miss
    rule_errors: list[str]
    seconds: float
    changed: set = frozenset()  # what the CPU run changed
    recorded: str | None = None  # the date of the recorded ground truth read (tools/accuracy/truths.json); None: run


def unmet(requires: dict) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    for package, spec in (requires or {}).items():
        try:
            have = version(package)
        except PackageNotFoundError:
            have = None
        if spec == "absent":
            if have is not None:
                return f"{package} {have} is installed"
            continue
        if have is None or not SpecifierSet(str(spec)).contains(Version(have), prereleases=True):
            return f"{package} {have} is outside {spec}"
    return None


def load_cases(out: Path) -> list[Case]:
    cases = []
    for entry in yaml.safe_load((HERE / "cases.yaml").read_text()):
        command = [_fill(a, out) for a in entry["command"]]
        ref = entry.get("trl_repo")
        cwd = out / "trl-repo" / ref if ref else ROOT / entry.get("cwd", ".")
        cases.append(Case(entry["name"], entry["source"], command, cwd, entry.get("requires") or {},
                          tuple(str(o) for o in entry.get("options") or ()),
                          hub=_hub(out) if entry.get("hub") else None, trl_repo=ref, notebook=entry.get("notebook"),
                          imports=tuple(entry.get("imports") or ()), entry=entry))
    cases.extend(corpus_case(path.parent) for path in sorted((ROOT / "corpus").glob("*/case.yaml")))
    return cases


def corpus_case(folder: Path) -> Case:
    """The corpus case in `folder` (its case.yaml), as the harness and tests/test_corpus.py run it."""
    entry = yaml.safe_load((folder / "case.yaml").read_text())
    source = entry.get("source") or {}
    cited = (f"{source.get('repo', '')} {source.get('path', '')} @ {source.get('commit', '')}".strip()
             if isinstance(source, dict) else " ".join(str(source).split())[:200])
    return Case(f"corpus/{folder.name}", cited, [str(a) for a in entry["command"]], folder / entry.get("cwd", "."),
                entry.get("requires") or {}, tuple(str(o) for o in entry.get("options") or ()), entry=entry)


def _hub(out: Path) -> dict:
    """The environment of the stand-in hub cache under `out` (built on first use: `ensure_hub`)."""
    return {"HF_HOME": str(out / "hf"), "HF_HUB_CACHE": str(out / "hf" / "hub"),
            "HF_DATASETS_CACHE": str(out / "hf" / "datasets")}


def repo_missing(case: Case) -> str | None:
    """Why a case that runs TRL's examples cannot run here: they are read from a TRL git repository (TRL_REPO_ENV), not
    vendored into this one."""
    if not case.trl_repo:
        return None
    git_dir = os.environ.get(TRL_REPO_ENV)
    if not git_dir:
        return f"runs TRL's examples at {case.trl_repo}: set {TRL_REPO_ENV} to a TRL git repository"
    probe = subprocess.run(["git", "--git-dir", git_dir, "cat-file", "-e", f"{case.trl_repo}^{{commit}}"],
                           capture_output=True)
    return None if probe.returncode == 0 else f"{TRL_REPO_ENV}={git_dir} has no {case.trl_repo}"


_IMPORTABLE: dict[str, str | None] = {}


def import_missing(case: Case) -> str | None:
    """Why a case whose script needs a module cannot run here: the module does not import in this interpreter. An
    installed distribution is not enough: PyPI's torchvision 0.28.0 is a CUDA build whose `import torchvision` fails
    against a CPU torch ("operator torchvision::nms does not exist"), and a VLM's processor (Qwen2-VL's video
    processor) needs it to load at all, so TRL's own run cannot be the ground truth there. Probed in a process of its
    own: importing it here would load torch into the harness."""
    for module in case.imports:
        if module not in _IMPORTABLE:
            probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            _IMPORTABLE[module] = None if probe.returncode == 0 else last
        if _IMPORTABLE[module] is not None:
            return f"needs `import {module}` (a VLM processor loads it), which fails here: {_IMPORTABLE[module]}"
    return None


def ensure_trl_repo(case: Case) -> None:
    """TRL's examples/ (and trl/scripts/) at the case's ref, where the case runs (`git archive`, nothing else of the
    repository), and the case's notebook as a script beside it."""
    if not case.trl_repo:
        return
    if not (case.cwd / "examples").exists():
        case.cwd.mkdir(parents=True, exist_ok=True)
        git = ["git", "--git-dir", os.environ[TRL_REPO_ENV]]
        # examples/, and trl/scripts/ where the ref has it: some docstrings run `python trl/scripts/kto.py` from the root
        parts = [p for p in ("examples", "trl/scripts")
                 if subprocess.run([*git, "cat-file", "-e", f"{case.trl_repo}:{p}"], capture_output=True).returncode == 0]
        archive = subprocess.run([*git, "archive", case.trl_repo, *parts], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(case.cwd)], input=archive, check=True)
    if case.notebook:
        notebook = case.cwd / case.notebook
        notebook.with_suffix(".py").write_text(notebook_script(json.loads(notebook.read_text())))


def notebook_script(notebook: dict) -> str:
    """A notebook's code cells in order, as one script: what a user runs top to bottom. IPython's own lines (`%pip
    install ...`, `%load_ext`, `!nvidia-smi`) are not Python and are left out (the packages are the environment's)."""
    cells = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        lines = (source if isinstance(source, list) else source.splitlines(keepends=True))
        cells.append("".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!"))).rstrip("\n"))
    return "\n\n".join(cells) + "\n"


def ensure_standin(case: Case) -> None:
    """The STANDIN of a case's command: a copy of the tiny Qwen2 fixture whose tokenizer returns what Qwen2's does
    (hub.py's `_input_names`), so that a TRL which hands the tokenizer's every output to `generate` (0.24) meets no
    token_type_ids of the fixture's making."""
    for arg in case.command:
        target = Path(arg.split("=", 1)[-1])
        if target.name == STANDIN.name and target != STANDIN and not (target / "config.json").exists():
            shutil.copytree(STANDIN, target, dirs_exist_ok=True)
            _hub_module()._input_names(target)


def _hub_module():
    """tools/accuracy/hub.py, loaded from its file (this folder is not a package); it imports nothing heavy at the top."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_hub", HERE / "hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_hub(case: Case) -> None:
    """Build the stand-in hub cache a case names, in a process of its own (it loads transformers and datasets)."""
    if case.hub and not Path(case.hub["HF_HOME"], ".built").exists():
        subprocess.run([sys.executable, str(HERE / "hub.py"), case.hub["HF_HOME"]], check=True, capture_output=True)
        Path(case.hub["HF_HOME"], ".built").touch()


def _fill(arg: str, out: Path) -> str:
    return (str(arg).replace("STANDIN", str(out / STANDIN.name)).replace("DATA/", f"{HERE / 'data'}/")
            .replace("OUT/", f"{out}/"))


@dataclass
class Truth:
    words: str  # "trains", "trains, but ...", "crashes: ..."
    error: str | None  # the crash: "Type: message (at file:line)"
    wrong: list[str]  # what trains wrong without stopping
    changed: set[str]  # the settings the CPU run changed
    trainer: bool = True  # whether the script built a trainer (one that ends without building one trains nothing)


@functools.lru_cache(maxsize=None)
def _record_module():
    """tools/accuracy/record.py, loaded from its file as hub.py is (once)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accuracy_record", HERE / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_truth(case: Case) -> tuple[Truth, str] | None:
    """The case's recorded ground truth under its current key, with the day it was recorded; None where there is no
    such record (or LIVE_ENV asks for TRL's run)."""
    if os.environ.get(LIVE_ENV, "") not in ("", "0"):
        return None
    record = _record_module()
    found = record.find(case, record.key(case))
    if found is None:
        return None
    truth = found["truth"]
    return Truth(truth["words"], truth["error"], list(truth["wrong"]), set(truth["changed"]),
                 trainer=truth["trainer"]), found["recorded"]


def keep_truth(case: Case, truth: Truth, seconds: float) -> None:
    """Record a ground truth just run (--record), under the case's key. A run this machine cut short (past TIMEOUT,
    or killed) says nothing of TRL: it is not recorded."""
    if truth.words.startswith(("no ground truth: one CPU step ran past", "killed by signal")):
        return
    record = _record_module()
    keyed = record.key(case)
    here = str(ROOT) + "/"  # the repository's paths in TRL's words, as any clone reads them

    def words(text):
        return text.replace(here, "") if isinstance(text, str) else text

    if keyed is not None:
        record.save(case, keyed, {"words": words(truth.words), "error": words(truth.error),
                                  "wrong": [words(w) for w in truth.wrong], "changed": sorted(truth.changed),
                                  "trainer": truth.trainer}, seconds)


def ground_truth(case: Case) -> Truth:
    try:
        proc = subprocess.run([sys.executable, str(HERE / "truth.py"), "--", *case.command], cwd=case.cwd,
                              capture_output=True, text=True, timeout=TIMEOUT, env=_env(case))
    except subprocess.TimeoutExpired:  # one CPU step that takes longer is not a verdict either way
        return Truth(f"no ground truth: one CPU step ran past {TIMEOUT} s", None, [], {"*"})
    lines = proc.stderr.splitlines()
    changed = {ln.split()[2].split("=")[0] for ln in lines if ln.startswith("truth: changed ")}
    wrong = [ln[len("truth: wrong: "):] for ln in lines if ln.startswith("truth: wrong: ")]
    built = any(ln.startswith("truth: trainer ") for ln in lines)
    if proc.returncode == 0 and not built:
        return Truth("runs to its end and builds no trainer: nothing trains", None, wrong, changed, trainer=False)
    if proc.returncode == 0:
        return Truth("trains" + (f", but {'; '.join(wrong)}" if wrong else ""), None, wrong, changed)
    if proc.returncode < 0:  # killed (the kernel's out-of-memory killer): no verdict from this machine
        return Truth(f"killed by signal {-proc.returncode} on the CPU: no ground truth", None, wrong, changed | {"*"})
    found = [ln for ln in lines if ln.startswith("truth: error: ")]
    error = found[-1][len("truth: error: "):] if found else (lines or ["?"])[-1]
    if "launcher" in changed and launch_processes(case) != 1 and re.search(r"divisible|must be a multiple|batch size",
                                                                           error):
        # TRL checks the batch arithmetic at the process count it runs with: one here, the launch's there (where the
        # launch itself runs one process, the one here is its own)
        return Truth(f"no ground truth at one process (the launch's batch check: {error})", None, wrong, changed | {"*"})
    return Truth(f"crashes: {error}", error, wrong, changed)


def launch_processes(case: Case) -> int | None:
    """How many training processes the case's launcher starts, as the doctor reads its command (the launcher's own
    parser: `accelerate launch --num_processes N` or its `--config_file`, `torchrun --nproc_per_node N`) on one
    machine; None where a plain command, the launcher or its config does not say, or the launch spans machines."""
    from trl_doctor.capture.command import parse_command
    from trl_doctor.capture.run import launcher_reading
    from trl_doctor.errors import InputError
    from trl_doctor.facts.launch.launcher import read_accelerate_config

    try:
        command = parse_command(tuple(str(a) for a in case.command), str(case.cwd))
        if command.launcher not in ("accelerate", "torchrun"):
            return None
        launched = launcher_reading(command)
    except InputError:
        return None
    if (launched.machines or 1) > 1:
        return None
    if launched.processes:
        return launched.processes
    if launched.accelerate_config:
        config = read_accelerate_config(Path(launched.accelerate_config), "--config_file")
        return config.num_processes if (config.num_machines or 1) == 1 else None
    return None


def doctor(case: Case, *more: str) -> tuple[int, dict | None, str]:
    proc = doctor_run(case, *more)
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        report = None
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("trl-doctor: error:")), "")
    return proc.returncode, report, line


def doctor_run(case: Case, *more: str) -> subprocess.CompletedProcess:
    """`trl-doctor check` of the case's command, as its user runs it. Where REPORTS_ENV names a folder (a test
    session's: tests/conftest.py), the same command in the same folder and environment runs once and is read back
    by whatever asks again (the corpus tests and the accuracy harness both check each corpus case)."""
    beside = Path(sys.executable).parent / "trl-doctor"  # this interpreter's own install, activated or not
    exe = str(beside) if beside.exists() else shutil.which("trl-doctor") or "trl-doctor"
    argv, env = [exe, "check", *case.options, *more, "--format", "json", "--", *case.command], _env(case)
    folder = os.environ.get(REPORTS_ENV)
    if not folder:
        return subprocess.run(argv, cwd=case.cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    import fcntl
    import hashlib

    # aside: the asking test's name and pytest worker, and the fork server that worker's checks are forked from
    # (each worker has its own; what it forks is the same worker code)
    keyed = {k: v for k, v in env.items() if not k.startswith("PYTEST_") and k != "TRL_DOCTOR_FORKSERVER"}
    name = hashlib.sha256(json.dumps([argv, str(case.cwd), keyed], sort_keys=True).encode()).hexdigest()[:32]
    kept = Path(folder) / f"{name}.json"
    with open(Path(folder) / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second asker waits for the first one's run, then reads it
        if kept.exists():
            said = json.loads(kept.read_text(encoding="utf-8"))
            return subprocess.CompletedProcess(argv, said["returncode"], said["stdout"], said["stderr"])
        proc = subprocess.run(argv, cwd=case.cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
        partial = kept.with_suffix(".part")
        partial.write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}),
                           encoding="utf-8")
        partial.replace(kept)
        return proc


def _env(case: Case) -> dict:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"})
    env.update(case.hub or {})
    return env


def _same_error(line: str, error: str) -> bool:
    """Whether the doctor's exit-2 line names TRL's error: the same exception type and the start of its message."""
    kind, _, message = error.partition(": ")
    head = re.split(r"\s\(at ", message)[0][:60]
    return kind in line and head[:40] in line


def judge(case: Case, record: bool = False) -> Outcome:
    """The case's ground truth (from the record where its key matches; `record`: always run, and recorded) and the
    doctor's verdict on it."""
    from importlib.metadata import version

    ensure_hub(case)
    ensure_standin(case)
    ensure_trl_repo(case)
    start = time.monotonic()
    before = set(os.listdir(case.cwd))
    try:
        read = None if record else recorded_truth(case)
        truth, recorded = read or (ground_truth(case), None)
        if record:
            keep_truth(case, truth, time.monotonic() - start)
        code, report, line = doctor(case)
        if code == 2 and "rerun with --load-weights" in line:  # what the line tells its reader to do next
            first = line.removeprefix("trl-doctor: error: ")
            code, report, line = doctor(case, "--load-weights")
            line = f"{line} (first, without --load-weights: {first})"
    finally:  # what the runs wrote beside the case (output_dir, a dataset cache) goes: the repository stays clean
        for name in set(os.listdir(case.cwd)) - before:
            path = case.cwd / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
    results = (report or {}).get("results") or []
    errors = [r["rule"] for r in results if r["status"] == "error"]
    fails = [r["rule"] for r in results if r["status"] == "fail"]
    if code == 2:
        said = f"exit 2: {line.removeprefix('trl-doctor: error: ')}"
    else:
        said = f"exit {code}" + (f": fail {', '.join(fails)}" if fails else "") + (f"; error {', '.join(errors)}" if errors else "")
    machine = [r for r in fails if EXCUSED.get(r, set()) & truth.changed or "*" in truth.changed]
    if not truth.trainer:  # the doctor has nothing to check: its exit-2 line must say so
        verdict = "right" if code == 2 and "without constructing a TRL trainer" in line else \
            ("wrong cause" if code == 2 else "false alarm")
    elif truth.error is None and truth.wrong:
        verdict = _verdict_on_wrongs(truth, results, code, fails, machine, errors)
    elif truth.error is None:
        verdict = "right" if _only_launch_machine(code, fails, machine, errors) else "false alarm"
        if verdict == "right" and machine:
            said += f" (launch-machine findings: the CPU run changed {', '.join(sorted(truth.changed))})"
    elif code == 2:
        verdict = "right" if _same_error(line, truth.error) else "wrong cause"
    elif fails:
        verdict = "right"
    else:
        verdict = "miss"
    return Outcome(case, version("trl"), truth.words, truth.error, said, verdict, errors, time.monotonic() - start,
                   set(truth.changed), recorded)


_DROPPED = re.compile(r"recipe key '([^']+)' is dropped by the script's TrlParser")


def _verdict_on_wrongs(truth: "Truth", results: list, code: int, fails: list, machine: list, errors: list) -> str:
    """TRL trains, doing something wrong. A recipe key its parser drops costs the run that setting: trainer-config's
    warn (or fail) must name it, and any other fail is a false alarm unless the CPU run's changes excuse it. Any other
    wrong (a LoRA target that matches nothing, a response scored past its eos) must be a fail."""
    dropped = [m.group(1) for m in map(_DROPPED.match, truth.wrong) if m]
    named = all(any(r["rule"] == "trainer-config" and r["status"] in ("warn", "fail") and f"`{key}`" in r["message"]
                    for r in results) for key in dropped)
    if len(dropped) < len(truth.wrong):
        return "right" if fails and named else "miss"
    if not named:
        return "miss"
    return "right" if _only_launch_machine(code, fails, machine, errors) else "false alarm"


def _only_launch_machine(code: int, fails: list, machine: list, errors: list) -> bool:
    """Where TRL trains: the doctor passed, or failed only on what the CPU run changed (the launch machine's)."""
    return (code == 0 or (code == 1 and bool(fails) and set(fails) == set(machine))) and not errors


def table(outcomes: list[Outcome]) -> str:
    from importlib.metadata import version

    rows = ["| case | trl | ground truth (one CPU step) | trl-doctor | outcome |", "|---|---|---|---|---|"]
    for o in outcomes:
        truth = o.truth + (f" (recorded {o.recorded})" if o.recorded else "")
        rows.append(f"| `{o.case.name}` | {o.release} | {_cell(truth)} | {_cell(o.doctor)} | **{o.verdict}** |")
    rows.append("")
    rows.append("CPU changes per case (tools/accuracy/truth.py): " + "; ".join(
        f"`{o.case.name}`: {', '.join(sorted(o.changed - {'*'})) or 'none'}" for o in outcomes))
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("right", "false alarm", "wrong cause", "miss")}
    errors = sum(len(o.rule_errors) for o in outcomes)
    head = (f"{len(outcomes)} cases on trl {version('trl')}, transformers {version('transformers')}: "
            f"{counts['right']} right, {counts['false alarm']} false alarms, {counts['wrong cause']} wrong causes, "
            f"{counts['miss']} misses; {errors} rule errors. Ground truths read from tools/accuracy/truths.json (the "
            f"same inputs and releases as when recorded): {sum(bool(o.recorded) for o in outcomes)}; run: "
            f"{sum(not o.recorded for o in outcomes)}.")
    sources = [f"- `{o.case.name}`: {o.case.source}" for o in outcomes]
    return "\n".join([head, "", *rows, "", "Sources:", "", *sources, ""])


def _cell(text: str) -> str:
    text = re.sub(r"/\S*?/site-packages/", "<site-packages>/", text.replace(str(ROOT) + "/", "")).replace("|", "\\|")
    return text if len(text) <= 240 else text[:237] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the table into this markdown file (between its markers)")
    parser.add_argument("--only", nargs="*", help="case names to run")
    parser.add_argument("--record", action="store_true",
                        help="run every ground truth (none read from the record) and record it in "
                             "tools/accuracy/truths.json under the case's key")
    args = parser.parse_args(argv)
    subprocess.run([sys.executable, str(ROOT / "fixtures" / "build.py")], check=True, capture_output=True)
    subprocess.run([sys.executable, str(ROOT / "corpus" / "build.py")], check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="trl-doctor-accuracy-") as out:
        outcomes = []
        for case in load_cases(Path(out)):
            if args.only and case.name not in args.only:
                continue
            why = unmet(case.requires) or repo_missing(case) or import_missing(case)
            if why:
                if args.only:
                    print(f"{case.name}: not run: {why}", flush=True)
                continue
            outcome = judge(case, record=args.record)
            read = f" (recorded {outcome.recorded})" if outcome.recorded else ""
            print(f"{case.name}: {outcome.verdict} ({outcome.seconds:.0f} s): truth{read} {outcome.truth[:120]}; "
                  f"doctor {outcome.doctor[:160]}", flush=True)
            outcomes.append(outcome)
    text = table(outcomes)
    print(text)
    if args.write:
        _write(args.write, text)
    bad = [o for o in outcomes if o.verdict in ("false alarm", "wrong cause") or o.rule_errors]
    return 1 if bad else 0


def _write(path: Path, text: str) -> None:
    """Put `text` between the file's markers for this release's section, keeping the rest."""
    from importlib.metadata import version

    start, end = f"<!-- accuracy trl {version('trl')} -->", f"<!-- /accuracy trl {version('trl')} -->"
    old = path.read_text() if path.exists() else "# Accuracy\n"
    block = f"{start}\n{text}{end}"
    if start in old and end in old:
        new = old[:old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
