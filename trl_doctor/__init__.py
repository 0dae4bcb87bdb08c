"""trl-doctor: preflight diagnostics for RL fine-tuning with Hugging Face TRL.

The public API that rule modules (built-in and third-party) import. Everything else is private.
Importing this package imports nothing heavy: torch, transformers and trl load inside the context.
"""

from trl_doctor.edits import edited
from trl_doctor.errors import InputError, Unavailable, WatchStopped
from trl_doctor.options import Options
from trl_doctor.registry import Rule, rule
from trl_doctor.types import DELETE, Edit, Finding, Fix, Location, Status, fail, manual, passed, skip, warn
from trl_doctor.version import __version__
from trl_doctor.vocabulary import ALL_TRAINERS, ASYNC_GRPO, TRAINERS


def __getattr__(name: str):
    """Imported on first use, so that importing any part of the package never loads the floors above it: the
    Python API (`check`, `Report`, `DoctorCallback`) and the check context (`Context`)."""
    if name == "Context":
        from trl_doctor.context.context import Context

        return Context
    if name in ("check", "Report"):
        from trl_doctor.front import api as _api

        return getattr(_api, name)
    if name == "DoctorCallback":
        from trl_doctor.front.callback import DoctorCallback

        return DoctorCallback
    raise AttributeError(f"module 'trl_doctor' has no attribute {name!r}")


__all__ = [
    "Context", "Options", "InputError", "Unavailable", "WatchStopped", "Rule", "rule", "DELETE", "Edit", "edited", "Finding", "Fix",
    "Status", "Location", "fail", "manual", "passed", "skip", "warn", "__version__", "TRAINERS", "ALL_TRAINERS", "ASYNC_GRPO", "check",
    "Report", "DoctorCallback",
]
