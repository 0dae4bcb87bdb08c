"""The public plugin face, `trl_doctor.plugin`: light to import, the same objects as the private modules it
re-exports, enough for a third-party rule that imports nothing else from trl-doctor, and the worked example
of docs/writing-a-rule.md (docs/example_rule/) runs through the real command as the guide says."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import case_snapshots
from conftest import ROOT, result_of, run_doctor, run_json
from test_plugins import _install

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

EXAMPLE = ROOT / "docs" / "example_rule"
EXAMPLE_CASES = EXAMPLE / "fixtures" / "tracker-packages"


def test_importing_the_plugin_face_imports_nothing_heavy():
    code = ("import sys, trl_doctor.plugin; "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_is_the_private_object():
    from trl_doctor import plugin
    from trl_doctor import cache as _cache
    from trl_doctor.context import context as _context
    from trl_doctor import errors as _errors
    from trl_doctor import interface as _interface
    from trl_doctor import registry as _registry
    from trl_doctor import types as _types
    from trl_doctor import vocabulary as _vocabulary
    from trl_doctor import wording as _wording
    from trl_doctor.facts.launch import settings as _settings
    from trl_doctor.facts.trl import trainer_config as _trainer_config

    private = {"fact": _cache, "Context": _context, "InputError": _errors, "Unavailable": _errors,
               "rule": _registry, "Rule": _registry, "CheckContext": _interface, "trainer_config": _trainer_config,
               "config_value": _settings, "one_line": _wording, "shown": _wording, "TRAINERS": _vocabulary,
               "ALL_TRAINERS": _vocabulary, "ASYNC_GRPO": _vocabulary}
    assert len(plugin.__all__) == len(set(plugin.__all__))
    for name in plugin.__all__:
        assert getattr(plugin, name) is getattr(private.get(name, _types), name), name
    wanted = {"rule", "fact", "Fix", "Edit", "DELETE", "Location", "Status", "Finding", "Rule", "Context",
              "CheckContext", "InputError", "Unavailable", "fail", "warn", "passed", "skip", "manual", "trainer_config",
              "config_value", "one_line", "shown", "TRAINERS", "ALL_TRAINERS", "ASYNC_GRPO"}
    assert set(plugin.__all__) == wanted


FACE_PLUGIN = '''
"""XF001 face-beta: beta is written in the config.

What it does
    A fact reads `beta` from the config file once per check.
Why is this bad?
    Nothing; it shows a rule that imports only the plugin face.
Example
    a config without `beta` -> warn: beta is not written in the config
Fix safety
    Safe: writes `beta: 0.0`.
