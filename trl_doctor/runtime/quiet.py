"""The environment every process of a check runs with (the command line, the worker, the fork server): nothing may
be fetched, no tracker may start, library chatter is quiet. Kept apart from the worker's module, which imports the
fence, the channel's protocol and the network guard, so the command line's `check --static` (the pre-commit hook)
quiets itself without importing them."""

from __future__ import annotations

import json
import os
from typing import MutableMapping, TypeVar

USER_TRACKER_ENV = "TRL_DOCTOR_USER_TRACKER_ENV"  # the trackers' settings as the user had them (run-phases reads)
TRACKER_KEYS = ("WANDB_DISABLED", "WANDB_MODE", "HF_HUB_OFFLINE")  # kept as the user had them
_Env = TypeVar("_Env", bound=MutableMapping[str, str])  # a dict, or os.environ itself


def quiet(env: _Env) -> _Env:
    """`env` as a worker runs with it: nothing may be fetched, no tracker may start, and library chatter must
    not bury the report. The trackers' own settings it overrides are kept, as the user had them, in
    USER_TRACKER_ENV (the first quieting records them; a later one keeps that record)."""
    if USER_TRACKER_ENV not in env:
        env[USER_TRACKER_ENV] = json.dumps({key: env.get(key) for key in TRACKER_KEYS})
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        env[key] = "1"
    env.update({"WANDB_DISABLED": "true", "WANDB_MODE": "disabled"})
    for key, value in (("TRANSFORMERS_VERBOSITY", "error"), ("TOKENIZERS_PARALLELISM", "false"),
                       ("TRL_EXPERIMENTAL_SILENCE", "1"), ("HF_DATASETS_DISABLE_PROGRESS_BARS", "1"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("PYTHONWARNINGS", "ignore")):
        env.setdefault(key, value)
    return env


def quiet_environment() -> None:
    quiet(os.environ)
    import warnings

    warnings.filterwarnings("ignore")
