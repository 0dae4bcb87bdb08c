"""Where findings point: key positions in YAML and JSON files, a finding's location (its own or the one its
fix implies), a rule's finding that names a config key, and how the engine folds locations and fix applicabilities
into a Result."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trl_doctor import DELETE, Edit, Fix, Location, Status, fail, manual, passed, rule, warn
from trl_doctor.context.locations import key_position, locate

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome

YAML = """\
# GRPO run: num_generations: 99 in this comment must not be taken for the key
model_name_or_path: ./model   # the SFT checkpoint
model_init_kwargs:
  num_generations: 3          # a nested key of the same name is not the top-level one
  torch_dtype: bfloat16
"per_device_train_batch_size": 4
'beta': 0.0
  # an indented comment
num_generations: 8
reward_funcs: [a, b]
"""


@pytest.mark.parametrize("key, pos", [
    ("model_name_or_path", (2, 1)),
    ("model_init_kwargs", (3, 1)),
    ("per_device_train_batch_size", (6, 1)),  # a double-quoted key: its opening quote
    ("beta", (7, 1)),  # single-quoted
    ("num_generations", (9, 1)),  # after the comment and the nested key that share its name
    ("reward_funcs", (10, 1)),
    ("torch_dtype", None),  # nested, not top-level
    ("learning_rate", None),  # absent
])
def test_yaml_key_positions(tmp_path, key, pos):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(YAML)
    assert key_position(cfg, key) == pos


def test_yaml_flow_mapping_and_yml_suffix(tmp_path):
    cfg = tmp_path / "run.yml"
    cfg.write_text('{beta: 0.1,\n   "num_generations": 4}\n')
    assert key_position(cfg, "beta") == (1, 2)
    assert key_position(cfg, "num_generations") == (2, 4)


JSON = """\
{
  "nested": {"pad_token_id": 7, "list": [{"pad_token_id": 8}]},
  "esc\\"aped": "pad_token_id",
  "text": "\\"pad_token_id\\": 1",
  "pad_token_id": null,
    "eos_token_id": [1, 2]
}
"""


@pytest.mark.parametrize("key, pos", [
    ("nested", (2, 3)),
    ('esc"aped', (3, 3)),  # an escaped quote in a key
    ("pad_token_id", (5, 3)),  # not the nested ones, nor the string values that contain it
    ("eos_token_id", (6, 5)),
    ("list", None),
    ("missing", None),
])
def test_json_key_positions(tmp_path, key, pos):
    path = tmp_path / "config.json"
    path.write_text(JSON)
    assert json.loads(JSON)  # the fixture is valid JSON
    assert key_position(path, key) == pos


def test_json_one_line_bom_and_repeated_keys(tmp_path):
    path = tmp_path / "c.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": {"b": 1}, "b": 2, "b": 3}')
    assert key_position(path, "b") == (1, 25)  # the last one, whose value json.loads keeps; the BOM is no column
    assert key_position(path, "a") == (1, 2)


@pytest.mark.parametrize("name, data", [
    ("broken.json", b'{"a": 1,, "b": 2}'),
    ("list.json", b'[{"a": 1}]'),
    ("broken.yaml", b"a: [1, 2\nb: 3\n"),
    ("list.yaml", b"- a: 1\n"),
    ("empty.yaml", b""),
    ("binary.yaml", b"\x00\xff\xfe" * 10),
    ("multi.yaml", b"a: 1\n---\nb: 2\n"),
])
def test_unreadable_or_unexpected_files_give_none(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    assert key_position(path, "a") is None


def test_missing_path_and_folder_give_none(tmp_path):
    assert key_position(tmp_path / "nope.yaml", "a") is None
    assert key_position(tmp_path, "a") is None


def test_large_files_are_not_parsed(tmp_path, monkeypatch):
    import trl_doctor.context.locations as loc

    path = tmp_path / "c.json"
    path.write_text('{"a": 1}')
    assert key_position(path, "a") == (1, 2)
    monkeypatch.setattr(loc, "MAX_BYTES", 4)
    assert key_position(path, "a") is None


# -- locate ---------------------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(YAML)
    tok = tmp_path / "model" / "tokenizer_config.json"
    tok.parent.mkdir()
    tok.write_text(JSON)
    return SimpleNamespace(cfg=cfg, tok=tok)


def test_a_findings_own_location_gets_its_line_from_the_file(files):
    got = locate(fail("x", location=Location(str(files.cfg), "num_generations")), files.cfg)
    assert got == Location(str(files.cfg), "num_generations", 9, 1)


def test_a_findings_own_line_is_kept(files):
    own = Location(str(files.cfg), "num_generations", 3, 5)
    assert locate(warn("x", location=own), files.cfg) == own
    assert locate(warn("x", location=Location(str(files.cfg))), files.cfg) == Location(str(files.cfg))


def test_the_location_comes_from_the_fix_preferring_the_config(files):
    fix = Fix("x", (Edit(str(files.tok), set=(("pad_token_id", 0),)),
                    Edit(str(files.cfg), set=(("beta", 0.1), ("num_generations", 2)))))
    assert locate(fail("x", fix), files.cfg) == Location(str(files.cfg), "beta", 7, 1)
    # with no config edit (or no config known), the first key edit
    assert locate(fail("x", fix), None) == Location(str(files.tok), "pad_token_id", 5, 3)
    only_tok = Fix("x", (Edit(str(files.tok), set=(("eos_token_id", DELETE),)),))
    assert locate(fail("x", only_tok), files.cfg) == Location(str(files.tok), "eos_token_id", 6, 5)


def test_a_key_the_fix_adds_has_no_line_and_a_whole_file_edit_only_a_file(files):
    assert locate(fail("x", Fix("x", (Edit(str(files.cfg), set=(("gradient_accumulation_steps", 4),)),))), files.cfg) \
        == Location(str(files.cfg), "gradient_accumulation_steps")
    weights = files.tok.parent / "model.safetensors"
    assert locate(fail("x", Fix("x", (Edit(str(weights), content=b"w"),), unsafe=True)), files.cfg) == Location(str(weights))


def test_no_location_without_one_or_a_fix(files):
    assert locate(fail("x"), files.cfg) is None
    assert locate(fail("x", manual("do it by hand")), files.cfg) is None


def test_a_finding_that_names_a_config_key_gets_its_line(files):
    # vllm-tokenizer-drift points its findings at `generation_kwargs` so: the file and the key; the engine the line
    from trl_doctor.rules.vllm_tokenizer_drift import _config_key

    ctx = SimpleNamespace(config=SimpleNamespace(path=files.cfg, raw={"num_generations": 8, "beta": 0.0}))
    assert locate(fail("x", location=_config_key(ctx, "num_generations")), files.cfg) == \
        Location(str(files.cfg), "num_generations", 9, 1)
    assert locate(fail("x", location=_config_key(ctx, "learning_rate")), files.cfg) == \
        Location(str(files.cfg), "learning_rate")


# -- the engine: Result.location and merged applicabilities --------------------------------------------


@pytest.fixture()
def ctx(built_fixtures, tmp_path):
    from trl_doctor import Context
    from trl_doctor.context.config import load_config

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"model_name_or_path: {built_fixtures / 'models' / 'qwen2-chat'}\nbeta: 0.0\nnum_generations: 2\n")
    with Context(load_config(cfg)) as c:
        yield c


def _run(ctx, *findings):
    from trl_doctor.engine import run_rule

    @rule(id="XT901", slug="example-findings", title="returns the findings it is given")
    def check(_ctx):
        yield from findings

    return run_rule(check, ctx)


def test_result_location_is_the_worst_findings(ctx):
    path = str(ctx.config.path)
    r = _run(ctx, passed("ok", location=Location(path, "beta")),
             fail("bad", Fix("set num_generations: 4", (Edit(path, set=(("num_generations", 4),)),))))
    assert r.status is Status.FAIL
    assert r.location == Location(path, "num_generations", 3, 1)
    assert r.fix.applicability == "safe" and r.fix.files == (path,)
    assert _run(ctx, passed("fine")).location is None


def test_fix_merging_keeps_edits_and_takes_the_most_restrictive(ctx):
    path = str(ctx.config.path)
    safe = Fix("set beta: 0.1", (Edit(path, set=(("beta", 0.1),)),))
    unsafe = Fix("rewrite the weights", (Edit(path + ".w", content=b"w"),), unsafe=True)
    by_hand = manual("raise the ulimit")

    r = _run(ctx, fail("a", safe), warn("b", by_hand))
    assert r.fix.applicability == "safe" and not r.fix_applied
    assert r.fix.edits == safe.edits  # the manual part did not make the edit disappear
    assert r.fix.description == "set beta: 0.1; by hand: raise the ulimit"

    r = _run(ctx, fail("a", safe), warn("b", unsafe), warn("c", by_hand))
    assert r.fix.applicability == "unsafe" and r.fix.unsafe
    assert r.fix.edits == safe.edits + unsafe.edits and r.fix.files == (path, path + ".w")

    r = _run(ctx, fail("a", by_hand), warn("b", manual("pin torch")))
    assert r.fix.applicability == "manual" and r.fix.edits == ()
    assert r.fix.description == "raise the ulimit; pin torch" and r.fix.files == ()

    r = _run(ctx, fail("a", by_hand))
    assert r.fix is by_hand
