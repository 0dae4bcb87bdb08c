"""The messages between the printing process and the check's one heavy worker, typed and versioned.

The printing process sends one `Request` (the worker's stdin, JSON); the worker answers with one JSON object per
line on its channel, each line one `Message` (a frozen dataclass per kind, written by `to_line`, read back by
`read_message`): `captured` (a launch command's script built its trainer: what was captured), `will-run` (the
job as the installed TRL will run it, for the report's head), `rule-start`,
`result` (a Result, as `encode_result` writes it), the trainer run's `trainer-run`, `trainer-stage` and
`trainer-run-end`, the fence's `user-code` and `user-code-end` (the user's code runs: `what`, `key`, `limit`; see
trl_doctor.runtime.fence), `input-error` (the check cannot go on: exit 2), and `done`. Each line carries the
protocol version; a line of another version, an unknown kind, or a field missing, unknown or of another type is
refused (ProtocolError), never misread. Results round-trip exactly (fixes and their edits included, so `--fix` can
apply what a worker found).

VERSION is 2 since the messages became typed: a result carries its `fix` whole and `fix_applied` (no longer an
applied-fix summary beside a `pending_fix`), and `trainer-stage` no longer nests the trainer run's own versioned
Stage. Both ends are the same program, but a fork server started before trl-doctor changed (an upgrade, an edited
editable install) forks workers of the old code: their lines are refused by version, with a message saying so.

The channel is a pipe of its own (never the worker's stdout, which is its log, and never descriptors 0-2), inherited
by no process the worker starts. The encoders are bound when this module is imported, before any user code runs: a
reward module that replaces `json.dumps` (or JSONEncoder's methods) changes nothing the worker sends. Messages are
encoded leniently (`default=str`): a result's details, an error's text and a capture's notes carry the user's
objects and text, and an object JSON cannot hold is sent as its str rather than ending the worker. A worker whose
channel is gone (the user's code closed it) exits with CHANNEL_LOST.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trl_doctor.options import Options
from trl_doctor.types import DELETE, Edit, Fix, Location, Result, Status, plain

VERSION = 2
CHANNEL_LOST = 86  # the worker's exit status when its channel cannot be written (its code closed the descriptor)


class ProtocolError(ValueError):
    """A message of another protocol version or shape."""


class _Encoder(json.JSONEncoder):
    """json's encoder with its methods copied now: later changes to json's module or class do not reach it."""

    encode = json.JSONEncoder.encode
    iterencode = json.JSONEncoder.iterencode
    default = json.JSONEncoder.default


_ENCODE = _Encoder().encode
_ENCODE_LENIENT = _Encoder(default=str).encode


@dataclass(frozen=True)
class Request:
    """What one worker is asked to do: check `config` with these rules (in this order) and options."""

    config: str  # absolute path of the config file
    rules: tuple[str, ...]  # rule ids, in run order; those in `done` are skipped
    options: Options = field(default_factory=Options)
    done: tuple[str, ...] = ()  # rules a previous worker already reported (a resumed check)
    failed: dict[str, str] = field(default_factory=dict)  # user code that ended a previous worker: {fence key: cause}

    def to_json(self) -> str:
        return _ENCODE({"version": VERSION, **dataclasses.asdict(self)})  # options too: a nested dataclass

    @classmethod
    def from_json(cls, text: str) -> "Request":
        data = _checked(json.loads(text))
        try:
            options = Options.from_dict(dict(data.get("options") or {}))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(str(exc)) from None
        return cls(config=data["config"], rules=tuple(data["rules"]), options=options,
                   done=tuple(data.get("done") or ()), failed=dict(data.get("failed") or {}))


# -- the worker's messages ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Message:
    """One line the worker sends: each kind is a subclass, whose fields are the line's (`to_line`, `read_message`)."""

    kind: ClassVar[str] = ""

    def to_line(self) -> str:
        """The channel line, encoded leniently (default=str): details and messages carry the user's objects and text."""
        return _ENCODE_LENIENT({"version": VERSION, "kind": self.kind, **self._payload()}) + "\n"

    def _payload(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> "Message":
        return cls(**_typed(data, _hints(cls), f"a {cls.kind!r} message"))


@dataclass(frozen=True)
class Captured(Message):
    """A launch command's script built its trainer: what was captured (`capture.report.describe`), for the reports."""

    kind: ClassVar[str] = "captured"
    command: str
    trainer: str
    trainer_class: str | None
    constructed_at: str | None  # "file:line"
    script: str | None
    recipe: str | None
    relaxed: dict[str, str]  # {setting: why it was let through on this machine}
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """What the reports show under `launch` (in JSON's types)."""
        return {**self._payload(), "notes": list(self.notes)}


@dataclass(frozen=True)
class RuleStart(Message):
    kind: ClassVar[str] = "rule-start"
    id: str


@dataclass(frozen=True)
class RuleResult(Message):
    """A rule's Result, sent as soon as it is known (as `encode_result` writes it)."""

    kind: ClassVar[str] = "result"
    result: Result

    def _payload(self) -> dict[str, Any]:
        return {"result": encode_result(self.result)}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> "RuleResult":
        return cls(decode_result(_typed(data, {"result": (dict, True)}, "a 'result' message")["result"]))


@dataclass(frozen=True)
class TrainerRun(Message):
    """The trainer run starts: its limit (--smoke-timeout, seconds) counts from here."""

    kind: ClassVar[str] = "trainer-run"
    details: dict[str, Any]
    limit: float
    trainer: str


@dataclass(frozen=True)
class TrainerStage(Message):
    """The trainer run entered stage `name` (trl_doctor.facts.trainer_run.protocol.STAGES) after `elapsed_s`."""

    kind: ClassVar[str] = "trainer-stage"
    name: str
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class TrainerRunEnd(Message):
    kind: ClassVar[str] = "trainer-run-end"
    ok: bool


@dataclass(frozen=True)
class UserCode(Message):
    """The user's code `what` starts (trl_doctor.runtime.fence): stopped after `limit` seconds; `key` names it in
    Request.failed; `log_offset` is how far the worker's log is written (what the code prints comes after it); `at`
    is when it starts on the machine's monotonic clock (CLOCK_MONOTONIC, the same in every process)."""

    kind: ClassVar[str] = "user-code"
    what: str
    key: str
    limit: float
    log_offset: int | None = None
    at: float | None = None


@dataclass(frozen=True)
class UserCodeEnd(Message):
    kind: ClassVar[str] = "user-code-end"
    key: str
    at: float | None = None  # when it ended, as UserCode.at


@dataclass(frozen=True)
class BadInput(Message):
    """The check cannot go on (exit status 2): the one-line error."""

    kind: ClassVar[str] = "input-error"
    message: str


@dataclass(frozen=True)
class CaptureAgain(Message):
    """The launch's script could not run as rank 0 of its `launch_world` processes here (its rank set-up needs a GPU
    this machine lacks): a fresh worker captures it again at world size 1, and the report says `why`."""

    kind: ClassVar[str] = "capture-again"
    launch_world: int
    why: str


@dataclass(frozen=True)
class WillRun(Message):
    """What will run: the job as the installed TRL will run it (trl_doctor.facts.launch.will_run), sent before the
    first rule's result so that the report's head states it; not sent where the context cannot say."""

    kind: ClassVar[str] = "will-run"
    title: str
    lines: dict[str, str]  # {what: text}, in the order shown

    def as_dict(self) -> dict[str, Any]:
        """What the reports show under `will_run`."""
        return {"title": self.title, "lines": dict(self.lines)}


@dataclass(frozen=True)
class Done(Message):
    kind: ClassVar[str] = "done"


MESSAGES: dict[str, type[Message]] = {cls.kind: cls for cls in (
    Captured, RuleStart, RuleResult, TrainerRun, TrainerStage, TrainerRunEnd, UserCode, UserCodeEnd, BadInput, CaptureAgain, WillRun, Done)}


def read_message(line: str) -> Message:
    """The message on one channel line. ProtocolError for another version, an unknown kind, or a field missing,
    unknown or of another type: a line is never misread."""
    data = _checked(json.loads(line))
    kind = data.pop("kind", None)
    if not isinstance(kind, str) or kind not in MESSAGES:
        raise ProtocolError(f"unknown message kind {kind!r}")
    del data["version"]
    return MESSAGES[kind]._from_payload(data)


def _checked(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError("a message must be a JSON object")
    if data.get("version") != VERSION:
        raise ProtocolError(f"protocol version {data.get('version')!r}; this trl-doctor speaks version {VERSION}")
    return data


_Hints = dict[str, tuple[Any, bool]]  # {field: (its type, whether it is required)}
_HINTS: dict[type, _Hints] = {}


def _hints(cls: type) -> _Hints:
    """A dataclass's fields as `_typed` checks them (read once per class)."""
    if cls not in _HINTS:
        types_ = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: (types_[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                       for f in dataclasses.fields(cls)}
    return _HINTS[cls]


def _typed(data: Any, hints: _Hints, what: str) -> dict[str, Any]:
    """`data`'s fields checked against `hints` and made their Python types (a JSON list a tuple where one is asked)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ProtocolError(f"{what} with unknown fields: {', '.join(map(str, unknown))}")
    missing = [name for name, (_, required) in hints.items() if required and name not in data]
    if missing:
        raise ProtocolError(f"{what} without {', '.join(missing)}")
    return {name: _as(value, hints[name][0], f"{what}'s {name}") for name, value in data.items()}


def _as(value: Any, hint: Any, what: str) -> Any:
    """`value` as the type `hint`: str, int, float, bool, None, Any, list, dict, X | Y, dict[str, X], tuple[X, ...]."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arm in args:
            try:
                return _as(value, arm, what)
            except ProtocolError:
                pass
    elif origin is tuple and isinstance(value, list):
        return tuple(_as(v, args[0], what) for v in value)
    elif origin is dict and isinstance(value, dict):
        return {_as(k, args[0], what): _as(v, args[1], what) for k, v in value.items()}
    elif hint is float and type(value) in (int, float):
        return float(value)
    elif type(value) is hint:  # exact: a bool is no int here, and None only where NoneType is an arm
        return value
    raise ProtocolError(f"{what} is {type(value).__name__} {repr(value)[:60]}, not {getattr(hint, '__name__', hint)}")


# -- results ------------------------------------------------------------------------------------------------

_RESULT: _Hints = {"id": (str, True), "rule": (str, True), "title": (str, True), "status": (str, True),
                   "message": (str, True), "details": (dict, True), "duration_s": (float, True),
                   "fix": (dict | None, True), "fix_applied": (bool, True), "location": (dict | None, True),
                   "suppressed": (str | None, True)}
_FIX: _Hints = {"description": (str, True), "applicability": (str, True), "edits": (list, True)}
_EDIT: _Hints = {"path": (str, True), "content": (str, False), "set": (list, False)}


def encode_result(r: Result) -> dict[str, Any]:
    return {
        "id": r.id, "rule": r.rule, "title": r.title, "status": r.status.value, "message": r.message,
        "details": plain(r.details), "duration_s": r.duration_s,
        "fix": None if r.fix is None else _encode_fix(r.fix), "fix_applied": r.fix_applied,
        "location": None if r.location is None else dataclasses.asdict(r.location),
        "suppressed": r.suppressed,
    }


def decode_result(data: dict[str, Any]) -> Result:
    data = _typed(data, _RESULT, "a result")
    loc = data["location"]
    try:
        status = Status(data["status"])
        fix = None if data["fix"] is None else _decode_fix(_typed(data["fix"], _FIX, "a result's fix"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a status or applicability of no name, a bad edit
        raise ProtocolError(f"a result of rule {data['id']}: {exc}") from None
    return Result(
        id=data["id"], rule=data["rule"], title=data["title"], status=status, message=data["message"],
        details=data["details"], fix=fix, duration_s=data["duration_s"], fix_applied=data["fix_applied"],
        location=None if loc is None else Location(**_typed(loc, _hints(Location), "a result's location")),
        suppressed=data["suppressed"],
    )


def _encode_fix(fix: Fix) -> dict[str, Any]:
    return {"description": fix.description, "applicability": fix.applicability,
            "edits": [_encode_edit(e) for e in fix.edits]}


def _decode_fix(data: dict[str, Any]) -> Fix:
    return Fix(data["description"], tuple(_decode_edit(_typed(e, _EDIT, "a fix's edit")) for e in data["edits"]),
               applicability=data["applicability"])


def _encode_edit(edit: Edit) -> dict[str, Any]:
    if edit.content is not None:
        return {"path": edit.path, "content": base64.b64encode(edit.content).decode("ascii")}
    return {"path": edit.path, "set": [[k, {"delete": True} if v is DELETE else {"value": v}] for k, v in edit.set]}


def _decode_edit(data: dict[str, Any]) -> Edit:
    content = data.get("content")
    pairs = tuple((k, DELETE if v.get("delete") else v.get("value")) for k, v in data.get("set") or ())
    return Edit(data["path"], set=pairs, content=None if content is None else base64.b64decode(content))
