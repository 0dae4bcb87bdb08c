"""The messages across the process boundaries round-trip exactly and refuse another protocol version, kind or
shape: every kind of the worker's typed messages (its results with their fixes, edits and locations) as the
printing process gets them, and the trainer run's Spec and RunResult as the supervisor hands them to a fresh
worker."""

from __future__ import annotations

import json
import re

import pytest

from trl_doctor import DELETE, Edit, Fix, Location, Status, manual
from trl_doctor.options import DEFAULTS, Options
from trl_doctor.protocol import (MESSAGES, VERSION, BadInput, CaptureAgain, Captured, Done, ProtocolError, Request, RuleResult,
                                 RuleStart, TrainerRun, TrainerRunEnd, TrainerStage, UserCode, UserCodeEnd, WillRun,
                                 read_message)
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
    back = read_message(RuleResult(r).to_line())
    assert isinstance(back, RuleResult)
    back = back.result
    assert back.fix == r.fix and back.fix_applied == r.fix_applied and back.location == r.location
    assert (back.id, back.status, back.message, back.duration_s) == (r.id, r.status, r.message, r.duration_s)
    assert back.details == {"a": [1, 2], "p": "object"}  # plain JSON: what every format prints anyway
    if fix is not None and fix.edits and fix.edits[0].set:
        assert back.fix.edits[0].set[1][1] is DELETE


EVERY_KIND = [
    Captured("accelerate launch train.py", "grpo", "trl.GRPOTrainer", "/w/train.py:12", "/w/train.py", None,
             {"attn_implementation": "FlashAttention is not installed here"}, ("--mixed_precision not read",)),
    Captured("python t.py", "rloo", None, None, None, "/w/recipe.yaml", {}, ()),
    RuleStart("TD006"),
    RuleResult(Result("TD001", "pad-token", "t", Status.WARN, "m", {"ids": [1, 2]}, manual("raise ulimit -n"), 0.25,
                      suppressed="config.yaml:3")),
    TrainerRun({"device": "cpu", "model": "twin", "precision": "fp32"}, 300.0, "grpo"),
    TrainerStage("train", 1.25),
    TrainerRunEnd(False),
    UserCode("rewards.py (importing rewards.f)", "rewards.f", 60.0, 1234),
    UserCode("chat template", "chat template", 5.0),  # no log offset: the supervisor measures the log itself
    UserCodeEnd("rewards.f"),
    BadInput("config.yaml: no such file"),
    CaptureAgain(4, "train.py's set-up for 4 ranks needs a GPU this machine lacks (RuntimeError: ...)"),
    WillRun("trl 1.16.0's GRPOConfig, as it resolves this config", {"processes": "8 processes", "loss": "dapo"}),
    Done(),
]


@pytest.mark.parametrize("msg", EVERY_KIND, ids=lambda m: m.kind)
def test_every_message_kind_round_trips_typed(msg):
    line = msg.to_line()
    assert line.endswith("\n") and line.count("\n") == 1  # one line on the channel, whatever the text holds
    assert json.loads(line)["version"] == VERSION and json.loads(line)["kind"] == msg.kind
    back = read_message(line)
    assert type(back) is type(msg) and back == msg


def test_the_round_trip_covers_every_kind():
    assert {m.kind for m in EVERY_KIND} == set(MESSAGES)


def test_the_lenient_encoder_sends_what_json_cannot_hold_as_text():
    """A result's details and a capture's text come from the user's code: an object JSON cannot hold is sent as its
    str, and text that looks like JSON or holds newlines stays one line and comes back as it was."""
    class Odd:
        def __str__(self):
            return "odd object"

    r = Result("TD006", "smoke-step", "t", Status.FAIL, 'a "quoted"\nline}', {"value": Odd()}, None, 0.0)
    back = read_message(RuleResult(r).to_line()).result
    assert back.details == {"value": "odd object"} and back.message == 'a "quoted"\nline}'
    line = TrainerRun({"dtype": Odd()}, 10.0, "grpo").to_line()
    assert read_message(line) == TrainerRun({"dtype": "odd object"}, 10.0, "grpo")


