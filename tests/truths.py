"""Recorded ground truths for the tests: a script, a framework or TRL itself run for real (the job the doctor judges,
one step on this CPU) is the installed releases' behaviour, the same for the same inputs, so it is read from
tools/accuracy/truths.json where its key matches and run wherever anything of it changed (tools/accuracy/record.py).

The key covers the truth's name, its command and the environment the test adds (paths inside this repository, the
test's folder and the release cache written as placeholders, so that a clone elsewhere computes the same key), the
files it reads from this repository (`reads`: the script, its fixture folder; the models' builder always), Python's
version and the installed releases of the stack. A release put first on PYTHONPATH (conftest.real_trl) enters the
key through that environment: its folder is named by its release.

TRL_DOCTOR_ACCURACY_LIVE=1 runs every truth and reads none; TRL_DOCTOR_TRUTHS_RECORD=1 runs every truth and records
it (each lane records its own: its releases give it its own key). What is kept: the exit status, the last 8,000
characters of stdout and of stderr, and the files the run left under the folders named by `files_under`."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD_ENV = "TRL_DOCTOR_TRUTHS_RECORD"  # set: every truth is run, and recorded
LIVE_ENV = "TRL_DOCTOR_ACCURACY_LIVE"  # set: every truth is run, none read from the record
TAIL = 8000


@dataclass
class Truth:
    """A ground truth as tools/accuracy/record.py keys it: what the run reads from this repository (`reads`: its
    script, a framework case's folder and shared data; the models' builder always) and what it is given (`entry`: its
    command, environment and what the test wrote for it; `requires`: packages whose releases enter the key besides
    the stack's)."""
    name: str
    command: list
    cwd: Path
    requires: dict
    entry: dict = field(default_factory=dict)
    reads: tuple = ()


@dataclass
class Ran:
    """What the run did: as subprocess.CompletedProcess says it (the output's tails), the files it left, and the day
    it was recorded (None: it ran now)."""
    returncode: int
    stdout: str
    stderr: str
    files: list = field(default_factory=list)
    recorded: str | None = None


@functools.cache
def record_module():
    """tools/accuracy/record.py, loaded from its file once (as the accuracy harness loads it)."""
    spec = importlib.util.spec_from_file_location("accuracy_record", ROOT / "tools" / "accuracy" / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _placeholders(text: str, tmp: Path | None) -> str:
    from conftest import trl_cache

    import sysconfig

    text = text.replace(sys.executable, "<python>").replace(os.path.dirname(sys.executable), "<bin>")
    text = text.replace(sysconfig.get_paths()["purelib"], "<site-packages>")
    text = text.replace(str(ROOT), "<repo>").replace(str(trl_cache()), "<cache>")
    return text.replace(str(tmp), "<tmp>") if tmp is not None else text


def flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def truth_run(name: str, argv: list, cwd: Path, *, reads: tuple = (), env: dict | None = None, unset: tuple = (),
              given: dict | None = None, tmp: Path | None = None, requires: dict | None = None,
              files_under: Path | None = None, timeout: int = 600) -> Ran:
    """`argv` run in `cwd` with os.environ, less `unset`, and `env`, or its record. `reads`: the repository paths the
    run reads (files or folders); `given`: what the test wrote for it outside the repository (a recipe's text), by
    name; `tmp`: the test's own folder, written `<tmp>` in the key and the record; `requires`: packages besides the
    stack whose releases decide the outcome; `files_under`: the folder whose files the run left are kept (names
    relative to it)."""
    record = record_module()
    extra = dict(env or {})
    entry = {"command": [_placeholders(str(a), tmp) for a in argv],
             "env": {k: _placeholders(str(v), tmp) for k, v in sorted(extra.items())} | {k: None for k in unset},
             "given": {k: _placeholders(str(v), tmp) for k, v in sorted((given or {}).items())}}
    truth = Truth(f"tests/{name}", [str(a) for a in argv], Path(cwd), dict(requires or {}), entry, tuple(reads))
    keyed = record.key(truth)
    if not flag(RECORD_ENV) and not flag(LIVE_ENV):
        found = record.find(truth, keyed)
        if found is not None:
            said = found["truth"]
            return Ran(said["returncode"], said["stdout"], said["stderr"], said.get("files", []), found["recorded"])
    started = time.monotonic()
    run_env = {k: v for k, v in os.environ.items() if k not in unset} | extra
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=run_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    files = sorted(str(p.relative_to(files_under)) for p in files_under.rglob("*")
                   if not p.is_symlink()) if files_under is not None else []
    ran = Ran(proc.returncode, _placeholders(proc.stdout, tmp)[-TAIL:], _placeholders(proc.stderr, tmp)[-TAIL:],
              files[:500])
    if flag(RECORD_ENV) and keyed is not None:
        record.save(truth, keyed, {"returncode": ran.returncode, "stdout": ran.stdout, "stderr": ran.stderr,
                                   "files": ran.files}, time.monotonic() - started)
    return ran
