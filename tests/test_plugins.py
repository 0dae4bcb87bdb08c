"""Third-party rules: a separately installed distribution with a `trl_doctor.rules` entry point is
picked up by `rules`, `explain` and `check`; a rule that crashes is `error` while the others still run;
a plugin that cannot be imported is named in a one-line error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import result_of, run_doctor, run_json

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

PLUGIN = '''
"""XT001 example-beta: an example third-party rule.

What it does
    It reads `beta` from the config.
Why is this bad?
    Nothing; it demonstrates the plugin contract.
Example
    beta: null
Fix safety
    No fix.
"""
from trl_doctor import fail, passed, rule


@rule(id="XT001", slug="example-beta", title="Example: beta is set")
def check(ctx):
    beta = ctx.config.get("beta")
    yield passed(f"beta is {beta}") if beta is not None else fail("beta is not set")


@rule(id="XT002", slug="example-crash", title="Example: a rule that crashes")
def crash(ctx):
    raise RuntimeError("plugin bug")
    yield
'''


def _install(tmp_path: Path, name: str, module_source: str) -> Path:
    src = tmp_path / f"src-{name}"
    src.mkdir()
    (src / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "0.1.0"
        [project.entry-points."trl_doctor.rules"]
        example = "{name.replace('-', '_')}"
        [tool.setuptools]
        py-modules = ["{name.replace('-', '_')}"]
    '''))
    (src / f"{name.replace('-', '_')}.py").write_text(module_source)
    site = tmp_path / f"site-{name}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(src)],
                   check=True, capture_output=True)
    assert list(site.glob("*.dist-info/entry_points.txt"))
    return site


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    return _install(tmp_path_factory.mktemp("plugin"), "td-example-rules", PLUGIN)


def test_plugin_rules_are_listed_and_explained(plugin_site):
    env = {"PYTHONPATH": str(plugin_site)}
    proc = run_doctor("rules", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "XT001" in proc.stdout and "example-beta" in proc.stdout and "td-example-rules" in proc.stdout
    assert "TD001" in proc.stdout  # built-ins are still there
    explained = run_doctor("explain", "example-beta", env=env)
    assert "demonstrates the plugin contract" in explained.stdout
    assert run_doctor("rules").stdout.count("XT001") == 0  # not installed: not there


def test_plugin_rules_run_and_a_crash_is_an_error(plugin_site, built_fixtures):
    cfg = str(built_fixtures / "pad-token" / "ok_qwen2_chat.json")
    code, report = run_json("check", cfg, "--select", "XT001,XT002,TD001", env={"PYTHONPATH": str(plugin_site)})
    assert result_of(report, "XT001")["status"] == "fail"
    crashed = result_of(report, "XT002")
    assert crashed["status"] == "error"
    assert "RuntimeError: plugin bug" in crashed["message"]
    assert "td_example_rules.py" in crashed["details"]["traceback"]
    assert result_of(report, "TD001")["status"] == "pass"  # the crash did not stop the others
    assert code == 1


def test_broken_plugin_is_named(tmp_path):
    site = _install(tmp_path, "td-broken-rules", "import no_such_module_anywhere\n")
    proc = run_doctor("rules", env={"PYTHONPATH": str(site)})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "td-broken-rules" in proc.stderr and "no_such_module_anywhere" in proc.stderr
