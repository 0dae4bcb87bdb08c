"""TW007 non-finite: NaN or inf in the loss, the gradient norm or the KL

What it does
  Fails at the first log whose `loss`, `kl` or total `reward` (PPO's `loss/policy_avg`,
  `loss/value_avg`, `objective/kl`, `objective/scores`) is NaN or inf, and where `grad_norm`
  is NaN or inf in bf16 or fp32 (the job's settings say which), or in `patience` (3) steps in a row
  whatever the precision. One non-finite grad_norm in fp16 with a finite loss is the loss scaler
  skipping a step and lowering its scale: a pass that says so (also where the precision is not
  known).
Why is this bad?
  A NaN reaches the weights at the next optimizer step, and from then on every output is NaN: the
  job runs on, logging NaN, until its time is up. Causes: a learning rate that diverges, fp16
  overflow, a reward of NaN or inf, log-probabilities of -inf where a token was masked. A reward of
  inf is silent on TRL 1.x: the group's advantages are NaN, set to 0, and the loss stays finite
  (a real GRPO run, trl 1.16: the loss fell to beta x kl from the step the reward returned inf).
Example
  {'loss': nan, 'grad_norm': nan, 'kl': nan, ...}
Fix safety
  Nothing to rewrite: lower the learning rate, set max_grad_norm, use bf16 rather than fp16, check
  the rewards for NaN.
  Thresholds: [tool.trl-doctor.watch.non-finite] patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, fail, passed, rule
from trl_doctor.facts.metrics import finite, flagged, is_async_grpo, kl_term, optional, patience, span, streaks
from trl_doctor.facts.launch.settings import config_value

SLUG = "non-finite"


_REWARDS = ("reward", "reward_std", "objective/scores")
# PPO's: loss/*, objective/kl, objective/scores. Not `rewards/<f>/mean`: a function that returns None for a sample
# (a multi-task reward) makes its own mean NaN by design, and the total `reward` leaves it out (nansum)
_WATCHED = ("loss", "loss/policy_avg", "loss/value_avg", "kl", "objective/kl") + _REWARDS
_CONSEQUENCE = {
    False: "once a NaN reaches the weights every later output is NaN; lower the learning rate, set max_grad_norm, "
           "check the rewards for NaN",
    True: "a reward function returned inf (or NaN where no other function scored the sample): the groups holding it "
          "get NaN advantages, which TRL 1.x sets to 0 (they teach nothing, and the loss is the KL term's alone) and "
          "older releases carry into the loss; make the reward functions return finite numbers, or None to leave "
          "a sample out",
}

# AsyncGRPO's _score_group standardizes a group's rewards with their mean and std (async_rollout_worker.py): an inf
# makes every advantage of its group NaN, and nothing sets them to 0
_ASYNC_REWARD = ("a reward function returned inf: AsyncGRPO computes the group's advantages from its rewards' mean "
                 "and std, so every advantage of that group is NaN, and the loss, the gradient and the weights turn "
                 "NaN with it; make the reward functions return finite numbers, or None to leave a sample out")


@rule(id="TW007", slug=SLUG, title="NaN or inf in the loss, gradient norm or KL", trainers=ALL_TRAINERS,
      contexts=("watch",))
def judge(ctx):
    notes, seen, found = [], [], []
    for key in _WATCHED:
        _, points = optional(ctx, key)
        if points:
            seen.append(key)
        bad = [p for p in points if not finite(p.value)]
        if bad and key == "kl" and kl_term(ctx) and (config_value(ctx, "beta") == 0 or len(bad) == len(points)):
            # with beta 0 TRL computes no KL, and some releases log its empty mean: NaN from the first log on
            notes.append("kl NaN in every log: with beta 0 the KL is not computed (TRL logs its empty mean)")
            continue
        if bad:
            found.append((bad[0].number, key, bad))
    if found:  # the earliest: where it starts
        _, key, bad = min(found, key=lambda f: f[0])
        consequence = _ASYNC_REWARD if key in _REWARDS and is_async_grpo(ctx) else _CONSEQUENCE[key in _REWARDS]
        yield fail(f"{key} is {bad[0].value} at {bad[0].at}: {consequence}", **flagged(bad, metric=key))
        return
    _, grad = optional(ctx, "grad_norm")
    bad = [p for p in grad if not finite(p.value)]
    if not bad:
        if grad:
            seen.append("grad_norm")
        if not seen:
            from trl_doctor import Unavailable

            raise Unavailable("the log has no loss, grad_norm or kl")
        names = [k for k in seen if not (notes and k == "kl")]
        yield passed(f"{', '.join(names)} finite in every log" + (f"; {notes[0]}" if notes else ""))
        return
    fp16, bf16 = config_value(ctx, "fp16"), config_value(ctx, "bf16")
    runs = streaks(grad, lambda p: not finite(p.value), patience(ctx, SLUG, 3))
    if runs:
        run = runs[0]
        yield fail(f"grad_norm is {run[0].value} {span(run)}: more than a loss scaler's skipped step; the weights "
                   "stop improving or turn NaN", **flagged(run, metric="grad_norm"))
    elif bf16 or (fp16 is False and bf16 is False):
        precision = "bf16" if bf16 else "fp32"
        yield fail(f"grad_norm is {bad[0].value} at {bad[0].at} in {precision}, where no loss scaler skips a step: the "
                   "optimizer applies it", **flagged(bad, metric="grad_norm"))
    else:
        why = "fp16" if fp16 else "the precision is not known"
        yield passed(f"grad_norm non-finite at {', '.join(p.at for p in bad[:5])} with a finite loss ({why}): the fp16 "
                     "loss scaler skips such a step and lowers its scale; not a failure")
