"""Where the front door (trl_doctor.front.request) meets `check --static`: one config's run with the settings in force
(the project's ignores and the config's inline suppressions apply as in the full check)."""

from __future__ import annotations


def check_config_static(config, settings, options, trl_version: str | None = None) -> tuple:
    """(the loaded config, its results, the settings in force) of `check --static` on the config file `config`, as the
    command line and the API both run it: a config a symbolic link takes out of the checked repository is not read."""
    from trl_doctor.context.config import load_config
    from .confine import Confinement

    Confinement.of(config).check(config)
    cfg = load_config(config)
    results, listed = run_config_static(cfg, settings, options, trl_version)
    return cfg, results, listed


def run_config_static(cfg, settings, options, trl_version: str | None = None) -> tuple[list, list[dict]]:
    """(results with the inline suppressions applied, the settings in force, the static entry last)."""
    from . import in_force, run_static

    suppress = settings.suppressor(cfg.path)
    results, info = run_static(cfg, settings.rules, options, trl_version)
    return [suppress(r) for r in results], [*settings.listed(suppress), in_force(info)]
