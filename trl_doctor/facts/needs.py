"""What a rule's `needs` names, built before it runs: the context's inputs (tokenizer, model_config,
generation_config, meta_model, twin, dataset) and two facts, trainer_config and trainer_run. One resolver for the
engine and for the facts that need the same things (the trainer run)."""

from __future__ import annotations


def build(ctx, need: str) -> None:
    """Build `need` (raises Unavailable or InputError when it cannot be). `trainer_run` is only an ordering need:
    the rule reads the run itself and reports why it could not run."""
    if need == "trainer_run":
        return
    if need == "trainer_config":
        from trl_doctor.facts.trl.trainer_config import trainer_config

        trainer_config(ctx)
        return
    ctx.need(need)
