"""The watch context (trl_doctor.interface.CheckContext, kind `watch`): a job's logged metrics, the trainer that logged
them, what is known of its settings (the live trainer's arguments in the job; a recipe given with `--config` from the
outside), the thresholds the project config sets, and the preflight report's verdicts when the job has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_doctor.interface import Lacks
from trl_doctor.options import Options

# names only one trainer family logs: PPO's value head, the PPO-style RLOO's (trl <= 0.19) objective/* without one
_PPO = ("loss/value_avg", "val/clipfrac_avg", "val/vpred")
_PPO_STYLE = ("objective/kl", "objective/rlhf_reward", "objective/scores")


@dataclass
class WatchConfig:
    """What the watch knows of the job's settings: `raw` holds the values (beta, max_completion_length, fp16, ...)."""

    path: Path
    trainer: str
    raw: dict[str, Any] = field(default_factory=dict)
    trainer_inferred: bool = True
    parsed: Any = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __getattr__(self, name: str) -> Any:
        """A preflight config's artifacts (the model, tokenizer, reward functions, dataset) are not in a job's logs:
        a fact that asks for one gets Unavailable, and the rule asking is `skip`."""
        import dataclasses

        from trl_doctor.context.config import DoctorConfig
        from trl_doctor.errors import Unavailable

        if not name.startswith("_") and name in {f.name for f in dataclasses.fields(DoctorConfig)}:
            raise Unavailable(f"not known from a job's logs: the job's {name.replace('_', ' ')}")
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


class WatchContext(Lacks):
    """What a watch rule reads (trl_doctor.interface.CheckContext, `kind` "watch"): the job's logged metrics
    (`history`, a trl_doctor.watch.history.History), the job's settings as `config` (the trainer's own arguments in
    the job, the recipe's from the outside: config_value reads them), the thresholds the project config sets, the
    preflight report's verdicts when given, and the TRL release that wrote the log. `running` says steps remain after
    the newest log (the callback, --follow). Nothing here loads a model: the full check's facts are unavailable."""

    kind = "watch"
    live = None

    def __init__(self, history, trainer: str | None = None, settings: dict | None = None, *,
                 thresholds: dict | None = None, preflight: dict | None = None, release: str | None = None,
                 running: bool = False):
        self.history = history
        inferred = trainer is None
        self.config = WatchConfig(history.source, trainer or infer_trainer(history.names()), dict(settings or {}),
                                  inferred)
        self.options = Options(smoke=False)
        self._cache: dict = {}
        self.thresholds = thresholds or {}
        self.preflight = preflight or {}
        self.release = release
        self.running = running  # the job is still training (the callback, --follow): steps remain after the last log

    @property
    def trainer(self) -> str:
        return self.config.trainer

    def version(self, dist: str) -> str | None:
        """The release that wrote the log, where known (the job's own; from the outside, --trl-version)."""
        if dist == "trl":
            return self.release
        return None


def infer_trainer(names: set[str]) -> str:
    """The trainer whose metric names these are: `async_grpo` (TRL's AsyncGRPOTrainer: its queue and packing
    metrics), `ppo` (a value head's), `rloo` (PPO-style objective/* without one, trl <= 0.19), else `grpo` (GRPO and
    today's RLOO log the same names)."""
    from trl_doctor.facts.metrics import ASYNC_GRPO_MARKS
    from trl_doctor.vocabulary import ASYNC_GRPO

    if any(n in names for n in ASYNC_GRPO_MARKS):
        return ASYNC_GRPO
    if any(n in names for n in _PPO):
        return "ppo"
    if any(n in names for n in _PPO_STYLE):
        return "rloo"
    return "grpo"
