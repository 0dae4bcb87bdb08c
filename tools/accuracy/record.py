"""The recorded ground truths (tools/accuracy/truths.json): TRL's own one-step run of an accuracy case, or a
framework's own run of its documented example (tests/test_frameworks.py), kept under a key of everything the run
depends on, so that a run with the same inputs and releases reads it instead of training again (run.py's docstring
says why and when).

The key (sha256) covers:
- the case's entry (cases.yaml's or its corpus case.yaml's: command, options, requires, cwd, hub, TRL ref, notebook;
  its words about itself, `source`, `note` and `expected`, are left out);
- the contents of every file the run reads from this repository: the files and folders its command names (relative
  to where it runs: a script, a recipe, a DATA/ folder), its corpus folder (the script's own modules) and corpus/data,
  the ground truth's own code (truth.py, hub.py) and the builders of the models it loads (fixtures/build_fixtures.py,
  corpus/build.py, whose output is a function of their code and the releases below);
- Python's version and the installed releases of the stack and of whatever the case requires.
Paths enter the key relative to the repository, so a clone elsewhere (CI's) computes the same key. Only files git
tracks are read (git ls-files): outputs a run left behind and built models never change the key; without git there
is no key, and the ground truth runs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SHARED = ("tools/accuracy/truth.py", "tools/accuracy/hub.py", "fixtures/build_fixtures.py", "corpus/build.py",
          "corpus/data")
STACK = ("torch", "transformers", "trl", "accelerate", "datasets", "peft", "tokenizers", "safetensors",
         "huggingface_hub", "numpy", "jinja2")
ENTRY_KEYS = ("name", "command", "options", "requires", "cwd", "hub", "trl_repo", "notebook", "imports", "env", "given")


def _tracked(paths: list[str]) -> list[str] | None:
    """The files git tracks under `paths` (repository-relative), sorted; None where git cannot tell."""
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *paths], capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return sorted(filter(None, proc.stdout.decode("utf-8", "surrogateescape").split("\0")))


def _releases(requires: dict) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    names = sorted(set(STACK) | {str(n) for n in (requires or {})})
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return {"python": "%d.%d" % sys.version_info[:2], **found}


def _named(case) -> list[str]:
    """The repository paths the case's command names (after its placeholders are filled), and its corpus folder."""
    named = []
    for arg in case.command:
        for word in str(arg).split("="):
            path = Path(word) if Path(word).is_absolute() else case.cwd / word
            try:
                relative = path.resolve().relative_to(ROOT)
            except (ValueError, OSError):
                continue
            if path.exists() and str(relative) not in ("", "."):
                named.append(str(relative))
    if case.name.startswith("corpus/"):
        named.append(f"corpus/{case.name.split('/', 1)[1]}")
    return named + [str(p) for p in getattr(case, "reads", ())]  # what else it reads (a framework's shared data)


def key(case) -> tuple[str, dict] | None:
    """(the case's key, the releases it was computed with); None where the inputs cannot be read (no git)."""
    files = _tracked(sorted(set(_named(case)) | set(SHARED)))
    if not files:
        return None
    digest = hashlib.sha256()
    entry = {k: v for k, v in (case.entry or {}).items() if k in ENTRY_KEYS}
    releases = _releases(case.requires)
    digest.update(json.dumps([case.name, entry, releases], sort_keys=True, default=str).encode())
    for name in files:
        try:
            data = (ROOT / name).read_bytes()
        except OSError:  # tracked but removed from the work tree: its absence is part of the key
            data = b"\0missing"
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest(), releases


def load() -> list[dict]:
    try:
        return json.loads((HERE / "truths.json").read_text(encoding="utf-8"))["records"]
    except (OSError, ValueError, KeyError):
        return []


def find(case, keyed: tuple[str, dict] | None) -> dict | None:
    """The record of `case` under its current key, if one was made."""
    if keyed is None:
        return None
    return next((r for r in load() if r["case"] == case.name and r["key"] == keyed[0]), None)


def save(case, keyed: tuple[str, dict], truth: dict, seconds: float) -> None:
    """Keep `truth` for `case` under `keyed`: it replaces the case's record for the same releases (a case is recorded
    once per lane: each lane's releases give it another key), and the file is replaced whole, never half-written.
    Read, changed and replaced under a lock on this folder: xdist's workers record side by side (the frameworks')."""
    import datetime
    import fcntl
    import os

    from trl_doctor.watch import write_atomic

    key_, releases = keyed
    folder = os.open(HERE, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        records = [r for r in load() if not (r["case"] == case.name and r["releases"] == releases)]
        records.append({"case": case.name, "key": key_, "releases": releases, "truth": truth,
                        "seconds": round(seconds, 1), "recorded": datetime.date.today().isoformat()})
        records.sort(key=lambda r: (r["case"], json.dumps(r["releases"], sort_keys=True)))
        write_atomic(HERE / "truths.json", json.dumps({"what": "the recorded ground truths (the accuracy harness's "
                                                       "and the frameworks' own runs): tools/accuracy/record.py",
                                                       "records": records}, indent=1, sort_keys=True) + "\n")
    finally:
        os.close(folder)  # the lock goes with it