"""
from trl_doctor.plugin import Edit, Fix, fact, passed, rule, warn

CALLS = []


@fact
def written_beta(ctx):
    CALLS.append(1)
    return ctx.config.get("beta")


@rule(id="XF001", slug="face-beta", title="beta is written in the config", needs=("tokenizer",), fixable="always")
def check(ctx):
    beta = written_beta(ctx)
    assert written_beta(ctx) is beta  # the second call is the cached answer
    if beta is not None:
        yield passed(f"beta is {beta}", calls=len(CALLS))
        return
    yield warn("beta is not written in the config", calls=len(CALLS),
               fix=Fix("write beta: 0.0", (Edit(str(ctx.config.path), set=(("beta", 0.0),)),)))
'''


def test_a_rule_that_imports_only_the_plugin_face(tmp_path, built_fixtures):
    site = _install(tmp_path, "td-face-rules", FACE_PLUGIN)
    cfg = str(built_fixtures / "pad-token" / "ok_qwen2_chat.json")
    code, report = run_json("check", cfg, "--select", "face-beta", env={"PYTHONPATH": str(site)})
    found = result_of(report, "XF001")
    assert found["status"] == "warn", found
    assert found["details"]["calls"] == 1  # the fact ran once for two calls
    assert found["fix"]["applicability"] == "safe" and found["fix"]["files"] == [cfg]
    assert found["location"]["file"] == cfg and found["location"]["key"] == "beta"
    assert code == 0


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """docs/example_rule installed as a third-party package (from a copy: a build leaves files beside it)."""
    tmp = tmp_path_factory.mktemp("example-rule")
    shutil.copytree(EXAMPLE, tmp / "src", ignore=shutil.ignore_patterns("fixtures", "build", "*.egg-info"))
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(tmp / "src")], check=True, capture_output=True)
    return site


def test_the_example_is_listed_and_explained(example_site):
    env = {"PYTHONPATH": str(example_site)}
    listed = run_doctor("rules", env=env)
    assert "EX001" in listed.stdout and "tracker-packages" in listed.stdout and "trl-doctor-tracker-rules" in listed.stdout
    explained = run_doctor("explain", "EX001", env=env).stdout
    from test_rules_meta import HEADINGS

    assert [line for line in explained.splitlines() if line in HEADINGS] == list(HEADINGS)


def test_the_example_imports_only_the_plugin_face():
    from test_architecture import imports

    used = {module for _, module, _, _ in imports(EXAMPLE / "tracker_rules.py") if module.startswith("trl_doctor")}
    assert used == {"trl_doctor.plugin"}


EXAMPLE_SPEC = yaml.safe_load((EXAMPLE_CASES / "expected.yaml").read_text())


@pytest.mark.parametrize("case, expected", sorted(EXAMPLE_SPEC["cases"].items()))
def test_the_example_cases(example_site, built_fixtures, case, expected, tmp_path, request):
    if case == "bad_tracker_not_installed.yaml" and importlib.util.find_spec("comet_ml") is not None:
        pytest.skip("comet_ml is installed in this Python: the case's tracker is not missing here")
    run = case_snapshots.run_case(EXAMPLE_CASES / case, EXAMPLE_SPEC["rule"], (), tmp_path,
                                  {"PYTHONPATH": str(example_site)})
    found = run.result
    assert found["status"] == expected, found
    assert run.code == (1 if expected == "fail" else 0)
    # the message, details, fix and diff as the example's snapshot records them (docs/writing-a-rule.md, 7)
    run.assert_snapshot(request.config, {EXAMPLE_CASES.parent: "<example-fixtures>", built_fixtures: "<fixtures>"})


def test_the_example_snapshots_name_its_cases():
    assert not case_snapshots.orphans(EXAMPLE_CASES.parent, {EXAMPLE_CASES: set(EXAMPLE_SPEC["cases"])})


def test_the_example_fix_is_applied_only_with_unsafe_fixes(example_site, built_fixtures, tmp_path):
    # the cases name the models as ../../../../fixtures/...: keep that layout around the copy
    folder = tmp_path / "docs" / "example_rule" / "fixtures" / "tracker-packages"
    shutil.copytree(EXAMPLE_CASES, folder)
    (tmp_path / "fixtures").symlink_to(built_fixtures)
    case = folder / "bad_unknown_tracker.yaml"
    before = case.read_text()
    env = {"PYTHONPATH": str(example_site)}
    safe_only = run_doctor("check", str(case), "--select", "EX001", "--fix", env=env)
    assert safe_only.returncode == 1 and case.read_text() == before
    unsafe = run_doctor("check", str(case), "--select", "EX001", "--fix", "--unsafe-fixes", env=env)
    assert unsafe.returncode == 0, unsafe.stdout + unsafe.stderr
    assert "report_to: none" in case.read_text() and "# A misspelt tracker" in case.read_text()
    assert Path(str(case) + ".trl-doctor.bak").read_text() == before


def test_the_guide_shows_the_example_as_it_is():
    """docs/writing-a-rule.md quotes the example's module; a change to one must reach the other."""
    guide = (ROOT / "docs" / "writing-a-rule.md").read_text()
    source = (EXAMPLE / "tracker_rules.py").read_text()
    code = source[source.index("from trl_doctor.plugin"):]
    assert textwrap.dedent(code).strip() in guide


def test_the_guide_quotes_the_example_snapshot():
    """docs/writing-a-rule.md shows a snapshot of the example: it is the recorded file, word for word."""
    guide = (ROOT / "docs" / "writing-a-rule.md").read_text()
    snap = case_snapshots.snapshot_path(EXAMPLE_CASES / "bad_unknown_tracker.yaml").read_text()
    assert snap in guide


def test_the_example_judges_under_static_with_its_own_hook(example_site, built_fixtures):
    """A plugin rule declared for `static` runs its one judgment under `check --static` as a built-in rule does: the
    worked example fails a missing tracker from the file alone, in the full check's words, passes `none`, and says
    why it cannot judge a name only transformers' table knows."""
    env = {"PYTHONPATH": str(example_site)}
    verdicts = {}
    for case in sorted(EXAMPLE_SPEC["cases"]):
        if case == "bad_tracker_not_installed.yaml" and importlib.util.find_spec("comet_ml") is not None:
            continue
        proc = run_doctor("check", "--static", "--select", "EX001", "--format", "json", str(EXAMPLE_CASES / case),
                          env=env)
        assert proc.returncode in (0, 1), proc.stderr
        verdicts[case] = result_of(json.loads(proc.stdout), "EX001")
    assert verdicts["ok_no_tracker.yaml"]["status"] == "pass"
    assert verdicts["ok_all_installed.yaml"]["status"] == "pass"
    unknown = verdicts["bad_unknown_tracker.yaml"]
    assert unknown["status"] == "skip" and "needs the full check" in unknown["message"] and "tensorbord" in unknown["message"]
    if "bad_tracker_not_installed.yaml" in verdicts:
        missing = verdicts["bad_tracker_not_installed.yaml"]
        fields, body = case_snapshots.split(case_snapshots.snapshot_path(EXAMPLE_CASES / "bad_tracker_not_installed.yaml")
                                            .read_text())
        assert missing["status"] == "fail" and missing["message"] == body.split("\n")[1]  # the full check's words
