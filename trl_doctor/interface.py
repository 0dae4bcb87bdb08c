"""The context a rule's judgment reads, declared once (as pip-audit's interface.py declares its services).

A rule judges in up to three contexts, each a provider of this interface:

- `full`: the full check (`trl_doctor.context.context.Context`), in the check's worker, with the ML stack:
  the rule's `check`;
- `static`: `check --static` (`trl_doctor.static.StaticContext`), in the printing process, from files alone and a
  TRL release's config classes shipped as data: the rule's `static` judgment;
- `watch`: a job's logged metrics (`trl_doctor.watch.context.WatchContext`): `trl-doctor watch PATH` and
  DoctorCallback(watch=True): the rule's `watch` judgment (a rule of the watch family has only that one), reading
  the logs through trl_doctor.facts.metrics and the job's settings through `config_value`.

What every provider answers is below; `config_value(ctx, key)` (`trl_doctor.facts.launch.settings`) is the one way to
read the value the trainer will see for a key, in every context. A fact that needs what a provider lacks (the ML
stack under --static) raises `Unavailable`, and the rule reading it is `skip` with that reason. A provider may
offer more (the static context's files read as JSON, the full context's loaded tokenizer and models); a judgment
written for one context reads that context's extras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from trl_doctor.options import Options

KINDS = ("full", "static", "watch")


@runtime_checkable
class CheckContext(Protocol):
    """What every context gives a rule: its kind, the config, the check's options, the trainer, the script's own
    objects (a launch command; None otherwise), the release of a package judged, and the facts' cache."""

    kind: str  # one of KINDS
    config: Any  # trl_doctor.context.config.DoctorConfig: the keys as written (`raw`), the artifacts' paths
    options: "Options"  # the check's options, every field present (no getattr with a default)
    live: Any  # trl_doctor.context.context.Live for a launch command, else None
    _cache: dict  # where `fact` keeps its answers for this check

    @property
    def trainer(self) -> str:
        """`grpo`, `rloo`, `ppo` (or `other`, a launch command's trainer that is none of them)."""
        ...

    def version(self, dist: str) -> str | None:
        """The release of `dist` judged: the installed one (full), the TRL release judged against (static)."""
        ...
