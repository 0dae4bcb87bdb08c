"""trl-doctor: preflight diagnostics for RL fine-tuning with Hugging Face TRL.

The public API that rule modules (built-in and third-party) import. Everything else is private.
Importing this package imports nothing heavy: torch, transformers and trl load inside the context.
"""

from ._context import Context, Options
from ._errors import InputError, Unavailable
from ._registry import Rule, rule
from ._types import DELETE, Edit, Finding, Fix, Location, Status, fail, manual, passed, skip, warn
from ._version import __version__


def __getattr__(name: str):
    """The Python API, imported on first use: `check`, `Report` and `DoctorCallback`."""
    if name in ("check", "Report"):
        from . import _api

        return getattr(_api, name)
    if name == "DoctorCallback":
        from ._callback import DoctorCallback

        return DoctorCallback
    raise AttributeError(f"module 'trl_doctor' has no attribute {name!r}")


__all__ = [
    "Context", "Options", "InputError", "Unavailable", "Rule", "rule", "DELETE", "Edit", "Finding", "Fix",
    "Status", "Location", "fail", "manual", "passed", "skip", "warn", "__version__", "check", "Report", "DoctorCallback",
]
