"""The context a rule's judgment reads, declared once (as pip-audit's interface.py declares its services).

A rule's one judgment runs in the contexts it declares (`@rule(contexts=...)`), each a provider of this interface:

- `full`: the full check (`trl_doctor.context.context.Context`), in the check's worker, with the ML stack;
- `static`: `check --static` (`trl_doctor.static.StaticContext`), in the printing process, from files alone and a
  TRL release's config classes shipped as data;
- `watch`: a job's logged metrics (`trl_doctor.watch.context.WatchContext`): `trl-doctor watch PATH` and
  DoctorCallback(watch=True), reading the logs through trl_doctor.facts.metrics.

What every provider answers is below. The facts are where the contexts differ: a shared question has one provider
per context (`config_value(ctx, key)`, `trl_doctor.facts.launch.settings`, is the pattern), and a provider that
cannot answer raises `Unavailable` with its reason, so the rule asking is `skip`. What only the full context holds
(FULL_ONLY, below) raises `Unavailable` in another context instead of an AttributeError (`Lacks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from trl_doctor.errors import Unavailable

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


# What only the full context has (the ML stack's loaded objects and the files read through them), each with the words
# another context's Unavailable says: a fact or judgment that reaches for one of them in the static or watch context
# gets the rule skipped with that reason, never an AttributeError reported as a crashed rule.
FULL_ONLY = {
    "tokenizer": "the tokenizer as transformers loads it",
    "model_config": "the model config as transformers loads it",
    "generation_config": "the generation config as transformers loads it",
    "meta_model": "the model built on the meta device",
    "twin": "the model's small twin",
    "twin_dir": "the model's small twin",
    "dataset": "the dataset as the datasets library loads it",
    "eval_dataset": "the evaluation dataset as the datasets library loads it",
    "device": "the device the trainer step runs on",
    "has_cuda": "torch",
    "model_file": "the model's files as the full check resolves them",
    "tokenizer_file": "the tokenizer's files as the full check resolves them",
    "read_json": "the model's files as the full check resolves them",
    "disk_tokenizer_copy": "the tokenizer as transformers loads it",
    "workdir": "the check's working folder",
    "need": "the full check's inputs",
}
LACKING = {"static": "needs the full check", "watch": "not known from a job's logs"}


class Lacks:
    """A context other than the full one: reaching for what only the full context has (FULL_ONLY) raises
    Unavailable with the reason, so the rule asking is `skip`."""

    kind: str

    def __getattr__(self, name: str) -> Any:
        if name in FULL_ONLY:
            raise Unavailable(f"{LACKING.get(self.kind, 'not here')}: {FULL_ONLY[name]}")
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
