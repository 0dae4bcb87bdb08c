"""trainer-config's (TD009) and batch-geometry's (TD010) words, once for the full rules (rules/trainer_config.py,
rules/batch_geometry.py) and `check --static` (static/judge.py), so a case reads the same in both. Imports
nothing: a migration table entry (facts.migrations) is passed in."""

from __future__ import annotations


# -- trainer-config -----------------------------------------------------------------------------------------

def rejected(class_name: str, error: str) -> str:
    return f"{class_name} rejects the config: {error}"


def unknown_key_consequence(trainer: str, trl: str, stops: bool) -> str:
    """What `trl <trainer> --config` does with a key it does not know: stop (trl 0.19 on), or drop it."""
    return (f"`trl {trainer} --config` stops on it at start-up" if stops else
            f"trl {trl}'s `trl {trainer} --config` drops it without a word: its value never reaches the trainer")


def migrated(entry, installed: dict, consequence: str) -> str:
    """A renamed or removed key (`entry`: facts.migrations' entry; `installed`: package -> its version)."""
    return f"{entry.words()}; with {entry.package} {installed[entry.package]}, {consequence}"


def arrives_later(key: str, class_name: str, trl: str, arrival, consequence: str) -> str:
    """A key that is a field only from a later release (`arrival`: facts.migrations' entry)."""
    return (f"`{key}` is not a field of {class_name} in trl {trl}: it arrives in {arrival.package} {arrival.since} "
            f"({arrival.where}); {consequence}")


def unknown(key: str, near: str | None) -> str:
    """One unknown key as the list names it, with the closest field when it is really close."""
    return f"{key!r} (did you mean {near!r}?)" if near else repr(key)


def not_known(trl: str, named: list[str], consequence: str) -> str:
    """The keys no migration explains (`named`: unknown()'s words for each)."""
    return f"trl {trl} does not know {', '.join(named)}: {consequence}"


# -- batch-geometry -----------------------------------------------------------------------------------------

def processes(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"


def no_config_class(trl: str, trainer: str) -> str:
    return (f"trl {trl} has no {trainer.upper()}Config, so there is no batch geometry to check (see value-model / "
            "smoke-step for the trainer itself)")


def refused_numbers(keys: list[str]) -> str:
    return (f"{', '.join(keys)} has a value TRL's parser refuses (see trainer-config): no batch arithmetic to judge "
            "until it is a number")


def geometry_healthy(procs: int, where: str, summary: str) -> str:
    return f"at {processes(procs)} ({where}): {summary}"


def violations(lines: list[str], procs: int, where: str, trl: str) -> str:
    """The failure: each numbered violation line, at the launch's process count (`where`: where it comes from)."""
    count = len(lines)
    return (f"{count} batch-geometry violation{'s' if count != 1 else ''} at {processes(procs)} ({where}), where trl "
            f"{trl} stops: " + "; ".join(lines))


def read_from(units) -> list[str] | str:
    """The details' list of the TRL code the geometry was read from (facts.trl_geometry's units)."""
    return [f"{u.where} ({u.kind})" for u in units] or "no geometry code found"
