"""Config keys renamed or removed across trl and transformers releases (trl_doctor/data/migrations.yaml), keys that
arrived in a later trl release (trl_doctor/data/added_keys.yaml), and what
the installed TRL's parser does with a key it does not know: stop (`Unknown arguments from config file`, trl 0.19
and later) or drop it without a word (older releases)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parents[2] / "data" / "migrations.yaml"
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

    from trl_doctor.facts.trl.installed import trl_root

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
    if table is None and trainer and installed.get("trl"):
        return generated_arrival(key, trainer, str(installed["trl"]))
    return None


FIELDS = TABLE.with_name("trl_fields.json")  # every release's config fields (tools/gen_trl_fields.py)
_CONFIGS = {"grpo": "GRPOConfig", "rloo": "RLOOConfig", "ppo": "PPOConfig"}


def generated_arrival(key: str, trainer: str, installed_trl: str) -> Arrival | None:
    """The first TRL release after `installed_trl` whose config class for `trainer` (or ModelConfig / ScriptArguments,
    which a recipe feeds too) has the field `key`, from the generated table of every release's fields; None when no
    later release has it. What added_keys.yaml does not list, this finds."""
    from packaging.version import InvalidVersion, Version

    try:
        have = Version(installed_trl)
    except InvalidVersion:
        return None
    releases = _generated_releases()
    previous = None
    for version in sorted(releases, key=Version):
        if Version(version) > have:
            for name in (_CONFIGS.get(trainer), "ModelConfig", "ScriptArguments"):
                configs = releases[version].get("configs", {})
                if name in configs and key in configs[name].get("fields", {}):
                    module = Path(str(configs[name].get("module") or name)).stem
                    before = f"absent in {previous}, " if previous else ""
                    return Arrival(key, "trl", name, version, (trainer,),
                                   f"{module}.py: {before}a field in {version}, of the releases in "
                                   "trl_doctor/data/trl_fields.json")
        previous = version
    return None


def _generated_releases() -> dict:
    import json
    from functools import lru_cache

    @lru_cache(maxsize=1)
    def load() -> dict:
        try:
            return json.loads(FIELDS.read_text(encoding="utf-8")).get("releases", {})
        except (OSError, ValueError):
            return {}

    global _generated_releases
    _generated_releases = load  # the table is read once per process
    return load()
