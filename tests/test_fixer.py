"""The fixer on real files: key order and YAML comments kept, atomic writes with backups, idempotence,
and nothing written by a plan or a diff."""

from __future__ import annotations

import json
import os

import pytest

from trl_doctor import DELETE, Edit, Fix, InputError
from trl_doctor.fix import fixer as _fixer

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

YAML = """\
# GRPO run for the search agent
model_name_or_path: ./model   # the SFT checkpoint
num_generations: 8
per_device_train_batch_size: 4  # per GPU
gradient_accumulation_steps: 2
"""


def test_yaml_edit_keeps_comments_and_order(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(YAML)
    fix = Fix("make the batch divisible", (Edit(str(cfg), set=(("per_device_train_batch_size", 8), ("beta", 0.0))),))
    changes = _fixer.plan([fix])
    assert cfg.read_text() == YAML  # planning writes nothing
    _fixer.apply(changes)
    text = cfg.read_text()
    assert text.startswith("# GRPO run for the search agent\nmodel_name_or_path: ./model   # the SFT checkpoint\n")
    assert "per_device_train_batch_size: 8  # per GPU\n" in text
    assert text.index("num_generations") < text.index("per_device_train_batch_size") < text.index("beta")
    assert (tmp_path / "run.yaml.trl-doctor.bak").read_text() == YAML
    assert _fixer.plan([fix]) == []  # idempotent


def test_json_edit_keeps_order_and_indent(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n    "b": 1,\n    "a": 2,\n    "pad_token_id": null\n}\n')
    _fixer.apply(_fixer.plan([Fix("x", (Edit(str(path), set=(("pad_token_id", 0), ("a", DELETE))),))]))
    assert path.read_text() == '{\n    "b": 1,\n    "pad_token_id": 0\n}\n'


def test_backups_never_overwrite_each_other(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"v": 1}\n')
    for value in (2, 3):
        _fixer.apply(_fixer.plan([Fix("x", (Edit(str(path), set=(("v", value),)),))]))
    assert json.loads(path.read_text())["v"] == 3
    assert json.loads((tmp_path / "t.json.trl-doctor.bak").read_text())["v"] == 1
    assert json.loads((tmp_path / "t.json.trl-doctor.bak.1").read_text())["v"] == 2


def test_failed_write_leaves_the_original(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text('{"v": 1}\n')
    changes = _fixer.plan([Fix("x", (Edit(str(path), set=(("v", 2),)),))])

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(InputError, match="disk full; nothing was changed"):
        _fixer.apply(changes)
    assert path.read_text() == '{"v": 1}\n'
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temporary left behind


def test_whole_file_edit_and_diff(tmp_path):
    path = tmp_path / "new.txt"
    changes = _fixer.plan([Fix("x", (Edit(str(path), content=b"hello\n"),))])
    diff = _fixer.unified_diff(changes)
    assert "--- /dev/null" in diff and "+hello" in diff
    assert not path.exists()
    assert _fixer.apply(changes) == [(path, None)]
    assert path.read_text() == "hello\n"


def test_edit_requires_exactly_one_kind():
    with pytest.raises(ValueError):
        Edit("x.json")
    with pytest.raises(ValueError):
        Edit("x.json", set=(("a", 1),), content=b"")


def test_binary_files_are_not_printed_as_text(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00\xff" * 10)
    diff = _fixer.unified_diff(_fixer.plan([Fix("x", (Edit(str(path), content=b"\x01\xfe" * 12),))]))
    assert diff.startswith("Binary files a/") and "(20 -> 24 bytes)" in diff


def test_a_manual_fix_is_never_planned(tmp_path):
    from trl_doctor import manual

    cfg = tmp_path / "run.yaml"
    cfg.write_text(YAML)
    by_hand = manual("raise `ulimit -n` by hand")
    assert by_hand.applicability == "manual" and by_hand.edits == () and not by_hand.applies(True)
    assert _fixer.plan([by_hand]) == []
    # defensively, even one that somehow carries edits (a manual Fix refuses them when built)
    with pytest.raises(ValueError):
        Fix("x", (Edit(str(cfg), set=(("beta", 0.0),)),), applicability="manual")
    smuggled = Fix("x", (Edit(str(cfg), set=(("beta", 0.0),)),))
    object.__setattr__(smuggled, "applicability", "manual")
    assert _fixer.plan([smuggled]) == []
    safe = Fix("y", (Edit(str(cfg), set=(("num_generations", 4),)),))
    (change,) = _fixer.plan([smuggled, safe])
    assert b"num_generations: 4" in change.new and b"beta" not in change.new


MANUAL_RULES = '''
"""XT201 example-manual: a rule with a manual fix and a safe one."""
from trl_doctor import Edit, Fix, fail, manual, passed, rule, warn


@rule(id="XT201", slug="example-manual", title="A manual fix only")
def by_hand(ctx):
    yield fail("the open-file limit is too low", manual("raise `ulimit -n` to 65536 in the job script"))


@rule(id="XT202", slug="example-mixed", title="A safe fix and a manual one")
def mixed(ctx):
    if ctx.config.get("beta") != 0.0:
        yield fail("beta is not 0.0", Fix("set beta: 0.0", (Edit(str(ctx.config.path), set=(("beta", 0.0),)),)))
    else:
        yield passed("beta is 0.0")
    yield warn("the reward scale is unchecked", manual("check the reward scale by hand"))
'''


def _plugin_site(tmp_path):
    """A folder for PYTHONPATH holding the example rules as an installed distribution (a hand-written
    dist-info with the `trl_doctor.rules` entry point: what pip would leave, without running pip)."""
    site = tmp_path / "site"
    dist = site / "xt_manual_rules-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "xt_manual_rules.py").write_text(MANUAL_RULES)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: xt-manual-rules\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[trl_doctor.rules]\nexample = xt_manual_rules\n")
    return site


def test_check_fix_applies_no_manual_fix_and_keeps_the_safe_edits(built_fixtures, tmp_path):
    """Through the real command, with two example rules installed as a plugin."""
    from conftest import run_doctor

    env = {"PYTHONPATH": str(_plugin_site(tmp_path))}
    cfg = tmp_path / "run.yaml"
    original = f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\nbeta: 0.1  # KL\nnum_generations: 2\n"
    cfg.write_text(original)
    select = ("--no-smoke", "--select", "XT201,XT202")

    before = run_doctor("check", str(cfg), *select, "--format", "json", env=env)
    assert before.stdout, before.stderr
    results = {r["id"]: r for r in json.loads(before.stdout)["results"]}
    assert results["XT201"]["fix"]["applicability"] == "manual" and results["XT201"]["fix"]["files"] == []
    assert results["XT202"]["fix"]["applicability"] == "safe"  # the manual part does not hide the edit
    assert results["XT202"]["fix"]["description"] == "set beta: 0.0; by hand: check the reward scale by hand"
    assert results["XT202"]["location"]["line"] == 2 and results["XT202"]["location"]["key"] == "beta"

    proc = run_doctor("check", str(cfg), *select, "--fix", "--unsafe-fixes", env=env)
    assert cfg.read_text() == original.replace("beta: 0.1  # KL", "beta: 0.0  # KL"), proc.stderr
    assert [p.name for p in tmp_path.glob("run.yaml.trl-doctor.bak*")] == ["run.yaml.trl-doctor.bak"]
    assert "    fix (manual): raise `ulimit -n` to 65536 in the job script\n" in proc.stdout
    assert "    fix (manual): check the reward scale by hand\n" in proc.stdout  # XT202 now warns with its manual part only
    assert proc.returncode == 1  # the manual finding still fails
