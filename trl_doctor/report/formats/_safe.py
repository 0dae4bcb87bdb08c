"""Untrusted text made harmless where a report is written.

Config keys, token strings, a reward's exception text, dataset values and file paths come from the repository
under check, which on a pull request is anyone's. Written raw they could inject GitHub workflow commands (a log
line that starts with `::`, or the older `##[`, after leading spaces: the runner trims them) and terminal escape
sequences, and control characters make XML invalid. Every format goes through one of these:

- `visible`: C0/C1 control characters (ESC included, so no ANSI sequence survives) become their `\\xNN` escape;
  newline and tab stay unless `one_line`;
- `no_commands`: a line that would start a workflow command gets a backslash first (the text stays readable);
- `xml_text`: what XML 1.0 cannot hold (controls, lone surrogates, U+FFFE/U+FFFF) becomes its escape;
- `clean_report`: a Report with every string of it passed through one of them (the formats render that).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any, Callable

from trl_doctor.types import Edit

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_COMMAND_START = re.compile(r"^(\s*)(::|##\[)", re.M)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, one_line: bool = False) -> str:
    """Control characters as their escapes; newlines and tabs kept unless `one_line`."""
    return (_CONTROL_ONE_LINE if one_line else _CONTROL).sub(_escape, text)


def no_commands(text: str) -> str:
    """No line of `text` starts a GitHub workflow command (`::cmd::`, `##[cmd]`), however indented."""
    return _COMMAND_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text)


def for_terminal(text: str, one_line: bool = False) -> str:
    """Text from the checked repository, fit for a terminal or a CI log."""
    return no_commands(visible(text, one_line))


def xml_text(text: str) -> str:
    """Text XML 1.0 can hold, with what it cannot as visible escapes."""
    return _NOT_XML.sub(_escape, text)


def xml_document(text: str) -> str:
    """A serialized XML document whose lines start no workflow command: the colon becomes a character
    reference, which an XML reader turns back into the same text."""
    return _COMMAND_START.sub(lambda m: m.group(1) + ("&#58;:" if m.group(2) == "::" else "&#35;#["), text)


_JSON_RAW = re.compile(r"[\x7f-\x9f\ud800-\udfff]")


def json_escapes(text: str) -> str:
    """A JSON document with DEL, C1 controls and lone surrogates written as `\\uXXXX` escapes (json.dumps writes
    them raw with ensure_ascii=False): the same data, nothing a terminal acts on."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean(value: Any, fn: Callable[[str], str]) -> Any:
    """`value` with every string in it (keys included, however nested) passed through `fn`."""
    if isinstance(value, enum.Enum):  # a Status is a str too: it stays what it is
        return value
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {clean(k, fn): clean(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean(v, fn) for v in value)
    if isinstance(value, Edit):  # of a fix's edits the reports show only the paths (the fix's files)
        return dataclasses.replace(value, path=fn(value.path))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: clean(getattr(value, f.name), fn)
                                             for f in dataclasses.fields(value) if f.init})
    return value


def clean_report(report, fn: Callable[[str], str]):
    """The Report with every string of it (results, paths, the launch, the settings in force) through `fn`."""
    return clean(report, fn)
