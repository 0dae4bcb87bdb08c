"""The messages between the printing process and the check's one heavy worker, typed and versioned.

The printing process sends one `Request` (the worker's stdin, JSON); the worker answers with one JSON object
per line on its channel: `captured` (a launch command's script built its trainer: what was captured), `rule-start`, `result` (a Result, as `encode_result` writes it), the trainer run's
`trainer-run`, `trainer-stage` and `trainer-run-end` events, the fence's `user-code` and `user-code-end` (the user's code
runs: `what`, `key`, `limit`; see trl_doctor.runtime.fence), `input-error` (the check cannot go on: exit 2), and `done`. Each
line carries the protocol version; a line of another version is refused, never misread. Results round-trip
exactly (findings' fixes included, so `--fix` can apply what a worker found).

The channel is a pipe of its own (never the worker's stdout, which is its log, and never descriptors 0-2), inherited
by no process the worker starts. The encoder is bound when this module is imported, before any user code runs: a
reward module that replaces `json.dumps` (or JSONEncoder's methods) changes nothing the worker sends. A worker whose
channel is gone (the user's code closed it) exits with CHANNEL_LOST.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from trl_doctor.options import Options
from trl_doctor.types import DELETE, Edit, Fix, Location, Result, Status, plain

VERSION = 1
CHANNEL_LOST = 86  # the worker's exit status when its channel cannot be written (its code closed the descriptor)
KINDS = ("captured", "rule-start", "result", "trainer-run", "trainer-stage", "trainer-run-end", "user-code", "user-code-end",
         "input-error", "done")


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


def message(kind: str, **payload: Any) -> str:
    """One channel line."""
    if kind not in KINDS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    return _ENCODE_LENIENT({"version": VERSION, "kind": kind, **payload}) + "\n"


def read_message(line: str) -> dict[str, Any]:
    data = _checked(json.loads(line))
    if data.get("kind") not in KINDS:
        raise ProtocolError(f"unknown message kind {data.get('kind')!r}")
    return data


def _checked(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError("a message must be a JSON object")
    if data.get("version") != VERSION:
        raise ProtocolError(f"protocol version {data.get('version')!r}; this trl-doctor speaks version {VERSION}")
    return data


# -- results ------------------------------------------------------------------------------------------------

def encode_result(r: Result) -> dict[str, Any]:
    return {
        "id": r.id, "rule": r.rule, "title": r.title, "status": r.status.value, "message": r.message,
        "details": plain(r.details), "duration_s": r.duration_s,
        "fix": None if r.fix is None else _encode_fix(r.fix), "fix_applied": r.fix_applied,
        "location": None if r.location is None else dataclasses.asdict(r.location),
        "suppressed": r.suppressed,
    }


def decode_result(data: dict[str, Any]) -> Result:
    loc = data.get("location")
    return Result(
        id=data["id"], rule=data["rule"], title=data["title"], status=Status(data["status"]), message=data["message"],
        details=data.get("details") or {}, fix=_decode_fix(data["fix"]) if data.get("fix") else None,
        duration_s=data.get("duration_s", 0.0), fix_applied=bool(data.get("fix_applied")),
        location=Location(**loc) if loc else None, suppressed=data.get("suppressed"),
    )


def _encode_fix(fix: Fix) -> dict[str, Any]:
    return {"description": fix.description, "applicability": fix.applicability,
            "edits": [_encode_edit(e) for e in fix.edits]}


def _decode_fix(data: dict[str, Any]) -> Fix:
    return Fix(data["description"], tuple(_decode_edit(e) for e in data.get("edits") or ()),
               applicability=data.get("applicability") or "safe")


def _encode_edit(edit: Edit) -> dict[str, Any]:
    if edit.content is not None:
        return {"path": edit.path, "content": base64.b64encode(edit.content).decode("ascii")}
    return {"path": edit.path, "set": [[k, {"delete": True} if v is DELETE else {"value": v}] for k, v in edit.set]}


def _decode_edit(data: dict[str, Any]) -> Edit:
    if "content" in data:
        return Edit(data["path"], content=base64.b64decode(data["content"]))
    pairs = tuple((k, DELETE if v.get("delete") else v.get("value")) for k, v in data["set"])
    return Edit(data["path"], set=pairs)
