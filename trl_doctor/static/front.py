"""Where the command line meets `check --static`: what it refuses, and one config's run with the settings in force
(the project's ignores and the config's inline suppressions apply as in the full check)."""

from __future__ import annotations

from trl_doctor.errors import InputError


def refuse(static: bool, trl_version: str | None, launch, fixing: bool) -> None:
    """An InputError (exit 2, one line) for what --static cannot do."""
    if trl_version and not static:
        raise InputError("--trl-version names the TRL release --static judges against: give --static too (the full "
                         "check reads the installed TRL)")
    if launch is not None:
        raise InputError("--static checks config files; a launch command runs its script (the repository's code) to "
                         "reach the trainer: drop --static, or check the script's recipe file")
    if fixing:
        raise InputError("--fix and --diff need the full check (its fixes are planned and re-checked on the loaded "
                         "model and trainer): drop --static")


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
