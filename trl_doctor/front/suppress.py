"""Inline suppression: `num_generations: 7  # trl-doctor: ignore[batch-geometry]` on a config key's line.

A result of one of the listed rules (an id or a slug; `# trl-doctor: ignore` alone names every rule) about that
key is suppressed: its finding points at that line, at that key of the file, or names the key in its message (a
batch-geometry violation of `num_generations` whose fix sets another key). It: it stays in every report, marked as such and with
the line that suppresses it, but no longer makes the exit status 1.

Only a real YAML comment counts: text shaped like one inside a string (a `|` block, a quoted value) is data, and a pull
request cannot hide a suppression there (issue 31): the file's scalars are found with PyYAML's scanner.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from trl_doctor.types import Result

_COMMENT = re.compile(r"#\s*trl-doctor:\s*ignore(?:\[([^\]]*)\])?")


_KEY = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*:")


def directives(path: Path) -> dict[int, tuple[str | None, set[str]]]:
    """{line number: (the key on that line, the rule names it suppresses ("*" for all))} of a config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[int, tuple[str | None, set[str]]] = {}
    spans = None
    for number, line in enumerate(text.splitlines(), 1):
        m = _COMMENT.search(line)
        if m:
            spans = _scalar_spans(text) if spans is None else spans
            if any(start <= (number - 1, m.start()) < end for start, end in spans):
                continue  # inside a string: not a comment
            names = {n.strip() for n in (m.group(1) or "*").split(",") if n.strip()}
            key = _KEY.match(line)
            out[number] = (key.group(1) if key else None, names or {"*"})
    return out


def _scalar_spans(text: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The (line, column) ranges, 0-based, that the YAML file's scalars cover (a block scalar's from the line after its
    `|` or `>`, where a comment may still follow the indicator); every position when the file does not scan (it is no
    config then, and suppresses nothing)."""
    import yaml

    spans = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.ScalarToken):
                start = (token.start_mark.line, token.start_mark.column)
                if token.style in ("|", ">"):
                    start = (token.start_mark.line + 1, 0)
                spans.append((start, (token.end_mark.line, token.end_mark.column)))
    except yaml.YAMLError:
        return [((0, 0), (1 << 30, 0))]
    return spans


class Suppressor:
    """Marks the results a config's `# trl-doctor: ignore[...]` comments suppress (the file is read once)."""

    def __init__(self, config: Path | None):
        self.config = config
        self.found = directives(config) if config is not None else {}
        self.target = os.path.normcase(os.path.abspath(config)) if config is not None else None

    def in_force(self) -> list[dict]:
        """Each `# trl-doctor: ignore[...]` comment of the config, as the reports list it."""
        return [{"setting": "inline ignore", "rules": sorted(names), "key": key, "source": f"{self.config}:{line}"}
                for line, (key, names) in sorted(self.found.items())]

    def __call__(self, r: Result) -> Result:
        if r.status.value not in ("warn", "fail", "error"):
            return r
        loc = r.location
        if loc is not None and os.path.normcase(os.path.abspath(loc.file)) != self.target:
            return r  # it points at another file (a tokenizer's): not this config's to suppress
        for line, (key, names) in self.found.items():
            if not {"*", r.id, r.rule} & names:
                continue
            about = (loc is not None and (loc.line == line or (key is not None and loc.key == key))) or \
                (key is not None and re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", r.message) is not None)
            if about:
                return dataclasses.replace(r, suppressed=f"{self.config}:{line}")
        return r
