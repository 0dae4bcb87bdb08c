"""The trainer run, a fact: the installed TRL's real trainer built on the miniature twin (or the real model on a
GPU when it fits), the probes other rules read (the logits contract, termination), then one optimizer step.
Rules read what it found from here: whether the installed TRL can build the config's trainer at all (and which
release to pin when not), the run's outcome (probes, the step, rewards), and the smoke step's own memory estimate.

- `protocol`: the typed, versioned messages (the spec, the stages, the result);
- `plan`: decides whether the run can happen, builds the spec from the check context and turns the outcome into
  the `RunResult` rules read (cached on the context: one run per check);
- `execute`: builds the trainer and runs the probes and the step, then the real-model sample (--sample N);
- `fingerprint`, `launch_only`: what the step compares before and after, and what only the launch can do.
Both `plan` and `execute` run in the check's worker process.
"""

from __future__ import annotations

from trl_doctor.facts.trainer_run.protocol import RunResult, Spec  # noqa: F401
from trl_doctor.facts.trainer_run.plan import (  # noqa: F401
    FORCE_AFTER, MAX_COMPLETION, smoke_estimate_details, trainer_gap, trainer_run,
)
