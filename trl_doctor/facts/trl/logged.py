"""The metric names the installed TRL trainer can log, read from its own source: every `self._metrics[mode][...]`
key (`"reward"`, `f"rewards/{reward_func_name}/mean"`), the names an evaluation logs with `eval_` before them, beside
transformers' own (`eval_loss`, `eval_runtime`, ...). A metric the trainer never logs, named as the metric to keep
the best model by, stops the job with KeyError at its first evaluation."""

from __future__ import annotations

import inspect
import re

from trl_doctor.errors import Unavailable

_KEY = re.compile(r"""_metrics\[mode\]\[(f?)(["'])(.+?)\2\]""")
_TRAIN_ONLY = re.compile(r"""_metrics\[f?["']""")  # trl <= 0.15: one store, filled in training only
TRANSFORMERS_EVAL = ("loss", "runtime", "samples_per_second", "steps_per_second")


def metric_patterns(trainer_cls) -> list[re.Pattern] | None:
    """Patterns of the names the trainer logs in an evaluation (an f-string's placeholders match any name); [] where
    its source keeps one store filled in training only (trl <= 0.15: an evaluation logs transformers' own metrics
    alone); None where its source logs none through TRL's metric store (PPO's trainer)."""
    patterns: list[re.Pattern] = []
    train_only = False
    for cls in type.mro(trainer_cls):
        if cls.__module__.startswith(("transformers.", "builtins")):
            continue
        module = inspect.getmodule(cls)
        if module is None:
            continue
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            continue
        train_only = train_only or bool(_TRAIN_ONLY.search(source))
        for fstring, _, key in _KEY.findall(source):
            if fstring:
                parts = re.split(r"\{[^}]*\}", key)
                patterns.append(re.compile("^" + "[^/]+".join(re.escape(p) for p in parts) + "$"))
            else:
                patterns.append(re.compile("^" + re.escape(key) + "$"))
    return patterns if patterns or train_only else None


def eval_metrics(ctx) -> list[re.Pattern]:
    """What an evaluation of the job's trainer logs, as patterns of the name without its `eval_`; Unavailable where
    the trainer's source says nothing of it."""
    from trl_doctor.facts.trl import installed

    try:
        cls = installed.trainer_class(ctx.trainer)
    except Exception as exc:  # the trainer class cannot be imported: trainer-config and version-skew say why
        raise Unavailable(f"the installed {ctx.trainer} trainer cannot be read: {type(exc).__name__}") from None
    found = metric_patterns(cls)
    if found is None:
        raise Unavailable(f"{cls.__name__}'s source logs no metric through TRL's metric store")
    return found + [re.compile(f"^{name}$") for name in TRANSFORMERS_EVAL]


def logs(patterns: list[re.Pattern], metric: str) -> bool:
    name = metric[len("eval_"):] if metric.startswith("eval_") else metric
    return any(p.match(name) for p in patterns)
