"""The cheap checks every input passes before a library parses it (trl_doctor/context/config.py,
trl_doctor/context/inputs.py, rules/model_files.py (the weights' headers), trl_doctor/facts/trl/parsing.py): each
broken input is one InputError naming the file and what is wrong, or a finding naming the key; none reaches a rule as
a crash. The command-line view of the same inputs is tests/test_fuzz.py."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from conftest import FIXTURES, run_doctor
from trl_doctor.context.config import load_raw
from trl_doctor.errors import InputError
from trl_doctor.context.inputs import check_dataset_file, check_model_config, check_tokenizer_files
from trl_doctor.facts.trl.parsing import parse_as_trl
from trl_doctor.rules.model_files import weights

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


def raises(fn, *args, match: str):
    with pytest.raises(InputError) as info:
        fn(*args)
    assert match in str(info.value), str(info.value)
    return str(info.value)


# -- the config file ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, match", [
    (b"- 1\n- 2\n", "not a list"),
    (b"just text\n", "not a plain string"),
    (b"a: " + b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b"model_name_or_path: m\n# caf\xe9\n", "byte 0xe9 at offset 27 (line 2)"),
    (b"a: 1\x00\n", "NUL bytes"),
    (b"1: 2\n", "every key must be a name"),
    (b"model_name_or_path: [m\n", "invalid YAML at line 2"),
])
def test_a_broken_config_file_is_one_line(tmp_path, data, match):
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    message = raises(load_raw, str(path), match=match)
    assert str(path) in message and "\n" not in message


def test_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "c.json"
    path.write_bytes(b'\xef\xbb\xbf{"model_name_or_path": "m"}')
    assert load_raw(path) == {"model_name_or_path": "m"}


def test_deep_json_huge_files_and_pipes_are_refused_before_parsing(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    raises(load_raw, str(deep), match="nested too deeply")
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(11 * 2**20)
    raises(load_raw, str(huge), match="too large for a config file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    raises(load_raw, str(fifo), match="not a regular file")  # never opened: a pipe with no writer would hang


@pytest.mark.parametrize("ref, match", [
    ("mo\x00del", "NUL byte"),
    ("x" * 5000, "the path is too long"),
    ("d/" + "y" * 300, "the path is too long"),
    ("~nosuchuser-here/model", "is not a user on this machine"),
])
def test_paths_no_system_can_open_are_named(tmp_path, ref, match):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model_name_or_path": ref}))
    from trl_doctor.context.config import load_config

    message = raises(load_config, str(config), match=match)
    assert "`model_name_or_path`" in message


# -- the model folder ---------------------------------------------------------------------------------------------

@pytest.fixture()
def model(built_fixtures, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "models" / "qwen2-chat", folder)
    return folder


def edit_config(folder, **changes):
    path = folder / "config.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("changes, match", [
    ({"vocab_size": -5}, "`vocab_size` is -5; it must be a positive integer"),
    ({"vocab_size": 10**12}, "(at most 10,000,000)"),
    ({"num_attention_heads": 0}, "`num_attention_heads` is 0"),
    ({"hidden_size": 33}, "not divisible by `num_attention_heads`"),
    ({"vocab_size": "320"}, "`vocab_size` is '320'"),
    ({"model_type": None}, "has no `model_type`"),
])
def test_a_model_config_is_validated_before_anything_is_allocated(model, changes, match):
    edit_config(model, **changes)
    message = raises(check_model_config, model, match=match)
    assert message.startswith(str(model / "config.json"))


def test_model_config_files_that_are_not_json_objects(model):
    (model / "config.json").write_text("[1, 2]")
    raises(check_model_config, model, match="expected a JSON object of settings, not a list")
    (model / "config.json").write_text("{oops")
    raises(check_model_config, model, match="config.json: invalid JSON at line 1")
    (model / "config.json").unlink()
    raises(check_model_config, model, match="config.json: no such file")


def test_tokenizer_files_are_named_and_a_vocabulary_is_required(model):
    check_tokenizer_files(model)
    (model / "tokenizer.json").write_text("{bad")
    check_tokenizer_files(model)  # tokenizer.json (megabytes) is parsed only to name the fault after a failed load
    raises(check_tokenizer_files, model, True, True, match="tokenizer.json: invalid JSON")
    (model / "tokenizer.json").unlink()
    raises(check_tokenizer_files, model, match="no tokenizer vocabulary")


# -- the dataset file ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, data, match", [
    ("d.jsonl", b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n', "byte 0xe9 at offset 31 (line 2)"),
    ("d.jsonl", b"", "is empty (no rows)"),
    ("d.jsonl", b"\n\n", "is empty (no rows)"),
    ("d.jsonl", b'{"prompt": "a"}\n{bad\n', "line 2: invalid JSON"),
    ("d.jsonl", b"[1]\n", "line 1: a row must be a JSON object, not a list"),
    ("d.json", b'[{"prompt": 1},', "invalid JSON"),
    ("d.parquet", b"\x00" * 100, "not a parquet file"),
    ("d.parquet", b"PAR1" + b"\x00" * 100, "truncated parquet file"),
])
def test_a_broken_dataset_file_names_the_line(tmp_path, name, data, match):
    path = tmp_path / name
    path.write_bytes(data)
    raises(check_dataset_file, path, match=match)


def test_healthy_dataset_files_pass(tmp_path):
    check_dataset_file(FIXTURES / "data" / "chat.jsonl")
    array = tmp_path / "rows.json"
    array.write_text(json.dumps([{"prompt": "a"}, {"prompt": "b"}], indent=2))
    check_dataset_file(array)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "data" / "chat.jsonl").read_bytes())
    check_dataset_file(bom)


# -- weights, from the headers --------------------------------------------------------------------------------------

def test_whole_cut_and_lying_safetensors(model):
    whole = weights(model)
    assert whole.format == "safetensors" and not whole.problems and whole.tensors > 10
    path = model / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])
    (problem,) = weights(model).problems
    assert "cut short" in problem[1]
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [s * 2 for s in header[name]["shape"]]
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + n:])
    (problem,) = weights(model).problems
    assert f"tensor {name!r} spans" in problem[1]
    path.write_bytes(b"\xff" * 64)
    assert "not a safetensors file" in weights(model).problems[0][1]
    path.unlink()
    assert weights(model).format == "none"


# -- values as TRL's parser takes them --------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, match", [
    ("per_device_train_batch_size", [2], "expects a single int, not a list"),
    ("num_generations", {"a": 1}, "expects a single int, not a dict"),
    ("per_device_train_batch_size", None, "takes no null"),
    ("learning_rate", float("nan"), "expects a finite float, not nan"),
    ("max_steps", float("inf"), "expects a finite int, not inf"),
    ("num_generations", 10**30, "is past any real run"),
    ("gradient_accumulation_steps", 2.5, "expects int, not a fraction"),
    ("num_generations", True, "expects int, not a bool"),
    ("bf16", [True], "expects a single bool"),
])
def test_values_of_the_wrong_type_or_size_are_refused(key, value, match):
    parsed = parse_as_trl("grpo", {key: value})
    assert parsed is not None
    assert match in parsed.errors[key], parsed.errors
    assert parsed.errors[key].startswith(f"`{key}: ")


@pytest.mark.parametrize("key, value", [
    ("max_prompt_length", None), ("seed", 2**40), ("reward_weights", [1.0, 0.5]), ("model_init_kwargs", {"a": 1}),
    ("max_steps", 2.0), ("learning_rate", 1), ("per_device_train_batch_size", 4), ("bf16", False),
])
def test_healthy_values_are_not_refused(key, value):
    assert parse_as_trl("grpo", {key: value}).errors == {}


def test_the_batch_planner_stays_small_for_a_huge_value():
    from trl_doctor.rules.batch_geometry import _values_near

    assert len(_values_near(10**9)) < 600
    assert _values_near(8) == list(range(1, 33))


def test_an_unexpected_stop_is_one_line_and_names_the_input():
    from trl_doctor.front.output import unexpected

    assert unexpected(RecursionError(), "c.yaml", False) == "c.yaml: an input is nested too deeply to check"
    line = unexpected(ValueError("x\ny"), "c.yaml", False)
    assert line == "c.yaml: the check stopped on ValueError: x (-v shows the traceback)"
    assert unexpected(KeyError("k"), "log.json", True, "the watch") == "log.json: the watch stopped on KeyError: 'k'"


def test_the_command_names_the_model_config_not_the_tokenizer(model, tmp_path):
    edit_config(model, vocab_size=-5)
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: model\ndataset_path: d.jsonl\n")
    shutil.copy(FIXTURES / "data" / "chat.jsonl", tmp_path / "d.jsonl")
    proc = run_doctor("check", str(config), "--no-smoke", "--select", "pad-token")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"trl-doctor: error: {model / 'config.json'}: `vocab_size` is -5; it must be a positive integer"


def _can_mount_in_own_namespace() -> bool:
    import subprocess

    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_mount_in_own_namespace(), reason="needs root and a mount namespace (unshare -m) to give "
                                                                "the check a full TMPDIR")
@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_full_tmpdir_is_one_line_exit_2_naming_it(built_fixtures, tmp_path):
    """Issue 44: TMPDIR on a 64 KiB disk (a tmpfs in the test's own mount namespace: nothing of this machine's is
    filled). The check's model twin cannot be written: one line naming the scratch folder, not three rule errors."""
    import subprocess

    from conftest import trl_doctor_exe

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    case = FIXTURES / "smoke-step" / "ok_grpo_qwen2.yaml"
    script = f"mount -t tmpfs -o size=64k tmpfs {tiny} && TMPDIR={tiny} {trl_doctor_exe()} check {case}"
    env = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FORKSERVER"}  # its workers see no such mount
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no space left on the disk of the check's scratch folder" in lines[0], lines
    assert str(tiny) in lines[0] and "TMPDIR" in lines[0] and not proc.stdout.strip()
