"""The snapshot files' own machinery (tests/case_snapshots.py): what a missing, changed or stale snapshot does with
and without the update switch, which lanes compare, and which paths are made machine-independent."""

from __future__ import annotations

import os
import site
import tempfile
from pathlib import Path

import pytest

import case_snapshots as snapshots
from conftest import FIXTURES

pytestmark = pytest.mark.release_free  # the test suite's own code: no release changes the outcome

BODY = "TD001 pad-token: warn\nthe tokenizer has no pad token\n\n--diff: no fix would change any file\n"
COMMAND = "trl-doctor check <fixtures>/pad-token/bad_x.yaml --select TD001 --diff --format json"


def test_a_missing_snapshot_fails_and_is_written_only_under_the_switch(tmp_path):
    path = tmp_path / "snapshots" / "bad_x.yaml.snap"
    with pytest.raises(pytest.fail.Exception, match="no snapshot bad_x.yaml.snap.*--snapshot-update"):
        snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, BODY, update=False)
    assert not path.exists()
    assert snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, BODY, update=True) == "written"
    fields, body = snapshots.split(path.read_text())
    assert body == BODY and fields["case"] == "pad-token/bad_x.yaml" and fields["command"] == COMMAND
    assert fields["lane"] == snapshots.lane()
    assert snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, BODY, update=False) == "same"


def test_a_changed_report_fails_with_the_difference_and_the_way_to_update(tmp_path):
    path = tmp_path / "bad_x.yaml.snap"
    path.write_text(snapshots.header("pad-token/bad_x.yaml", COMMAND, snapshots.lane()) + BODY)
    changed = BODY.replace("no pad token", "no pad token at all")
    with pytest.raises(pytest.fail.Exception) as failed:
        snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, changed, update=False)
    text = str(failed.value)
    assert "-the tokenizer has no pad token\n+the tokenizer has no pad token at all" in text
    assert "update it: python -m pytest --snapshot-update" in text and snapshots.UPDATE_ENV in text
    assert snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, changed, update=True) == "written"
    assert snapshots.split(path.read_text())[1] == changed


def test_a_changed_command_fails_too(tmp_path):
    path = tmp_path / "bad_x.yaml.snap"
    path.write_text(snapshots.header("pad-token/bad_x.yaml", COMMAND, snapshots.lane()) + BODY)
    with pytest.raises(pytest.fail.Exception, match="--sample 2"):
        snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND + " --sample 2", BODY, update=False)


def test_only_the_recorded_lane_and_newer_ones_compare(tmp_path, monkeypatch):
    releases = {"trl": "1.16.0", "transformers": "5.23.0", "vllm": None}
    monkeypatch.setattr(snapshots, "installed", releases.get)
    recorded = "trl 1.16.0, transformers 5.23.0, vllm -"
    assert snapshots.comparable(recorded)
    releases.update(trl="1.17.0")  # the default lane after an upgrade: the diff shows what the release changed
    assert snapshots.comparable(recorded)
    releases.update(trl="0.15.2", transformers="4.48.3")  # the legacy lane: statuses only
    assert not snapshots.comparable(recorded)
    releases.update(trl="1.16.0", transformers="5.23.0", vllm="0.31.0")  # the vLLM lane
    assert not snapshots.comparable(recorded)
    path = tmp_path / "bad_x.yaml.snap"
    path.write_text(snapshots.header("pad-token/bad_x.yaml", COMMAND, recorded) + BODY)
    assert snapshots.assert_matches(path, "pad-token/bad_x.yaml", COMMAND, "other\n", update=True).startswith(
        "not compared")
    assert snapshots.split(path.read_text())[1] == BODY  # not rewritten by another lane


def test_machine_paths_become_placeholders(tmp_path):
    sp = next(p for p in site.getsitepackages() if os.path.isdir(p))
    text = (f"tokenizer: {FIXTURES}/models/gpt2-nopad\n"
            f"the trainer at {sp}/trl/trainer/grpo_trainer.py:401\n"
            f"copied to {tempfile.gettempdir()}/pytest-of-ann/pytest-7/test_x0/fixtures, then {Path.home()}/.cache/hf.\n"
            f"--- a/{str(FIXTURES).lstrip('/')}/models/gpt2-nopad/config.json\n")
    out = snapshots.normalise(text, {FIXTURES: "<fixtures>"})
    assert out == ("tokenizer: <fixtures>/models/gpt2-nopad\n"
                   "the trainer at <site-packages>/trl/trainer/grpo_trainer.py:401\n"
                   "copied to <tmp>/..., then ~/.cache/hf.\n"
                   "--- a/<fixtures>/models/gpt2-nopad/config.json\n")


def test_a_stale_snapshot_is_found(tmp_path):
    (tmp_path / "pad-token" / "snapshots").mkdir(parents=True)
    kept, stale = (tmp_path / "pad-token" / "snapshots" / f"{n}.snap" for n in ("bad_x.yaml", "bad_renamed.yaml"))
    kept.write_text(BODY)
    stale.write_text(BODY)
    assert snapshots.orphans(tmp_path, {tmp_path / "pad-token": {"bad_x.yaml"}}) == [stale]
