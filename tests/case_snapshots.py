"""Snapshot files of the fixture cases, in the style of ruff's (insta's): what the user reads for each case.

`fixtures/<slug>/snapshots/<case>.snap` holds, for the case `fixtures/<slug>/<case>`, the rule's result as the
check reports it (status, message, location, details, the fix offered) and the unified diff that `--fix` would
write (`--diff`), after a header naming the case, the command and the releases it was recorded with. The text is
made machine-independent (`normalise`): the fixture root, temporary folders, site-packages and the home folder
become placeholders, so that the file is the same on every machine of the default lane.

tests/test_fixture_cases.py writes the result and the diff from the run that judges the case's status (one run
per case, `check CASE --select RULE --diff --format json -o REPORT`) and compares them with the file here.

- Update: `python -m pytest --snapshot-update ...` or `TRL_DOCTOR_SNAPSHOT_UPDATE=1`: a missing or different
  snapshot is written (and the test passes); without the switch it fails, showing the difference.
- Lanes: a snapshot is compared where the installed TRL and transformers are the releases it was recorded with
  or newer, and vLLM is installed exactly where it was (the default lane, and the default lane after an upgrade,
  which then shows what the upgrade changed). The lanes with older releases (legacy, trl017) and the vLLM lane
  judge the statuses only: their messages name other releases and other behaviour, which expected.yaml's
  statuses already pin down.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import site
import sys
import sysconfig
import tempfile
from importlib.metadata import PackageNotFoundError, version
from dataclasses import dataclass
from pathlib import Path

import pytest

SUFFIX = ".snap"
FOLDER = "snapshots"
UPDATE_ENV = "TRL_DOCTOR_SNAPSHOT_UPDATE"
UPDATE_HINT = f"python -m pytest --snapshot-update ... (or {UPDATE_ENV}=1), then review the change with git diff"
LANE_PACKAGES = ("trl", "transformers", "vllm")


STATIC = ".static"  # the static context's snapshot: <case file name>.static.snap


def snapshot_path(case: Path, context: str = "full") -> Path:
    """fixtures/<slug>/snapshots/<case file name>.snap (the full check's), or .static.snap (--static's)."""
    return case.parent / FOLDER / (case.name + (STATIC if context == "static" else "") + SUFFIX)


def update_asked(config) -> bool:
    """Whether this session rewrites snapshots: the --snapshot-update option or the environment switch."""
    return bool(config.getoption("snapshot_update", default=False)) or os.environ.get(UPDATE_ENV, "") not in ("", "0")


# ---- the lane --------------------------------------------------------------------------------------------------

def installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def lane() -> str:
    """`trl 1.16.0, transformers 5.23.0, vllm -`: the releases that decide what the messages say."""
    return ", ".join(f"{p} {installed(p) or '-'}" for p in LANE_PACKAGES)


def _parse_lane(text: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for part in text.split(","):
        name, _, ver = part.strip().partition(" ")
        out[name] = None if ver in ("", "-") else ver
    return out


def comparable(recorded_lane: str) -> bool:
    """Whether this environment is the lane `recorded_lane` names, or a newer one (TRL and transformers at those
    releases or later, vLLM installed exactly where it was)."""
    from packaging.version import Version

    recorded = _parse_lane(recorded_lane)
    for package in LANE_PACKAGES:
        want, have = recorded.get(package), installed(package)
        if (want is None) != (have is None):
            return False
        if want is not None and package != "vllm" and Version(have) < Version(want):
            return False
    return True


# ---- the text ----------------------------------------------------------------------------------------------------

def _placeholders(roots: dict[Path, str]) -> list[tuple[str, str]]:
    """(machine-dependent path, placeholder), longest first: a fixture root before the temporary folder that may
    hold it, site-packages before the virtual environment folder under /tmp that holds it."""
    pairs: dict[str, str] = {}
    for root, placeholder in roots.items():
        pairs[str(root)] = pairs[str(root.resolve())] = placeholder
    for sp in {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_path("purelib"),
               sysconfig.get_path("platlib"), *(p for p in sys.path if p.endswith("site-packages"))}:
        if sp and len(sp) > 1:
            pairs[sp] = pairs[os.path.realpath(sp)] = "<site-packages>"
    for tmp in {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}:
        pairs[tmp] = "<tmp>"
    home = os.path.expanduser("~")
    if home not in ("/", "~", ""):
        pairs[home] = "~"
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def normalise(text: str, roots: dict[Path, str]) -> str:
    """`text` with the paths that depend on the machine as placeholders: each fixture root in `roots` as its
    placeholder (`<fixtures>`), site-packages, the temporary folder and the home folder; a temporary folder's own
    random name (`<tmp>/pytest-of-ann/pytest-12/...`, `<tmp>/trl-doctor-x1y2`) becomes `<tmp>/...`."""
    cwd = Path.cwd().resolve()
    for root, placeholder in roots.items():
        for path in (root, root.resolve()):
            # the diff names files relative to the current folder when inside it (as git does), else absolute
            # without the leading slash (trl_doctor.fix.fixer._shown)
            forms = [str(path).lstrip("/"), *([str(path.relative_to(cwd))] if path.is_relative_to(cwd) else [])]
            for form in forms:
                text = re.sub(rf"^(---|\+\+\+) ([ab])/{re.escape(form)}(?=/)", rf"\1 \2/{placeholder}", text,
                              flags=re.M)
    for path, placeholder in _placeholders(roots):
        text = re.sub(rf"{re.escape(path)}(?=[/\s'\"),.:;`\]]|$)", placeholder, text, flags=re.M)
    text = re.sub(r"<tmp>/[^\s'\"),:;\]]+", "<tmp>/...", text)
    for pattern, placeholder in MACHINE_FIGURES:
        text = pattern.sub(placeholder, text)
    return text


# What the machine decides, not the rule: how long a step or a sample took, the worker's peak memory, and the
# trainer step's loss and gradient norm (float32 sums on another CPU may differ in the last digits; an exact 0, a
# step with no gradient, is kept).
MACHINE_FIGURES = [
    (re.compile(r"(?<![\w.<])\d+(?:\.\d+)?s\b"), "<t>s"),                         # in 4.9s, (load 0.1s, ...)
    (re.compile(r"^(\s*\w+_s): \d+(?:\.\d+)?$", re.M), r"\1: <t>"),                 # details wall_s: 6.27
    (re.compile(r"^(\s*probe): \d+(?:\.\d+)? s$", re.M), r"\1: <t> s"),              # the vLLM server's answer
    (re.compile(r"^(\s*peak [^:\n]*MB): \d+(?:\.\d+)?$", re.M), r"\1: <MB>"),       # peak host MB: 466.2
    (re.compile(r"^(\s*(?:loss|grad_norm)): (?!0\.0$)-?\d[\d.e+-]*$", re.M), r"\1: <float>"),
    (re.compile(r"\b(loss|grad norm) (?!0(?:\.0+)?\b)-?\d[\d.e+-]*"), r"\1 <float>"),  # loss -0.07835, grad norm 1.957
]


def render(result: dict, diff: str | None) -> str:
    """The result (the json format's dict) and the --diff text as the snapshot's body (None: --static, no diff)."""
    from trl_doctor.report.formats import details_lines, location_text
    from trl_doctor.report.formats._safe import visible
    from trl_doctor.types import Location

    lines = [f"{result['id']} {result['rule']}: {result['status']}", result["message"].rstrip("\n")]
    if result.get("location"):
        lines.append("location: " + location_text(Location(**result["location"])))
    if result.get("details"):
        lines += ["details:", *details_lines(result["details"], indent="  ")]
    fix = result.get("fix")
    if fix:
        lines.append(f"fix ({fix['applicability']}): {fix['description']}")
        lines += [f"  - {f}" for f in fix["files"]]
    if diff is not None:
        lines += ["", "--diff:", diff.rstrip("\n")] if diff else ["", "--diff: no fix would change any file"]
    return visible("\n".join(lines).rstrip("\n") + "\n")


def header(case_id: str, command: str, recorded_lane: str) -> str:
    return f"---\ncase: {case_id}\ncommand: {command}\nlane: {recorded_lane}\n---\n"


def split(text: str) -> tuple[dict[str, str], str]:
    """(header fields, body) of a snapshot file."""
    if not text.startswith("---\n"):
        return {}, text
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        return {}, text
    fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
    return fields, body


# ---- the run -----------------------------------------------------------------------------------------------------

def static_run(case: Path, rule: str, fake_gpus: Path | None = None) -> "CaseRun":
    """The case judged in --static's context, in this process (trl_doctor.testing): its snapshot is the .static.snap
    file (`check --static CASE --select RULE --format json`; --static writes no diff; `fake_gpus`: the GPUs NVML
    describes here, as the command's header says)."""
    from trl_doctor.testing import judge

    judged = judge(case, rule, context="static")
    env = None if fake_gpus is None else {"TRL_DOCTOR_FAKE_GPUS": str(fake_gpus)}
    return CaseRun(case, ("check", "--static", str(case), "--select", rule, "--format", "json"), env, judged.code,
                   judged.as_dict(), "", "static")


@dataclass
class CaseRun:
    """One `trl-doctor check CASE --select RULE --diff --format json -o REPORT`: its exit status, the rule's
    result from the report, and the diff --fix would write (stdout)."""

    case: Path
    command: tuple[str, ...]
    env: dict | None
    code: int
    result: dict
    diff: str
    context: str = "full"

    def assert_snapshot(self, pytest_config, roots: dict[Path, str]) -> str:
        """The result and diff as the case's snapshot file records them (see assert_matches)."""
        fake = "".join(f"{k}={v} " for k, v in sorted((self.env or {}).items()) if k == "TRL_DOCTOR_FAKE_GPUS")
        shown = normalise(fake + "trl-doctor " + shlex.join(self.command), roots)
        body = normalise(render(self.result, None if self.context == "static" else self.diff), roots)
        return assert_matches(snapshot_path(self.case, self.context), f"{self.case.parent.name}/{self.case.name}", shown, body,
                              update_asked(pytest_config))


def watch_rule_ids() -> set[str]:
    from trl_doctor.registry import builtin_rules

    return {r.id for r in builtin_rules() if not r.preflight}


def judge_case(case: Path, rule: str, fake_gpus: Path | None = None) -> CaseRun:
    """Judge one fixture case in this process (trl_doctor.testing, the rule harness): what the command its snapshot
    names gives, with no process started (`fake_gpus`: the GPUs NVML describes here, as the command's header says)."""
    from trl_doctor.testing import judge

    judged = judge(case, rule)
    command = ("check", str(case), "--select", rule, "--diff", "--format", "json")
    env = None if fake_gpus is None else {"TRL_DOCTOR_FAKE_GPUS": str(fake_gpus)}
    return CaseRun(case, command, env, judged.code, judged.as_dict(), judged.diff)


def run_case(case: Path, rule: str, args: tuple[str, ...], tmp_path: Path, env: dict | None = None) -> CaseRun:
    """Check one fixture case the way its snapshot records it: one run of the real command gives the report (to a
    file) and the diff (stdout)."""
    from conftest import result_of, run_doctor

    if rule in watch_rule_ids():  # a watch rule's case is a job's log, judged by `trl-doctor watch`
        command = ("watch", str(case), "--select", rule, *args, "--format", "json")
    else:
        command = ("check", str(case), "--select", rule, *args, "--diff", "--format", "json")
    report = tmp_path / "report.json"
    proc = run_doctor(*command, "-o", str(report), **({"env": env} if env else {}))
    assert report.is_file(), f"{case}: no report; exit {proc.returncode}, stderr:\n{proc.stderr}"
    return CaseRun(case, command, env, proc.returncode, result_of(json.loads(report.read_text()), rule), proc.stdout)


# ---- the assertion -----------------------------------------------------------------------------------------------

def assert_matches(path: Path, case_id: str, command: str, body: str, update: bool) -> str:
    """Compare the case's command and `body` with the snapshot at `path`: equal passes; missing or different fails
    with the difference and how to update, or, under the update switch, is written. Returns what was done ("same",
    "written", "not compared: <why>"). A snapshot recorded on a lane this one does not reach is not compared."""
    current = header(case_id, command, lane()) + body
    if not path.is_file():
        if update:
            path.parent.mkdir(exist_ok=True)
            path.write_text(current, encoding="utf-8")
            return "written"
        pytest.fail(f"{case_id}: no snapshot {path.name} in {path.parent}; record it with {UPDATE_HINT}. "
                    f"It would hold:\n{current}", pytrace=False)
    recorded = path.read_text(encoding="utf-8")
    fields, _ = split(recorded)
    if "lane" in fields and not comparable(fields["lane"]):
        return f"not compared: recorded on {fields['lane']}, this is {lane()}"
    # the lane line is not compared: a newer release that changes nothing keeps the file as it is
    old, new = (re.sub(r"^lane: .*\n", "", text, count=1, flags=re.M) for text in (recorded, current))
    if old == new:
        return "same"
    if update:
        path.write_text(current, encoding="utf-8")
        return "written"
    shown = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                         f"{path.name} (recorded)", f"{path.name} (this run)"))
    pytest.fail(f"{case_id}: the report differs from its snapshot {path}:\n{shown}\n"
                f"If the new text is right, update it: {UPDATE_HINT}", pytrace=False)


def orphans(fixtures: Path, listed: dict[Path, set[str]]) -> list[Path]:
    """Snapshot files whose case is not listed in its folder's expected.yaml (`listed`: folder -> case names)."""
    return sorted(snap for snap in fixtures.glob(f"*/{FOLDER}/*") if snap.is_file()
                  and snap.name.removesuffix(SUFFIX).removesuffix(STATIC) not in listed.get(snap.parent.parent, set()))
