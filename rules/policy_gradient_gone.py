"""TW003 policy-gradient-gone: the loss is the KL term alone: no policy-gradient signal is left

What it does
  Where every group's rewards are equal (`frac_reward_zero_std` >= 0.99, or `reward_std` 0 on trl <=
  0.17), it compares `loss` with beta x `kl` (beta from the job's settings; without them, the job's
  own loss/kl ratio): equal within `rel` (2%) for `patience` (5) steps in a row, the policy-gradient
  term is gone. A loss and grad_norm of exactly 0 there, or where every completion is clipped and
  the job masks truncated completions (`mask_truncated_completions`, in its settings), too. Ties at
  the run's best reward (a saturation: zero-advantage) are a warn that says so.
Why is this bad?
  GRPO's loss is -advantage x ratio + beta x KL. A healthy job logs loss close to beta x kl too (the
  advantages of a group sum to 0, so the first term's value is about 0): that alone is never
  flagged. With no reward spread, or with every completion truncated and masked
  (mask_truncated_completions), the first term's gradient is gone as well: the only update pulls the
  policy back to the reference. All completions clipped while rewards differ is not this (same
  lengths make the first term's value 0, not its gradient): never-terminating judges that.
Example
  {'loss': 0.0004, 'kl': 0.01, 'frac_reward_zero_std': 1.0, ...} with beta 0.04, log after log.
Fix safety
  Nothing to rewrite: see zero-advantage and never-terminating for the causes.
  Thresholds: [tool.trl-doctor.watch.policy-gradient-gone] rel, patience.
"""

from __future__ import annotations

from trl_doctor import Unavailable, fail, passed, rule, warn
from trl_doctor.facts.metrics import (by_number, collapsed_entropy, flagged, fmt, kl_term, limit, near, no_spread, ongoing,
                                      optional, patience, reward_level, series, span, streaks)
from trl_doctor.facts.launch.settings import config_value

SLUG = "policy-gradient-gone"


@rule(id="TW003", slug=SLUG, title="The loss is the KL term alone", trainers=("grpo", "rloo", "other"), contexts=("watch",))
def judge(ctx):
    _, loss = series(ctx, "loss")
    no_signal, clipped = _no_signal(ctx)
    if not no_signal and not clipped:
        yield passed("no log where every group's rewards were equal or every completion was clipped: the "
                     "policy-gradient term has a signal")
        return
    _, kl = optional(ctx, "kl")
    kl = by_number(kl)
    _, grad = optional(ctx, "grad_norm")
    grad = by_number(grad)
    rel = limit(ctx, SLUG, "rel", 0.02)
    beta = config_value(ctx, "beta") if kl_term(ctx) else 0  # AsyncGRPO's loss has no KL term: only 0 says it
    ratios = [p.value / kl[p.number] for p in loss if p.number in no_signal and kl.get(p.number)]
    if beta is None and ratios:
        beta = sorted(ratios)[len(ratios) // 2]  # the job's own loss/kl ratio, where its settings are not known

    def holds(p) -> bool:
        if p.number in no_signal or p.number in clipped:
            if p.value == 0 and grad.get(p.number) == 0:
                return True  # nothing trains: no spread, or every completion clipped and masked
        return p.number in no_signal and bool(beta) and p.number in kl and near(p.value, beta * kl[p.number], rel=rel,
                                                                               abs_=1e-7)

    runs = streaks(loss, holds, patience(ctx, SLUG, 5))
    if not runs:
        yield passed(f"where no group had spread or all were clipped, the loss was not beta x kl alone "
                     f"({len(no_signal | clipped)} such logs)")
        return
    run = runs[-1]
    if not ongoing(ctx, run, "loss"):
        raise Unavailable(f"the loss had no policy-gradient term {span(run)}, then the signal came back "
                          "(zero-advantage and never-terminating say why)")
    if reward_level(ctx, run) == "top" and not collapsed_entropy(ctx, run):
        yield warn(f"the loss is the KL term alone {span(run)}: saturated, the groups tie at the run's best reward, "
                   "so those batches give no policy-gradient signal; the task is too easy for the model now (harder "
                   "prompts, or more generations per prompt)", **flagged(run, metric="loss", saturated=True))
    elif run[0].value == 0:
        yield fail(f"the loss and grad_norm are 0 {span(run)}, with no reward spread or every completion clipped and "
                   "masked: the policy-gradient term is gone and nothing is updated", **flagged(run, metric="loss"))
    else:
        yield fail(f"the loss is beta x kl alone (beta {fmt(beta)}) {span(run)}, with no reward spread: the "
                   "policy-gradient term is gone, and the only update pulls the policy back to the reference",
                   **flagged(run, metric="loss"))


def _no_signal(ctx) -> tuple[set[int], set[int]]:
    """The logs where every group's rewards were equal, and those where every completion was clipped."""
    out = no_spread(ctx)
    _, clipped = optional(ctx, "completions/clipped_ratio")
    if config_value(ctx, "mask_truncated_completions") is not True:
        return out, set()  # unmasked, clipped completions still train (a loss of 0 is then the advantages' sum)
    return out, {p.number for p in clipped if p.value >= 0.99}
