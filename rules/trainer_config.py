"""TD009 trainer-config: the config is one the installed TRL accepts.

What it does
    Reads the values as the installed release's own parser does (`make_parser()` of
    `trl/scripts/<trainer>.py`: `2e-5` is a float, `num_generations: eight` is refused with the
    parser's message) and builds the trainer's config class from them so that TRL's validation runs
    (with `use_cpu=True` where there is no GPU; precision is TD015's). Every key but the doctor's
    own (trainer, added_tokens, dataset_path, ...) must be an argument of that parser. A launch
    recipe's keys that no dataclass takes are named with the release they arrive in
    (trl_doctor/data/added_keys.yaml, read from the wheels).

Why is this bad?
    `trl grpo --config config.yaml` (and rloo, ppo) parses every key into TRL's dataclasses. A key
    none of them has (a typo, or a field renamed or removed between releases, such as
    `max_prompt_length` or the `use_vllm` options) stops the parser before training (TrlParser from
    0.19: a fail) or is dropped without a word (before 0.19: a warn, the run goes on without the
    value). A value TRL's `__post_init__` rejects stops the job inside the launcher, one error at a
    time. Field sets change with every minor release: the rule asks the installed one, not a table.

Example
    num_generation: 4                   # a typo for num_generations
    -> fail: trl 1.16.0 does not know 'num_generation' (did you mean 'num_generations'?):
       `trl grpo --config` stops on it at start-up

Fix safety
    Safe for a key renamed with the same meaning (trl_doctor/data/migrations.yaml: `torch_dtype` ->
    `dtype` in trl 0.23, `warmup_ratio` -> `warmup_steps` in transformers 5). Manual for a removed
    key (the table's note says what replaced it) and one that arrives in a later release (upgrade or
    remove it). Another unknown key gets the closest known field only when it is really close.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trl_doctor import DELETE, Edit, Finding, Fix, Location, fail, manual, passed, rule, warn
from trl_doctor.facts.trl import fields as trl_fields
from trl_doctor.facts.trl.behaviour import parser_policy
from trl_doctor.facts.trl.trainer_config import trainer_config_info


# -- the words both judgments say ---------------------------------------------------------------------------

def _rejected(class_name: str, error: str) -> str:
    return f"{class_name} rejects the config: {error}"


def _unknown_key_consequence(trainer: str, trl: str, stops: bool) -> str:
    """What `trl <trainer> --config` does with a key it does not know: stop (trl 0.19 on), or drop it."""
    return (f"`trl {trainer} --config` stops on it at start-up" if stops else
            f"trl {trl}'s `trl {trainer} --config` drops it without a word: its value never reaches the trainer")


def _migrated(entry, installed: dict, consequence: str) -> str:
    """A renamed or removed key (`entry`: the migration table's entry, below; `installed`: package -> its version)."""
    return f"{entry.words()}; with {entry.package} {installed[entry.package]}, {consequence}"


def _arrives_later(key: str, class_name: str, trl: str, arrival, consequence: str) -> str:
    """A key that is a field only from a later release (`arrival`: the added-keys table's entry, below)."""
    return (f"`{key}` is not a field of {class_name} in trl {trl}: it arrives in {arrival.package} {arrival.since} "
            f"({arrival.where}); {consequence}")


def _unknown_named(key: str, near: str | None) -> str:
    """One unknown key as the list names it, with the closest field when it is really close."""
    return f"{key!r} (did you mean {near!r}?)" if near else repr(key)


def _not_known(trl: str, named: list[str], consequence: str) -> str:
    """The keys no migration explains (`named`: _unknown_named's words for each)."""
    return f"trl {trl} does not know {', '.join(named)}: {consequence}"


@rule(id="TD009", slug="trainer-config", title="The installed TRL accepts every key and value of the config",
      contexts=("full", "static"))
def check(ctx):
    info = trainer_config_info(ctx)
    details = {"config class": info.class_name, "trl": info.trl_version}
    if info.injected:
        details["set by the doctor to build it here"] = ", ".join(f"{k}={v}" for k, v in info.injected.items())
    if info.parser:
        details["read with"] = info.parser
    if info.typed:
        details["typed by TRL's parser"] = {k: repr(v) for k, v in info.typed.items()}
    for key, why in info.type_errors.items():
        yield fail(why, location=Location(str(ctx.config.path), key),
                   **details)
    if info.unknown_keys:
        found, unknown = _unknown(ctx, info)
        yield from (replace(f, details={**details, **f.details}) for f in found)
        details.update(unknown)
    dropped = _dropped_recipe_keys(ctx, info) if not info.unknown_keys else []  # a launch's recipe
    yield from (replace(f, details={**details, **f.details}) for f in dropped)
    if info.launch_note:
        details["batch arithmetic"] = f"left to batch-geometry: {info.launch_note}"
    geometry = None if info.launch_note or not info.error else _left_to_batch_geometry(ctx, info.error)
    if geometry:
        details["batch arithmetic"] = geometry
    deferred = bool(info.launch_note) or bool(info.error and geometry)
    if info.error and not deferred:
        yield fail(_rejected(info.class_name, info.error), **details)
    if not info.unknown_keys and not dropped and not info.type_errors and (not info.error or deferred):
        extra = "; its batch check at 1 process is left to batch-geometry" if deferred else ""
        if info.config is None and not info.error:  # not built (--static): the keys and types only
            extra += "; its __post_init__ validation runs in the full check"
        yield passed(f"{info.class_name} (trl {info.trl_version}) accepts all {len(info.passed_keys)} trainer keys{extra}", **details)


def _unknown(ctx, info) -> tuple[list[Finding], dict[str, Any]]:
    """Unknown keys: a renamed or removed key (the migration table) says when and what replaces it, with a safe
    rename where the meaning is the same; any other gets the closest field when it is really close. What the
    installed TRL does with it decides the words: stop at start-up, or drop it without a word. (The findings, with
    the details this part adds; those details: the unknown keys, what TRL's parser does with them.)"""
    policy, evidence = parser_policy(ctx) or unknown_key_policy()
    details: dict[str, Any] = {"unknown keys": info.unknown_keys, "trl's parser": evidence}
    found = []
    consequence = _unknown_key_consequence(ctx.trainer, info.trl_version, policy == "stops")
    # a key the parser stops on fails the launch; one it drops only loses its value: the run goes on without it
    report = fail if policy == "stops" else warn
    installed = {"trl": info.trl_version, "transformers": ctx.version("transformers")}
    plain, plain_keys, plain_names = [], [], {}
    for key in info.unknown_keys:
        entry = migration_for(key, installed, trainer=ctx.trainer)
        if entry is None:
            plain_names[key] = _unknown_named(key, info.suggestions.get(key))
            plain.append(plain_names[key])
            plain_keys.append(key)
            continue
        value = ctx.config.raw.get(key)  # the file's value of a key TRL does not know: the fix moves it
        if entry.replacement and entry.same_meaning and entry.replacement not in ctx.config.raw:
            fix = Fix(f"rename `{key}` to `{entry.replacement}` in {ctx.config.path.name} (same meaning)",
                      (Edit(str(ctx.config.path), set=((key, DELETE), (entry.replacement, value))),))
        else:
            fix = manual(f"remove `{key}` from {ctx.config.path.name}" + (f" (and set `{entry.replacement}`)"
                                                                          if entry.replacement else ""))
        found.append(report(_migrated(entry, installed, consequence), fix,
                            location=Location(str(ctx.config.path), key), **details))
    for key in list(plain_keys):
        arrival = arrival_for(key, installed, trainer=ctx.trainer)
        if arrival is not None:
            plain_keys.remove(key)
            plain.remove(plain_names[key])
            found.append(report(_arrives_later(key, info.class_name, info.trl_version, arrival, consequence),
                                manual(_upgrade_or_remove(key, arrival, ctx.config.path.name)),
                                location=Location(str(ctx.config.path), key), **details))
    if plain:
        found.append(report(_not_known(info.trl_version, plain, consequence), **details))
    return found, details


def _left_to_batch_geometry(ctx, error: str) -> str | None:
    """TRL's config class checks the batch arithmetic against the processes it runs in: one, here. That is
    batch-geometry's question, which it answers at the launch's real process count with the fix: not repeated here.
    The words for the details when `error` is that check's, else None."""
    from trl_doctor.facts.launch.launcher import is_geometry_error, launch, process_count

    if not is_geometry_error(error):
        return None
    the_launch = launch(ctx)
    return (f"left to batch-geometry (the launch has {process_count(the_launch.processes)}, "
            f"{the_launch.processes_from}); TRL's check in this single process says: {error}")


def _upgrade_or_remove(key: str, arrival, name: str) -> str:
    return f'pip install "{arrival.package}>={arrival.since}" (the release the recipe was written for), or remove `{key}` from {name}'


def _dropped_recipe_keys(ctx, info) -> list[Finding]:
    """A launch command's recipe (`--config recipe.yaml`) keys that the installed TRL's parser took into none of its
    dataclasses. TRL before 0.19 drops them without a word (set_defaults_with_config returns them and
    parse_args_and_config discards them), so the script reached its trainer without their values. Every such key
    is named for TRL's own scripts, whose parser is known, and for a script whose TrlParser the capture saw parse
    the recipe (its dataclasses are known); for another script (whose own code may read any key) only the keys known
    to arrive in a later TRL release are."""
    import dataclasses

    from packaging.version import Version

    from trl_doctor.facts.trl.installed import script_fields

    live = ctx.live
    if live is None or not live.recipe_keys or live.args is None:
        return []
    fields = {f.name for f in dataclasses.fields(live.args)} if dataclasses.is_dataclass(live.args) else set()
    known = fields | script_fields()
    own_script = _trl_script(live)
    if own_script:
        from trl_doctor.facts.trl.parsing import trl_parser

        parser, _ = trl_parser(ctx.trainer)
        if parser is not None:
            known |= {a.dest for a in parser._actions}
    seen_parser = not own_script and live.parser_types is not None
    if seen_parser:
        known |= {f.name for t in live.parser_types for f in dataclasses.fields(t)}
        known.add("env")  # TrlParser sets a recipe's `env:` mapping as environment variables
    installed = {"trl": info.trl_version, "transformers": ctx.version("transformers")}
    # the script reached its trainer, so whatever parsed the recipe let these keys through: dropped, not refused
    classes = ", ".join(t.__name__ for t in live.parser_types or ())
    evidence = (script_unknown_key_policy(ctx.trainer)[1] if own_script else
                f"the script's TrlParser ({classes}) returned without them" if seen_parser else
                "the script's parser returned without them")
    recipe = Path(live.recipe).name if live.recipe else "the recipe"
    later, plain = {}, []
    for key in live.recipe_keys:
        if key in known or key == "config":
            continue
        arrival = arrival_for(key, installed, trainer=ctx.trainer)
        if arrival is not None:
            later[key] = arrival
        elif own_script or seen_parser:
            plain.append(key)
    dropped = [*later, *plain]
    if not dropped:
        return []
    names = [f"`{k}` (arrives in {later[k].package} {later[k].since})" if k in later else f"`{k}`" for k in dropped]
    one = len(dropped) == 1
    what = (f"{', '.join(names)} {'is not a field' if one else 'are not fields'} of {info.class_name} in trl "
            f"{info.trl_version}" + ("" if not plain else f" nor of {'its' if one else 'their'} script's arguments"))
    message = (f"{what}: trl {info.trl_version}'s parser ignores {'it' if one else 'them'} without a word, so the "
               f"trainer runs with the release's {'default' if one else 'defaults'} instead")
    newest = max(later.values(), key=lambda a: Version(a.since)) if later else None
    upgrade = f'pip install "{newest.package}>={newest.since}" (the release the recipe was written for), or ' if newest else ""
    fix = manual(f"{upgrade}remove {', '.join(f'`{k}`' for k in dropped)} from {recipe}")
    return [warn(message, fix, location=Location(live.recipe or recipe, dropped[0]),
                 **{"dropped keys": {k: (f"a {later[k].where} field from {later[k].package} {later[k].since} "
                                         f"({later[k].evidence})" if k in later else "known to no dataclass of "
                                         "the script's parser" + (f" ({classes})" if seen_parser else ""))
                                     for k in dropped},
                    "trl's parser": evidence})]


def _trl_script(live) -> bool:
    """Whether the trainer was built by one of TRL's own scripts (`trl grpo`, `python -m trl.scripts.grpo`)."""
    from trl_doctor.facts.trl.installed import trl_root

    root = trl_root()
    where = live.where[0] if live.where else (live.script or "")
    return bool(root and where) and os.path.realpath(where).startswith(os.path.realpath(root) + os.sep)


# -- renamed, removed and added keys across releases, and TRL's parser on a key it does not know -----------------------
# Config keys renamed or removed across trl and transformers releases (trl_doctor/data/migrations.yaml), keys that
# arrived in a later trl release (trl_doctor/data/added_keys.yaml), and what the installed TRL's parser does with a
# key it does not know: stop (`Unknown arguments from config file`, trl 0.19 and later) or drop it without a word
# (older releases).

FIELDS = trl_fields.OUT  # every release's config fields (tools/gen_trl_fields.py), beside the tables below
TABLE = FIELDS.with_name("migrations.yaml")
ADDED = FIELDS.with_name("added_keys.yaml")


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
