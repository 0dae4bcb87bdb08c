"""EX001 tracker-packages: every tracker named in `report_to` can be loaded where the job runs.

What it does
    Reads `report_to` from the trainer config as the installed TRL builds it (the rule needs
    `trainer_config`, so it is skipped when TRL rejects the config) and looks each name up in
    transformers' table of integrations and in the ones transformers finds installed in this Python
    (`get_available_reporting_integrations`). The check's Python is taken to be the job's. Under
    `check --static` it reads `report_to` as written and looks each tracker's module up, unimported.

Why is this bad?
    `report_to: [wandb]` makes the trainer's constructor add transformers' WandbCallback, which
    raises "RuntimeError: WandbCallback requires wandb to be installed. Run `pip install wandb`."
    when the package is missing: the job stops at start-up, after its processes have started and
    its models have loaded. A name transformers does not know (`wandbb`) stops it the same way with
    "ValueError: wandbb is not supported, only azure_ml, comet_ml, ... are supported". This holds
    for every transformers release TRL 0.14 and later runs on (`INTEGRATION_TO_CALLBACK`);
    `report_to: all` (transformers 4's default) means the installed trackers, and transformers 5's
    default is `none`. The doctor's smoke step turns trackers off, so it never meets either.

Example
    report_to: [wandb]                  # wandb is not installed
    -> fail: report_to: wandb is not installed: the trainer's constructor raises at start-up, after
       the job's models have loaded

Fix safety
    Unsafe (applied by `--fix --unsafe-fixes` only): writes `report_to` without the trackers that
    cannot load (`none` when nothing is left); the job then runs without logs someone asked for, so
    `--fix` alone does not do it. The better fix, installing the package, is in the fix's
    description.
"""

from __future__ import annotations

from trl_doctor.plugin import TRAINERS, Edit, Fix, Unavailable, config_value, fact, fail, passed, rule


# the module each tracker loads, for `check --static`, which asks the installed packages without importing them
TRACKER_MODULES = {"wandb": "wandb", "tensorboard": "tensorboard", "comet_ml": "comet_ml", "mlflow": "mlflow",
                   "trackio": "trackio", "clearml": "clearml", "neptune": "neptune", "dvclive": "dvclive"}
RAISES = "the trainer's constructor raises at start-up, after the job's models have loaded"


@fact
def installed_trackers(ctx) -> list[str]:
    """The trackers installed where the job runs, once per check: transformers' own list in the full check; under
    `--static`, where transformers is not imported, the modules of TRACKER_MODULES looked up (not imported)."""
    if ctx.kind == "static":
        import importlib.util

        return sorted(name for name, module in TRACKER_MODULES.items() if importlib.util.find_spec(module))
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    return sorted(get_available_reporting_integrations())


@fact
def tracker_status(ctx, name: str) -> str:
    """`installed`, `missing` (a tracker whose package is not installed here) or `unknown` (no tracker
    transformers knows). Under `--static` a name outside TRACKER_MODULES is Unavailable: only transformers'
    table (INTEGRATION_TO_CALLBACK, read by the full check) can say."""
    if ctx.kind == "static":
        if name not in TRACKER_MODULES:
            raise Unavailable(f"needs the full check: whether {name} is a tracker is transformers' to say")
    else:
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        if name not in INTEGRATION_TO_CALLBACK:
            return "unknown"
    return "installed" if name in installed_trackers(ctx) else "missing"


@rule(
    id="EX001",
    slug="tracker-packages",
    title="Every tracker in report_to can be loaded where the job runs",
    trainers=TRAINERS,
    needs=("trainer_config",),
    fixable="always",
    contexts=("full", "static"),
)
def check(ctx):
    # the full check: TRL's built config ("none" is [], "all" the installed ones); --static: as written
    asked = config_value(ctx, "report_to", "none")
    asked = [asked] if isinstance(asked, str) else list(asked or [])
    if not asked or asked == ["none"]:
        yield passed("report_to is none: no tracker to load")
        return
    if "all" in asked:
        yield passed("report_to: all: the trainer reports to the trackers it finds installed")
        return
    status = {name: tracker_status(ctx, name) for name in asked}
    unknown = [name for name in asked if status[name] == "unknown"]
    missing = [name for name in asked if status[name] == "missing"]
    if not unknown and not missing:
        yield passed(f"report_to: {', '.join(asked)}: every tracker is installed", report_to=asked)
        return
    kept = [name for name in asked if status[name] == "installed"]
    problems = [f"{name} is not a tracker transformers knows" for name in unknown]
    problems += [f"{name} is not installed" for name in missing]
    install = f"; or install {', '.join(missing)}" if missing else ""
    fix = Fix(f"set report_to to {kept or 'none'}{install}",
              (Edit(str(ctx.config.path), set=(("report_to", kept or "none"),)),),
              applicability="unsafe")
    yield fail(f"report_to: {'; '.join(problems)}: {RAISES}", fix=fix, report_to=asked,
               installed=installed_trackers(ctx))
