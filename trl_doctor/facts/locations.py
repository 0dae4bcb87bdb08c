"""Locations in the user's config, for rules that point a finding at one of its keys explicitly:

    yield fail("num_generations 1 gives every completion a zero advantage", location=config_key(ctx, "num_generations"))

The engine already infers a location from a fix that sets a config key; this is for findings without such
a fix, or whose fix concerns another key than the one at fault.
"""

from __future__ import annotations

from trl_doctor.cache import fact
from trl_doctor.context.locations import key_position
from trl_doctor.types import Location


@fact
def config_key(ctx, key: str) -> Location:
    """The config file and, when the key is written in it, the key's 1-based line and column
    (a key the config does not set yet gets the file and the key, no line)."""
    path = ctx.config.path
    pos = key_position(path, key) if key in ctx.config.raw else None
    line, column = pos if pos else (None, None)
    return Location(str(path), key, line, column)
