"""Config keys renamed or removed across trl and transformers releases (trl_doctor/data/migrations.yaml), keys that
arrived in a later trl release (trl_doctor/data/added_keys.yaml), and what
the installed TRL's parser does with a key it does not know: stop (`Unknown arguments from config file`, trl 0.19
and later) or drop it without a word (older releases)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "data" / "migrations.yaml"
ADDED = TABLE.with_name("added_keys.yaml")


@dataclass(frozen=True)
class Migration:
    key: str
    package: str
    where: str
    since: str  # the first release without the old key
    replacement: str | None
    same_meaning: bool
    note: str
    renamed: str | None = None  # the first release with the new name
    trainers: tuple[str, ...] = ()  # the trainers whose config had the key (all of them when empty)

    def words(self) -> str:
        if self.replacement:
            return (f"`{self.key}` was renamed `{self.replacement}` in {self.package} {self.renamed or self.since} "
                    f"and is gone from {self.since} ({self.where}): {self.note}")
        return f"`{self.key}` was removed in {self.package} {self.since} ({self.where}): {self.note}"


def load_migrations(path: Path = TABLE) -> list[Migration]:
    import yaml

    return [Migration(**{**entry, "trainers": tuple(entry.get("trainers") or ())})
            for entry in yaml.safe_load(path.read_text(encoding="utf-8"))]


def migration_for(key: str, installed: dict[str, str | None], table: list[Migration] | None = None,
                  trainer: str | None = None) -> Migration | None:
    """The entry that explains why `key` is unknown to the installed versions (their release is at or past the
    entry's `since`) in `trainer`'s config (an entry for another trainer's config does not explain it), or None."""
    from packaging.version import InvalidVersion, Version

    for entry in table if table is not None else load_migrations():
        version = installed.get(entry.package)
        if entry.key != key or not version or (trainer and entry.trainers and trainer not in entry.trainers):
            continue
        try:
            if Version(version) >= Version(entry.since):
                return entry
        except InvalidVersion:
            continue
    return None


def script_unknown_key_policy(trainer: str) -> tuple[str, str]:
    """("stops" | "drops", evidence): what TRL's own `trl/scripts/<trainer>.py` does with a `--config` key no
    dataclass takes. Read from the installed script: trl 0.22-0.29 parse with return_remaining_strings=True and
    ignore the rest, 1.x with fail_with_unknown_args=False; otherwise TrlParser decides (it stops from 0.19)."""
    import re

    from .trl import trl_root

    root = trl_root()
    path = root / "scripts" / f"{trainer}.py" if root is not None else None
    text = path.read_text(encoding="utf-8") if path is not None and path.is_file() else ""
    m = re.search(r"parse_args_and_config\(([^)]*)\)", text)
    if m is not None and re.search(r"fail_with_unknown_args\s*=\s*False|return_remaining_strings\s*=\s*True", m.group(1)):
        return "drops", f"trl/scripts/{trainer}.py: `{' '.join(m.group(0).split())}` ignores the keys no dataclass takes"
    return unknown_key_policy()


def unknown_key_policy() -> tuple[str, str]:
    """("stops" | "drops", evidence): what the installed TRL's parser does with a config key no dataclass has."""
    try:
        from trl import TrlParser
    except ImportError:
        return "stops", "HfArgumentParser"
    try:
        source = inspect.getsource(TrlParser.parse_args_and_config)
    except (OSError, TypeError):
        return "stops", "TrlParser.parse_args_and_config (source not readable)"
    if "Unknown arguments" in source:
        return "stops", "TrlParser.parse_args_and_config raises 'Unknown arguments from config file'"
    return "drops", "TrlParser.parse_args_and_config returns without the config keys no dataclass takes"


@dataclass(frozen=True)
class Arrival:
    key: str
    package: str
    where: str
    since: str  # the first release whose class has the field
    trainers: tuple[str, ...] = ()
    evidence: str = ""


def load_arrivals(path: Path = ADDED) -> list[Arrival]:
    import yaml

    return [Arrival(**{**entry, "trainers": tuple(entry.get("trainers") or ())})
            for entry in yaml.safe_load(path.read_text(encoding="utf-8"))]


def arrival_for(key: str, installed: dict[str, str | None], trainer: str | None = None,
                table: list[Arrival] | None = None) -> Arrival | None:
    """The entry saying in which later release `key` arrives in `trainer`'s config, when the installed release is
    older than that; None otherwise."""
    from packaging.version import InvalidVersion, Version

    for entry in table if table is not None else load_arrivals():
        version = installed.get(entry.package)
        if entry.key != key or not version or (trainer and entry.trainers and trainer not in entry.trainers):
            continue
        try:
            if Version(version) < Version(entry.since):
                return entry
        except InvalidVersion:
            continue
    return None
