"""The messages across the process boundaries round-trip exactly and refuse another protocol version: a
worker's results (fixes, edits, locations) as the printing process gets them, and the trainer run's Spec and
RunResult as the supervisor hands them to a fresh worker."""

from __future__ import annotations

import json

import pytest

from trl_doctor import DELETE, Edit, Fix, Location, Status, manual
from trl_doctor.options import DEFAULTS, Options
from trl_doctor.protocol import VERSION, ProtocolError, Request, decode_result, encode_result, message, read_message
from trl_doctor.types import Result
from trl_doctor.facts.trainer_run import protocol as run_protocol

pytestmark = pytest.mark.release_free  # the doctor's own code: no release changes the outcome


def _result(fix: Fix | None, location: Location | None, applied: bool = False) -> Result:
    return Result("TD010", "batch-geometry", "t", Status.FAIL, "m", {"a": (1, 2), "p": object.__name__}, fix, 0.5,
                  location, fix_applied=applied)


@pytest.mark.parametrize("fix", [
    Fix("set and delete", (Edit("/c.yaml", set=(("num_generations", 8), ("generation_batch_size", DELETE))),)),
    Fix("whole file", (Edit("/m/tokenizer.json", content=b"\x00\xffbytes"),), unsafe=True),
    manual("raise ulimit -n"),
    None,
])
def test_results_round_trip_through_a_channel_line(fix):
    r = _result(fix, Location("/c.yaml", "num_generations", 3, 1) if fix else None, applied=fix is not None)
    back = decode_result(read_message(message("result", result=encode_result(r)))["result"])
    assert back.fix == r.fix and back.fix_applied == r.fix_applied and back.location == r.location
    assert (back.id, back.status, back.message, back.duration_s) == (r.id, r.status, r.message, r.duration_s)
    assert back.details == {"a": [1, 2], "p": "object"}  # plain JSON: what every format prints anyway
    if fix is not None and fix.edits and fix.edits[0].set:
        assert back.fix.edits[0].set[1][1] is DELETE


def test_another_protocol_version_is_refused():
    line = json.loads(message("done"))
    line["version"] = 99
    with pytest.raises(ProtocolError, match="protocol version 99"):
        read_message(json.dumps(line))
    with pytest.raises(ProtocolError):
        read_message(json.dumps({"version": VERSION, "kind": "shout"}))
    with pytest.raises(ProtocolError):
        Request.from_json(json.dumps({"version": VERSION + 1, "config": "c", "rules": []}))
    with pytest.raises(ProtocolError):
        run_protocol.RunResult.from_json({"version": 0, "outcome": "ok", "details": {}})


def test_trainer_run_messages_round_trip():
    spec = run_protocol.Spec(trainer="grpo", device="cpu", model_path="/t", tokenizer_path="/t", model_label="twin",
                             work_dir="/w", user_dir="/u", config={"beta": 0.0}, overrides={"max_steps": 1},
                             rows=[{"prompt": "hi"}], reward_funcs=["rewards.f"], force_token_id=2)
    run = run_protocol.RunResult("crashed", spec.details(), spec=spec, log_tail="x", last_stage="train", code=-11)
    back = run_protocol.RunResult.from_json(json.loads(json.dumps(run.to_json())))
    assert back == run and back.spec.details() == {"device": "cpu", "model": "twin", "precision": "fp32"}
    assert run_protocol.Stage.from_json(run_protocol.Stage("train", 1.5).to_json()) == run_protocol.Stage("train", 1.5)
    with pytest.raises(run_protocol.ProtocolError):
        run_protocol.RunResult("exploded", {})
    request = Request("/c.yaml", ("TD001", "TD006"), Options(smoke=False, target="8xH100-80GB"), done=("TD001",))
    back = Request.from_json(request.to_json())
    assert back == request and isinstance(back.options, Options) and back.options.smoke is False


def test_the_options_cross_the_pipe_typed_and_an_unknown_one_is_refused():
    sent = json.loads(Request("/c.yaml", ("TD001",), Options(user_code_timeout=5.0)).to_json())
    assert sent["options"]["user_code_timeout"] == 5.0 and sent["options"]["smoke_timeout"] == DEFAULTS.smoke_timeout
    sent["options"]["no_such_knob"] = 1
    with pytest.raises(ProtocolError, match="no_such_knob"):
        Request.from_json(json.dumps(sent))


def test_each_default_is_written_once_and_the_command_line_shows_it():
    from click.testing import CliRunner

    from trl_doctor.front.cli import main

    help_text = " ".join(CliRunner().invoke(main, ["check", "--help"], terminal_width=400).output.split())
    for flag, value in (("--smoke-timeout", DEFAULTS.smoke_timeout), ("--script-timeout", DEFAULTS.script_timeout),
                        ("--user-code-timeout", DEFAULTS.user_code_timeout)):
        assert f"{flag} " in help_text and f"[default: {value}" in help_text.split(flag, 1)[1].split("--", 1)[0]
