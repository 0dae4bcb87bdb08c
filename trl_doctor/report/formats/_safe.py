"""Untrusted text made harmless where a report is written.

Config keys, token strings, a reward's exception text, dataset values and file paths come from the repository
under check, which on a pull request is anyone's. Written raw they could inject GitHub workflow commands (`::cmd::`
at a line's start, after leading spaces; the older `##[cmd]` anywhere in a line, which the runner still acts on:
`##[add-mask]`, `##[stop-commands]`) and terminal escape sequences, and control characters make XML invalid. No
`::` and no `##[` of theirs survives anywhere in a line, in any format. Every format goes through one of these:

- `visible`: C0/C1 control characters (ESC included, so no ANSI sequence survives) become their `\\xNN` escape,
  a lone surrogate, a bidirectional override or isolate and an invisible format character its `\\uXXXX`; newline
  and tab stay unless `one_line`;
- `no_commands`: every `::` becomes `:\\:` and every `##[` `#\\#[` (the text stays readable);
- `xml_text`: what XML 1.0 cannot hold (controls, lone surrogates, U+FFFE/U+FFFF) becomes its escape;
- `clean_report`: a Report with every string of it passed through one of them (the formats render that).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any, Callable

from trl_doctor.types import Edit

# C0/C1 controls, and lone surrogates (a log's metric name read with surrogateescape, a JSON "\\ud800"): no terminal or file
# encoding can write one, so each becomes its `\\uXXXX` escape
# bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069: a right-to-left override shows a file name or
# a run name reversed, "Trojan Source"), the marks (U+061C, U+200E, U+200F) and the invisible format characters
# (zero-width space, joiners, word joiner, invisible operators, U+FEFF): escaped too, so what a reader sees is what
# is there
_INVISIBLE = "\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]")
_CONTROL_ONE_LINE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]")
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# a workflow command's marker, anywhere in a line: the second character of `::` and of `##[` is the one replaced
# (each colon after a colon, so that `:::` keeps none either)
_COMMAND = re.compile(r"(?<=:):|(?<=#)#(?=\[)")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, one_line: bool = False) -> str:
    """Control characters as their escapes; newlines and tabs kept unless `one_line`."""
    return (_CONTROL_ONE_LINE if one_line else _CONTROL).sub(_escape, text)


def no_commands(text: str) -> str:
    """No `::` and no `##[` in `text`, at a line's start or anywhere else: a backslash splits each."""
    return _COMMAND.sub(lambda m: "\\" + m.group(), text)


def for_terminal(text: str, one_line: bool = False) -> str:
    """Text from the checked repository, fit for a terminal or a CI log."""
    return no_commands(visible(text, one_line))


def xml_text(text: str) -> str:
    """Text XML 1.0 can hold, with what it cannot as visible escapes."""
    return _NOT_XML.sub(_escape, text)


def xml_document(text: str) -> str:
    """A serialized XML document with no `::` or `##[` in it: one character of each becomes a character reference,
    which an XML reader turns back into the same text (neither appears in XML's own syntax)."""
    return _COMMAND.sub(lambda m: "&#58;" if m.group() == ":" else "&#35;", text)


_JSON_RAW = re.compile(f"[\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]")


def json_escapes(text: str) -> str:
    """A JSON document with DEL, C1 controls and lone surrogates written as `\\uXXXX` escapes (json.dumps writes
    them raw with ensure_ascii=False), and no `::` or `##[` (one character of each as its `\\u` escape; both occur
    only inside strings of json.dumps's output): the same data, nothing a terminal or a CI runner acts on."""
    text = _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _COMMAND.sub(lambda m: "\\u003a" if m.group() == ":" else "\\u0023", text)


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
