"""trl-doctor: preflight diagnostics for RL fine-tuning with Hugging Face TRL.

The public API that rule modules (built-in and third-party) import. Everything else is private.
Importing this package imports nothing heavy: torch, transformers and trl load inside the context.
"""

from ._context import Context, Options
from ._errors import InputError, Unavailable
from ._registry import Rule, rule
from ._types import DELETE, Edit, Finding, Fix, Location, Status, fail, manual, passed, skip, warn
from ._version import __version__

__all__ = [
    "Context", "Options", "InputError", "Unavailable", "Rule", "rule", "DELETE", "Edit", "Finding", "Fix",
    "Status", "Location", "fail", "manual", "passed", "skip", "warn", "__version__",
]
