"""Where a finding points: the line and column of a top-level key in a JSON or YAML file, and a finding's
location (its own, or the one its fix implies).

Light on purpose (json, re and ruamel.yaml only): the engine calls it for every result, and a report must
never fail because a file it points at cannot be read, so every reader here answers None instead of raising.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from trl_doctor.types import Finding, Location

# Locating a key is a courtesy: files larger than this (weights, a huge tokenizer.json) are not parsed for it.
MAX_BYTES = 16 * 1024 * 1024
_WS = json.decoder.WHITESPACE  # type: ignore[attr-defined]  # the JSON whitespace the stdlib skips between tokens (not in typeshed)


def key_position(path: str | os.PathLike, key: str) -> tuple[int, int] | None:
    """(line, column), both 1-based, of the top-level `key` of the JSON or YAML file at `path`; None when
    the file is missing, unreadable, too large, not a mapping, or has no such key.

    A `.json` file is scanned as JSON (the last occurrence of a repeated key wins, as `json.loads` does);
    any other file is read as YAML with ruamel.yaml's round-trip loader, which records where each key is.
    """
    try:
        p = Path(path)
        if p.stat().st_size > MAX_BYTES:
            return None
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, ValueError):
        return None
    try:
        if p.suffix.lower() == ".json":
            return _json_key(text, key)
        return _yaml_key(text, key)
    except Exception:  # a malformed file has no position to give; the rules report what is wrong with it
        return None


def _yaml_key(text: str, key: str) -> tuple[int, int] | None:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = True
    doc = yaml.load(text)
    if not isinstance(doc, CommentedMap) or key not in doc:
        return None
    line, column = doc.lc.key(key)  # 0-based, of the key's first character (its quote when quoted)
    return line + 1, column + 1


def _json_key(text: str, key: str) -> tuple[int, int] | None:
    """Walk the top-level object: read each key with the stdlib's string scanner, skip each value whole."""
    decoder = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    if text[i:i + 1] != "{":
        return None
    i = _WS.match(text, i + 1).end()
    found = None
    while i < len(text) and text[i] != "}":
        if text[i] != '"':
            return None
        name, end = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]  # the stdlib's, not in typeshed
        if name == key:
            found = i
        i = _WS.match(text, end).end()
        if text[i:i + 1] != ":":
            return None
        _, i = decoder.raw_decode(text, _WS.match(text, i + 1).end())
        i = _WS.match(text, i).end()
        if text[i:i + 1] == ",":
            i = _WS.match(text, i + 1).end()
    if found is None:
        return None
    line_start = text.rfind("\n", 0, found) + 1
    return text.count("\n", 0, found) + 1, found - line_start + 1


def locate(finding: Finding, config_path: str | os.PathLike | None = None) -> Location | None:
    """The location a result reports for `finding`.

    - The finding's own location, with its line and column filled from the file when the rule named a
      key but no line.
    - Otherwise the one its fix implies: the first edit that sets keys gives the file and its first key
      (an edit of the config file at `config_path` is preferred, since that is the file the user wrote);
      failing that, the first whole-file edit gives the file alone.
    - None when the finding has neither (the rule concerns the setup as a whole).

    A key the fix adds is not in the file yet: such a location has the key but no line.
    """
    loc = finding.location or _from_fix(finding, config_path)
    if loc is None or loc.key is None or loc.line is not None:
        return loc
    pos = key_position(loc.file, loc.key)
    return replace(loc, line=pos[0], column=pos[1]) if pos else loc


def _from_fix(finding: Finding, config_path: str | os.PathLike | None) -> Location | None:
    edits = finding.fix.edits if finding.fix is not None else ()
    keyed = [e for e in edits if e.set]
    if config_path is not None:
        config = _norm(config_path)
        keyed.sort(key=lambda e: _norm(e.path) != config)  # stable: the config's edits first, order kept
    if keyed:
        return Location(keyed[0].path, keyed[0].set[0][0])
    whole = [e for e in edits if e.content is not None]
    return Location(whole[0].path) if whole else None


def _norm(path: str | os.PathLike) -> str:
    return os.path.normcase(os.path.abspath(os.fspath(path)))
