"""The fixer on real files: key order and YAML comments kept, atomic writes with backups, idempotence,
and nothing written by a plan or a diff."""

from __future__ import annotations

import json
import os

import pytest

from trl_doctor import DELETE, Edit, Fix
from trl_doctor import _fixer

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
    with pytest.raises(OSError):
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