def test_another_protocol_version_is_refused():
    line = json.loads(Done().to_line())
    line["version"] = VERSION - 1  # a worker forked from a fork server that imported the previous release
    with pytest.raises(ProtocolError, match=f"protocol version {VERSION - 1}; this trl-doctor speaks version {VERSION}"):
        read_message(json.dumps(line))
    with pytest.raises(ProtocolError):
        Request.from_json(json.dumps({"version": VERSION + 1, "config": "c", "rules": []}))
    with pytest.raises(ProtocolError):
        run_protocol.RunResult.from_json({"version": 0, "outcome": "ok", "details": {}})


def _line(**fields) -> str:
    return json.dumps({"version": VERSION, **fields})


@pytest.mark.parametrize("line, words", [
    (_line(kind="shout"), "unknown message kind 'shout'"),
    (_line(), "unknown message kind None"),
    (_line(kind=["done"]), "unknown message kind"),
    ("[1, 2]", "a message must be a JSON object"),
    (_line(kind="done", extra=1), "unknown fields: extra"),
    (_line(kind="rule-start"), "without id"),
    (_line(kind="rule-start", id="TD001", name="pad-token"), "unknown fields: name"),
    (_line(kind="rule-start", id=7), "'rule-start' message's id is int"),
    (_line(kind="user-code", what="w", key="k", limit="60"), "limit is str"),
    (_line(kind="user-code", what="w", key="k", limit=60, log_offset=True), "log_offset is bool"),
    (_line(kind="user-code", what="w", key="k", limit=60, log_offset=1.5), "log_offset is float"),
    (_line(kind="trainer-run-end", ok=1), "ok is int"),
    (_line(kind="trainer-run", details=[], limit=1, trainer="grpo"), "details is list"),
    (_line(kind="captured", command="c", trainer="grpo", trainer_class=None, constructed_at=None, script=None,
           recipe=None, relaxed={"a": 1}, notes=[]), "relaxed is int"),
    (_line(kind="captured", command="c", trainer="grpo", trainer_class=None, constructed_at=None, script=None,
           recipe=None, relaxed={}, notes="abc"), "notes is str"),
    (_line(kind="input-error", message=None), "message is NoneType"),
    (_line(kind="result", result=[]), "result is list"),
])
def test_a_line_of_another_shape_is_refused(line, words):
    with pytest.raises(ProtocolError, match=re.escape(words)):
        read_message(line)


def _result_line(**changes) -> str:
    data = json.loads(RuleResult(_result(Fix("set x", (Edit("/c.yaml", set=(("x", 1),)),)),
                                         Location("/c.yaml", "x", 2, 1))).to_line())
    data["result"].update(changes)
    return json.dumps(data)


@pytest.mark.parametrize("changes, words", [
    ({"pending_fix": None}, "a result with unknown fields: pending_fix"),  # the previous protocol's field
    ({"status": "great"}, "'great' is not a valid Status"),
    ({"fix_applied": "yes"}, "fix_applied is str"),
    ({"duration_s": None}, "duration_s is NoneType"),
    ({"location": {"file": "/c.yaml", "line": "2"}}, "a result's location's line is str"),
    ({"location": {"path": "/c.yaml"}}, "a result's location with unknown fields: path"),
    ({"fix": {"description": "d", "applicability": "sometimes", "edits": []}}, "applicability is one of"),
    ({"fix": {"description": "d", "applicability": "safe", "edits": [{"path": "/c.yaml"}]}}, "exactly one of"),
    ({"fix": {"description": "d", "applicability": "safe", "edits": [{"path": "/c", "set": [], "mode": 1}]}},
     "unknown fields: mode"),
    ({"fix": {"description": "d", "applicability": "manual", "edits": [{"path": "/c", "content": "eA=="}]}},
     "carries no edits"),
])
def test_a_result_of_another_shape_is_refused(changes, words):
    with pytest.raises(ProtocolError, match=re.escape(words)):
        read_message(_result_line(**changes))


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
