"""Data-driven: every case in fixtures/<slug>/ gives the status written in that folder's expected.yaml.

Each rule has a folder with broken (bad_*) and healthy (ok_*) cases; a healthy case that does not pass
is a false alarm and fails this test just as a missed broken case does.

An expected.yaml may also map cases to fake GPUs (`fake_gpus: {case: file.json}`, the file relative to the
folder): such a case runs as a subprocess with tests/fake_nvml (a pynvml stand-in) first on PYTHONPATH, and
extra command-line arguments per case (`args: {case: [--sample, "2"]}`), and folders put on the check's PYTHONPATH
per case (`pythonpath: {case: site/...}`, relative to the folder: an installed package's stand-in, or a broken one).

The same run also gives the case's snapshot, fixtures/<slug>/snapshots/<case>.snap: the rule's result as the
report words it and the diff --fix would write (tests/case_snapshots.py; `--snapshot-update` rewrites them).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml
import pytest

import case_snapshots as snapshots
from conftest import FIXTURES

FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"

def case_fake_gpus(case: Path) -> Path | None:
    """The fake-GPU file a fixture case is judged against (its folder's expected.yaml `fake_gpus`), or None."""
    expected = case.parent / "expected.yaml"
    spec = yaml.safe_load(expected.read_text()) if expected.is_file() else {}
    named = (spec.get("fake_gpus") or {}).get(case.name)
    return case.parent / named if named else None


CASES = []
for expected_file in sorted(FIXTURES.glob("*/expected.yaml")):
    spec = yaml.safe_load(expected_file.read_text())
    fakes = spec.get("fake_gpus") or {}
    extra = spec.get("args") or {}
    for case, status in spec["cases"].items():
        fake = expected_file.parent / fakes[case] if case in fakes else None
        CASES.append(pytest.param(expected_file.parent / case, spec["rule"], status, fake, tuple(extra.get(case, ())),
                                  id=f"{expected_file.parent.name}/{case}"))


def fake_gpu_env(gpus_json: Path, site: Path | None = None) -> dict:
    """The environment of a `trl-doctor` subprocess that sees the GPUs described in `gpus_json` through NVML (and
    the packages in `site`, before the installed ones)."""
    assert gpus_json.is_file(), f"fake_gpus names a missing file: {gpus_json}"
    assert site is None or site.is_dir(), f"pythonpath names a missing folder: {site}"
    path = os.pathsep.join(p for p in (str(FAKE_NVML), site and str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TRL_DOCTOR_FAKE_GPUS": str(gpus_json)}


def fake_pynvml():
    """A fresh module object of tests/fake_nvml/pynvml.py, the NVML stand-in (it reads TRL_DOCTOR_FAKE_GPUS)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pynvml", FAKE_NVML / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def fake_nvml(gpus_json: Path | None):
    """While judging in this process, NVML answers for the GPUs `gpus_json` describes: tests/fake_nvml's pynvml as
    the module `pynvml` (the facts import it at each read) and TRL_DOCTOR_FAKE_GPUS set; both put back after."""
    if gpus_json is None:
        yield
        return
    import sys

    assert gpus_json.is_file(), f"fake_gpus names a missing file: {gpus_json}"
    module = fake_pynvml()
    before_module = sys.modules.get("pynvml")
    before_env = {key: os.environ.get(key) for key in ("TRL_DOCTOR_FAKE_GPUS", "CUDA_VISIBLE_DEVICES")}
    sys.modules["pynvml"], os.environ["TRL_DOCTOR_FAKE_GPUS"] = module, str(gpus_json)
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every GPU the file describes is visible, as in the subprocess
    try:
        yield
    finally:
        if before_module is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = before_module
        for key, value in before_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def case_site(case: Path) -> Path | None:
    """The folder a fixture case puts on the check's PYTHONPATH (its expected.yaml's `pythonpath`), or None."""
    spec = yaml.safe_load((case.parent / "expected.yaml").read_text())
    named = (spec.get("pythonpath") or {}).get(case.name)
    return case.parent / named if named else None


NOT_RUN = "not run"  # expected.yaml's status for a case the installed releases cannot run (`when: "trl<1.10"`)


def expected_statuses(expected) -> tuple[list[str], bool]:
    """(allowed statuses, version-conditional?) for one case of expected.yaml."""
    if isinstance(expected, str):
        return [expected], False
    if all(isinstance(e, str) for e in expected):
        return list(expected), False
    from importlib.metadata import version

    from packaging.requirements import Requirement

    for entry in expected:
        when = entry.get("when")
        if when is None:
            return [entry["status"]], True
        req = Requirement(when)
        if req.specifier.contains(version(req.name), prereleases=True):
            return [entry["status"]], True
    raise AssertionError(f"no entry matches the installed versions: {expected}")


def _trainer_rule_ids() -> set[str]:
    """The rules that read the check's trainer run (their metadata's `needs`): their cases run the trainer."""
    from trl_doctor.registry import builtin_rules

    return {r.id for r in builtin_rules() if "trainer_run" in r.needs}


TRAINER_RULES = _trainer_rule_ids()


def in_process(config: Path, rule: str, site: Path | None, args: tuple[str, ...]) -> bool:
    """Whether a case is judged by the rule harness in this process (trl_doctor.testing): every preflight config
    (with its fake GPUs: `fake_nvml`) but those with command-line arguments or an installed package's stand-in of
    their own (a process whose path has it); a script is a launch, whose capture is a process boundary; a rule that
    reads the trainer run runs it in the check's worker, under the worker's limits.
    TRL_DOCTOR_TEST_SUBPROCESS=1 runs them all through the real command."""
    return (site is None and not args and config.suffix != ".py" and rule not in TRAINER_RULES
            and rule not in snapshots.watch_rule_ids()
            and not os.environ.get("TRL_DOCTOR_TEST_SUBPROCESS"))


# One real trainer step per trainer runs in the README's plain `python -m pytest` (marker `core`): GRPO, RLOO, and
# PPO where the installed TRL has it (from trl 1.13 that case is the rule's verdict that PPO is gone).
CORE = {"smoke-step/ok_grpo_qwen2.yaml", "smoke-step/ok_rloo_gpt2.yaml", "smoke-step/ok_ppo_qwen2.yaml"}


def _marks(case) -> list:
    slow = [pytest.mark.slow] if case.values[1] in TRAINER_RULES else []
    return [*case.marks, *slow, *([pytest.mark.core] if case.id in CORE else [])]


@pytest.mark.parametrize("config, rule, expected, fake_gpus, args", [  # the rules that run the trainer are slow
    pytest.param(*c.values, id=c.id, marks=_marks(c)) for c in CASES])
def test_case_status(built_fixtures, tmp_path, request, config, rule, expected, fake_gpus, args):
    allowed, conditional = expected_statuses(expected)
    if allowed == [NOT_RUN]:  # a case the installed releases cannot run at all (a trainer this TRL lacks)
        pytest.skip(f"{config.parent.name}/{config.name}: not run with the installed releases")
    site = case_site(config)
    # one run gives the status, and the report and diff its snapshot records (tests/case_snapshots.py)
    if in_process(config, rule, site, args):
        with fake_nvml(fake_gpus):
            run = snapshots.judge_case(config, rule, fake_gpus)
    else:
        env = None if fake_gpus is None else fake_gpu_env(fake_gpus, site)
        run = snapshots.run_case(config, rule, args, tmp_path, env)
    code, result = run.code, run.result
    assert result["status"] in allowed, f"{config.name}: {result['status']}: {result['message']}\n{result['details']}"
    assert code == (1 if result["status"] in ("fail", "error") else 0)
    if config.name.startswith("bad_") and not conditional:
        # a broken case must never pass (version-conditional cases say where it is broken)
        assert result["status"] != "pass"
    assert result["message"]
    run.assert_snapshot(request.config, {FIXTURES: "<fixtures>"})


def _static_rule_ids() -> set[str]:
    from trl_doctor.registry import builtin_rules

    return {r.id for r in builtin_rules() if "static" in r.contexts}


STATIC_RULES = _static_rule_ids()
RANK = {"pass": 0, "skip": 0, "warn": 1, "error": 2, "fail": 2}


def static_cases() -> list:
    """Each case of a rule declared for --static, but one with an installed package's stand-in of its own (judged by
    the command, whose path has it; --static reads no package)."""
    return [c for c in CASES if c.values[1] in STATIC_RULES and case_site(c.values[0]) is None]


@pytest.mark.parametrize("config, rule, expected", [pytest.param(*c.values[:3], id=c.id) for c in static_cases()])
def test_case_status_static(built_fixtures, request, config, rule, expected):
    """The rule's --static judgment on its case, in this process (the rule harness): never an alarm the full
    check does not raise (expected.yaml), and its words recorded in <case>.static.snap (a static pass on a bad_
    case says what it left to the full check: the snapshot shows it)."""
    allowed, conditional = expected_statuses(expected)
    if allowed == [NOT_RUN]:
        pytest.skip(f"{config.parent.name}/{config.name}: not run with the installed releases")
    fake = case_fake_gpus(config)
    with fake_nvml(fake):
        run = snapshots.static_run(config, rule, fake)
    status = run.result["status"]
    assert RANK[status] <= max(RANK[s] for s in allowed), (status, run.result["message"])
    assert run.code == (1 if status in ("fail", "error") else 0) and run.result["message"]
    run.assert_snapshot(request.config, {FIXTURES: "<fixtures>"})


def test_core_cases_exist():
    """The `core` steps name real cases (a renamed case would drop the trainer step from the default run)."""
    assert CORE <= {c.id for c in CASES}


def test_every_case_file_is_listed():
    """A fixture config nobody checks is dead weight: every bad_/ok_ file must be in expected.yaml."""
    for expected_file in FIXTURES.glob("*/expected.yaml"):
        listed = set(yaml.safe_load(expected_file.read_text())["cases"])
        present = {p.name for p in expected_file.parent.iterdir() if p.name.startswith(("bad_", "ok_"))}
        assert listed == present, expected_file


def test_fake_gpus_name_listed_cases():
    for expected_file in FIXTURES.glob("*/expected.yaml"):
        spec = yaml.safe_load(expected_file.read_text())
        assert set(spec.get("fake_gpus") or {}) <= set(spec["cases"]), expected_file
        assert set(spec.get("args") or {}) <= set(spec["cases"]), expected_file
        # a PYTHONPATH folder goes to the subprocess that sees the fake GPUs
        assert set(spec.get("pythonpath") or {}) <= set(spec.get("fake_gpus") or {}), expected_file


def test_snapshots_name_listed_cases(request):
    """Every snapshot file belongs to a case its folder's expected.yaml lists (a renamed or removed case leaves
    its snapshot behind: deleted under the update switch), and every listed case has one (a case that was never
    recorded fails here in a plain run, even when its own run is left out as slow)."""
    listed = {f.parent: set(yaml.safe_load(f.read_text())["cases"]) for f in FIXTURES.glob("*/expected.yaml")}
    update = snapshots.update_asked(request.config)
    stale = snapshots.orphans(FIXTURES, listed)
    if update:
        for path in stale:
            path.unlink()
    else:
        assert not stale, ("snapshots of no listed case (delete them, or run with --snapshot-update):\n"
                           + "\n".join(str(p.relative_to(FIXTURES)) for p in stale))
        static = {c.values[0] for c in static_cases()}
        missing = sorted(f"{folder.name}/{case}{' (--static)' if context == 'static' else ''}"
                         for folder, cases in listed.items() for case in cases
                         for context in ("full", *(("static",) if folder / case in static else ()))
                         if not snapshots.snapshot_path(folder / case, context).is_file())
        extra = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob(f"*/{snapshots.FOLDER}/*.static.snap")
                       if p.parent.parent / p.name.removesuffix(".static.snap") not in static)
        assert not extra, "static snapshots of cases not judged in that context (delete them):\n" + "\n".join(extra)
        assert not missing, f"cases without a snapshot (record them: {snapshots.UPDATE_HINT}):\n" + "\n".join(missing)
