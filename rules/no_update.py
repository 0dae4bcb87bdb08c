"""TW004 no-update: the gradient norm is 0 while the rewards still differ: the policy is not updated

What it does
  Flags `patience` (3) steps in a row where `grad_norm` is 0 while the rewards still have a spread
  (`reward_std` above 0, or `frac_reward_zero_std` at most 0.75). Zero gradients with no reward
  spread are zero-advantage's, not this rule's. Where a log covers several steps, its grad_norm is
  the last step's alone: the spread must be in every step (`frac_reward_zero_std` 0), or the
  policy still the reference (`kl` 0).
Why is this bad?
  With a reward spread the advantages are not 0, so the loss has a gradient. A norm of exactly 0
  says none reaches the trained weights: every trainable parameter frozen or detached from the loss
  (a LoRA whose target_modules match nothing the forward pass uses, a model in eval mode under
  no_grad, a loss computed on a copy), or every completion token masked out.
Example
  {'loss': 0.0, 'grad_norm': 0.0, 'reward': 0.4, 'reward_std': 0.3, ...} log after log.
Fix safety
  Nothing to rewrite: `trl-doctor check` runs one real step and counts the tensors it updates
  (smoke-step).
  Thresholds: [tool.trl-doctor.watch.no-update] patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, passed, rule
from trl_doctor.facts.metrics import (by_number, one_step_of_many, optional, patience, series, span, streak_finding,
                                      streaks, too_little)

SLUG = "no-update"


@rule(id="TW004", slug=SLUG, title="Gradient norm 0 while rewards differ", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    _, grad = series(ctx, "grad_norm")
    spread = _spread(ctx)
    holds, needed = (lambda p: p.value == 0 and spread.get(p.number, False)), patience(ctx, SLUG, 3)
    runs = streaks(grad, holds, needed)
    if not runs and (early := too_little(ctx, grad, holds, needed, "grad_norm 0 while the rewards differ")):
        yield early
        return
    if not runs:
        zero = sum(1 for p in grad if p.value == 0)
        yield passed(f"grad_norm is above 0 wherever the rewards differ ({zero} of {len(grad)} logs at 0)")
        return
    run = runs[-1]
    message = (f"grad_norm 0 {span(run)} while the rewards still differ: no gradient reaches the trained weights "
               "(frozen or detached parameters, a LoRA that matches nothing the forward pass uses, every token masked)")
    yield streak_finding(ctx, run, message, message + "; later logs have a gradient again", metric="grad_norm")


def _spread(ctx) -> dict[int, bool]:
    """Per log, whether the rewards had a spread (a group with differing rewards) in the step its grad_norm is of."""
    name, frac = optional(ctx, "frac_reward_zero_std")
    if one_step_of_many(ctx, "grad_norm"):
        # the log's last step may be one whose groups were all tied (its zero gradient is then right), unless no
        # step of the log had a tied group; or the rewards differed and the policy never left the reference (kl 0:
        # no step of the log updated it)
        _, kl = optional(ctx, "kl", "objective/kl")
        still = {n for n, v in by_number(kl).items() if v == 0}
        some = {n for n, v in by_number(frac).items() if v <= 0.75}
        every = {n for n, v in by_number(frac).items() if v == 0}
        return {n: True for n in (still & some) | every}
    if name is not None:  # a quarter of the groups or more with a spread: a zero gradient on the log's step is no chance
        return {n: v <= 0.75 for n, v in by_number(frac).items()}
    _, std = optional(ctx, "reward_std", "objective/scores_std")
    return {n: v > 1e-8 for n, v in by_number(std).items()}
