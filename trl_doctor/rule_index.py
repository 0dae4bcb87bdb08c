"""The built-in rules' declarations as data (trl_doctor/data/rule_index.json), so that a process which only lists,
selects or reports rules does not import them: every rule module imports the facts it judges with, 80 ms of a
`check --static` (the pre-commit hook) and of every `trl-doctor check`'s printing process, which runs no rule.

An entry is used only where the digest of its module's source, and of the modules that define what a declaration
may name (the registry, the contexts, the trainers), is the one the index was written from; anything else is
imported as before. A rule read from the index judges through `Deferred`: the registry imports its module at the
first call. Only the command line's own process reads rules this way (trl_doctor.front): a worker imports every rule
before it runs the user's code, so that no import of the doctor's own modules follows the user's.

    python tools/rule_index.py          # writes the index; tests/test_rule_index.py says when it is stale
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

INDEX = Path(__file__).resolve().parent / "data" / "rule_index.json"
FORMAT = 1
# the modules whose names a declaration uses (TRAINERS, ALL_TRAINERS, the contexts) or whose checks it passes
_DECLARING = ("registry.py", "interface.py", "vocabulary.py")
_FIELDS = ("id", "slug", "title", "severity", "trainers", "explanation", "needs", "fixable", "contexts",
           "static_skip", "module")


def digest(source: bytes) -> str:
    return hashlib.blake2b(source, digest_size=16).hexdigest()


def _declaring_digest() -> str:
    here = Path(__file__).resolve().parent
    return digest(b"".join((here / name).read_bytes() for name in _DECLARING))


def entry(rules: list) -> list[dict[str, Any]]:
    """The index's entry for one module's rules (each Rule as data; `prepare` as whether there is one)."""
    out = []
    for r in rules:
        data = {name: getattr(r, name) for name in _FIELDS}
        data["prepare"] = r.prepare is not None
        out.append(data)
    return out


def build(modules: dict[str, tuple[bytes, list]]) -> dict[str, Any]:
    """The index of the rule modules {name: (their source, the Rules they declare)}."""
    return {"format": FORMAT, "declaring": _declaring_digest(),
            "modules": {name: {"digest": digest(source), "rules": entry(rules)}
                        for name, (source, rules) in sorted(modules.items())}}


class Reader:
    """The index as this process reads it: once, and only where it was written from the same declaring modules."""

    def __init__(self, path: Path = INDEX):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            usable = data.get("format") == FORMAT and data.get("declaring") == _declaring_digest()
        except (OSError, ValueError, AttributeError):
            usable = False
        self.modules: dict[str, Any] = data["modules"] if usable else {}

    def declared(self, source: Path, name: str) -> list[dict[str, Any]] | None:
        """The declarations of rule module `name` (its file `source`) as data, or None (not indexed, or its source
        changed since)."""
        known = self.modules.get(name)
        if known is None:
            return None
        try:
            if digest(source.read_bytes()) != known["digest"]:
                return None
        except OSError:
            return None
        return [{key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}
                for data in known["rules"]]


class Deferred:
    """A judgment (or prepare hook) of a rule read from the index: `find()` (the registry's import of its module)
    runs at the first call, and the function it returns answers every call."""

    def __init__(self, find: Callable[[], Callable[..., Any]], what: str):
        self.find, self.what = find, what
        self.target: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.target is None:
            self.target = self.find()
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.what}, imported at its first call>"
