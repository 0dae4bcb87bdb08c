"""What the trainer run found, as the rules read it: whether the installed TRL can build the config's
trainer at all (and which release to pin when not), the run's outcome (probes, the step, rewards), and
the smoke step's own memory estimate. The run itself is the `trl_doctor.trainer_run` subsystem."""

from __future__ import annotations

from ..trainer_run.protocol import RunResult, Spec  # noqa: F401
from ..trainer_run.parent import (  # noqa: F401
    FORCE_AFTER, MAX_COMPLETION, smoke_estimate_details, trainer_gap, trainer_run,
)
