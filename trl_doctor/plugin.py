"""The public face for rule plugins: everything a rule module imports from trl-doctor itself.

    from trl_doctor.plugin import Fix, Edit, config_value, fact, fail, passed, rule, skip

The contract:

- A rule module imports `trl_doctor.plugin` (and, for built-in rules, the facts layer `trl_doctor.facts.*`),
  never another module of trl-doctor (they are private: `trl_doctor.context.context`, `trl_doctor.registry`...).
  The names below keep their meaning across releases; the modules they come from may move.
- `@rule(id=..., slug=..., title=..., trainers=..., needs=..., fixable=..., contexts=...)` turns a generator
  function of the context, the rule's one judgment, into a `Rule`; the module's docstring is what `trl-doctor
  explain` prints. `contexts` says where the judgment runs: `("full",)` (the default), `("full", "static")` (also
  under `check --static`: files alone, no ML stack; a fact the static context cannot answer raises `Unavailable`
  and the rule is `skip` with that reason), `("watch",)` (a job's logged metrics: `trl-doctor watch`,
  DoctorCallback(watch=True); `watch_only=True` says the same). A preflight rule left out of `static` is `skip`
  there, and `static_skip="it ..."` says why. Every context implements `CheckContext` (trl_doctor/interface.py):
  `kind`, `config`, `options`, `trainer`, `live`, `version(dist)`. Third-party modules are found through the
  `trl_doctor.rules` entry-point group (a module: every `Rule` in it; or one `Rule` object).
- `config_value(ctx, key, default)` is how a rule reads a config value, in every context: the value the trainer
  will see in the full check (TRL's built config object, else the user's value, else the installed class's
  default), the value as written (else the judged release's default) under --static, the job's own in the watch.
  A value TRL's parser refuses raises `Unavailable` (the rule is `skip`; trainer-config reports the value).
  `ctx.config.raw` is the file as written, for a rule that means exactly that.
- `needs` names what the rule reads: the context's inputs (tokenizer, model_config, generation_config,
  meta_model, twin, dataset) and two facts: trainer_config (TRL's config object: `trainer_config(ctx)`) and
  trainer_run. Each is built before the rule runs; one that cannot be built (it
  raised `Unavailable`) makes the rule `skip` with that reason. `trainer_run` also puts the rule after the
  static ones, where it reads the check's one trainer run.
- The check function yields `Finding`s: `passed`, `warn`, `fail`, `skip` (status, message, details as keyword
  arguments, an optional `Location`). The worst status is the rule's; the others are listed under `also`. A
  rule that raises is `error`, and the other rules still run. `InputError` means the user's input cannot be
  read (the check stops, exit 2); `Unavailable` means this rule cannot judge (it is `skip`).
- A fix is data: `Fix(description, edits, applicability=...)`, each `Edit(path, set=((key, value), ...))` for a
  top-level key of a JSON or YAML file (`DELETE` removes the key; order and YAML comments are kept) or
  `Edit(path, content=bytes)` for a whole file. Applicability: `safe` is applied by `--fix`, `unsafe` only
  with `--fix --unsafe-fixes` (it rewrites weights or changes what the job trains), `manual` (`manual(text)`)
  is shown and never applied. On a launch command a fix of a key the script computed becomes `manual`.
- `@fact` caches a function of the context (and hashable arguments) for one check, so several rules share an
  answer; an `InputError` or `Unavailable` it raises is cached too.

Importing this module imports nothing heavy: torch, transformers and TRL load inside the context, in the
check's worker.
"""

from __future__ import annotations

from trl_doctor.cache import fact
from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.trl.trainer_config import trainer_config
from trl_doctor.context.context import Context
from trl_doctor.errors import InputError, Unavailable
from trl_doctor.interface import CheckContext
from trl_doctor.registry import Rule, rule
from trl_doctor.wording import one_line, shown
from trl_doctor.types import DELETE, Edit, Finding, Fix, Location, Status, fail, manual, passed, skip, warn
from trl_doctor.vocabulary import ALL_TRAINERS, ASYNC_GRPO, TRAINERS

__all__ = [
    "rule", "Rule", "fact", "Context", "CheckContext", "TRAINERS", "ALL_TRAINERS", "ASYNC_GRPO",
    "Finding", "Status", "Location", "passed", "warn", "fail", "skip",
    "Fix", "Edit", "DELETE", "manual",
    "InputError", "Unavailable",
    "config_value", "trainer_config", "one_line", "shown",
]
