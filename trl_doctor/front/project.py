"""Project configuration: `[tool.trl-doctor]` in pyproject.toml, or a `.trl-doctor.toml`, found by walking up from the
checked config's folder (from the current folder for a launch command), the nearest one winning, as ruff does.

    [tool.trl-doctor]
    select = ["TD001", "batch-geometry"]    # only these rules
    ignore = ["version-skew"]               # never these
    fail-on = "warn"                        # the lowest status that fails the check
    target = "8xH100-80GB"                  # the launch machine's GPUs
    smoke = false                           # no smoke step
    allow-hosts = ["gpu-node-5:8000"]       # other machines the check may contact (a vLLM server's); none by default
    [tool.trl-doctor.per-file-ignores]
    "recipes/experimental/*.yaml" = ["batch-geometry"]
    [tool.trl-doctor.watch.zero-advantage]  # a watch rule's thresholds (`trl-doctor explain zero-advantage`)
    patience = 10

Options on the command line win over the file. Light: tomllib only (tomli on Python 3.10).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor.errors import InputError

KEYS = {"select": list, "ignore": list, "fail-on": str, "target": str, "smoke": bool, "per-file-ignores": dict,
        "watch": dict, "allow-hosts": list}


@dataclass(frozen=True)
class ProjectConfig:
    path: Path | None = None  # the file it was read from; None when there is none
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    target: str | None = None
    smoke: bool | None = None
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    watch: dict[str, dict[str, float]] = field(default_factory=dict)  # a watch rule's slug -> its thresholds
    allow_hosts: tuple[str, ...] = ()  # HOST or HOST:PORT: other machines the check may contact

    def source(self) -> str | None:
        """Where these settings come from, as the reports name it."""
        if self.path is None:
            return None
        return f"{self.path} [tool.trl-doctor]" if self.path.name == "pyproject.toml" else str(self.path)

    def ignores_for(self, config: Path | None) -> list[str]:
        """The per-file ignores whose pattern matches `config` (relative to the project file's folder)."""
        if self.path is None or config is None:
            return []
        try:  # the path as given, not where its links lead: a link must not carry a config into an exempt folder
            rel = Path(os.path.relpath(os.path.abspath(config), os.path.abspath(self.path.parent))).as_posix()
        except ValueError:  # another drive
            return []
        return [r for pattern, rules in self.per_file_ignores.items() if fnmatch.fnmatch(rel, pattern) for r in rules]


def find_project_config(start: Path) -> ProjectConfig:
    """The nearest project config up from `start`, by its path as given (a folder that is a link is walked up from
    where it stands, not from where it leads: a link cannot put a checked file under another project's config)."""
    folder = Path(os.path.abspath(start))
    for d in (folder, *folder.parents):
        own = d / ".trl-doctor.toml"
        if own.is_file():
            return _read(own, _load(own))
        pyproject = d / "pyproject.toml"
        if pyproject.is_file():
            table = _load(pyproject).get("tool", {}).get("trl-doctor")
            if table is not None:
                return _read(pyproject, table)
    return ProjectConfig()


def _load(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, before it joined the standard library
        import tomli as tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}") from None


def _read(path: Path, table: Any) -> ProjectConfig:
    where = ProjectConfig(path).source()
    if not isinstance(table, dict):
        raise InputError(f"{where}: must be a table of settings")
    for key, value in table.items():
        if key not in KEYS:
            raise InputError(f"{where}: unknown setting {key!r} (known: {', '.join(KEYS)})")
        if not isinstance(value, KEYS[key]):
            raise InputError(f"{where}: `{key}` must be a {KEYS[key].__name__}, not {type(value).__name__}")
    for key in ("select", "ignore"):
        if not all(isinstance(v, str) for v in table.get(key, [])):
            raise InputError(f"{where}: `{key}` must be a list of rule ids or slugs")
    if not all(isinstance(v, str) for v in table.get("allow-hosts", [])):
        raise InputError(f"{where}: `allow-hosts` must be a list of HOST or HOST:PORT strings")
    if table.get("fail-on") not in (None, "fail", "warn"):
        raise InputError(f"{where}: `fail-on` must be \"fail\" or \"warn\"")
    per_file = {}
    for pattern, rules in (table.get("per-file-ignores") or {}).items():
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise InputError(f"{where}: per-file-ignores {pattern!r} must be a list of rule ids or slugs")
        per_file[pattern] = tuple(rules)
    return ProjectConfig(path, tuple(table.get("select", ())), tuple(table.get("ignore", ())), table.get("fail-on"),
                         table.get("target"), table.get("smoke"), per_file, _watch(where, table.get("watch") or {}),
                         tuple(table.get("allow-hosts", ())))


def _watch(where: str | None, table: dict) -> dict[str, dict[str, float]]:
    """`[watch.<slug>]` tables of numbers: the watch rules' thresholds (the rule checks the names when it runs)."""
    from trl_doctor.facts.metrics import threshold_problem

    problem = threshold_problem(table)
    if problem:
        raise InputError(f"{where}: {problem}")
    return {slug: dict(values) for slug, values in table.items()}
