"""What a trainer built by a framework or a script replaces of TRL's own trainer: its construction (a subclass whose
`__init__` calls transformers' Trainer.__init__ itself, or a framework that deletes TRL's: ms-swift's GRPOTrainer),
and the methods through which TRL's trainer reads the dataset's rows, renders prompts and scores completions.

Where both are replaced, the rules that model TRL's own data path (the `prompt` column and its formats, the prompt
lengths TRL renders, one step of TRL's own trainer) describe a job the framework does not run: they skip, saying which
methods took TRL's place. A subclass that keeps TRL's data path (the R1-V-style trainers that only replace __init__)
is judged as TRL's. This module is light: nothing is imported but the class given.
"""

from __future__ import annotations

# TRL's GRPO/RLOO methods that read the rows of a batch and turn them into prompts, completions and rewards
DATA_PATH = ("_prepare_inputs", "_generate_and_score_completions", "_generate", "_calculate_rewards")


def _own(module: str) -> bool:
    """Whether a class's module is outside TRL and transformers (a framework's or the script's code)."""
    top = (module or "").split(".")[0]
    return top not in ("trl", "transformers", "accelerate")


def replaced_methods(cls: type | None) -> list[str]:
    """`module.Class.method` for each of TRL's data-path methods a class outside TRL defines for `cls`."""
    if not isinstance(cls, type):
        return []
    out = []
    for name in DATA_PATH:
        owner = next((c for c in cls.__mro__ if name in vars(c)), None)
        if owner is not None and _own(owner.__module__):
            out.append(f"{owner.__module__}.{owner.__qualname__}.{name}")
    return out


def own_data_path(ctx) -> str | None:
    """Why TRL's data path does not describe this job, in words, or None: the captured trainer bypassed its TRL
    parent's __init__ and replaces the methods that read its rows."""
    live = getattr(ctx, "live", None)
    if live is None or not getattr(live, "bypassed", None):
        return None
    replaced = replaced_methods(live.trainer_cls)
    if not replaced:
        return None
    cls = live.trainer_cls
    return (f"{cls.__module__}.{cls.__qualname__} replaces TRL's {live.bypassed}.__init__ and the methods that read "
            f"the dataset's rows and score completions ({', '.join(replaced)}): the rows, prompts and rewards go "
            f"through its own code, not TRL's, so what TRL's own trainer would do with them is not this job's")
