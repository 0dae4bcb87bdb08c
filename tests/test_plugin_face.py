"""The public plugin face, `trl_doctor.plugin`: light to import, the same objects as the private modules it
re-exports, and enough for a third-party rule that imports nothing else from trl-doctor."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import result_of, run_json
from test_plugins import _install

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


def test_importing_the_plugin_face_imports_nothing_heavy():
    code = ("import sys, trl_doctor.plugin; "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_is_the_private_object():
    from trl_doctor import _cache, _context, _errors, _registry, _types, plugin

    private = {"fact": _cache, "Context": _context, "InputError": _errors, "Unavailable": _errors,
               "rule": _registry, "Rule": _registry}
    assert len(plugin.__all__) == len(set(plugin.__all__))
    for name in plugin.__all__:
        assert getattr(plugin, name) is getattr(private.get(name, _types), name), name
    wanted = {"rule", "fact", "Fix", "Edit", "DELETE", "Location", "Status", "Finding", "Rule", "Context",
              "InputError", "Unavailable", "fail", "warn", "passed", "skip", "manual"}
    assert set(plugin.__all__) == wanted


FACE_PLUGIN = '''
"""XF001 face-beta: beta is written in the config.

What goes wrong
    Nothing; it shows a rule that imports only the plugin face.
How it is detected
    A fact reads `beta` from the config file once per check.
What the fix does
    Writes `beta: 0.0`.
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
