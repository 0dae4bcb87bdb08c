"""TW011 ratio-clipping: the policy's updates are clipped on a large share of tokens

What it does
  Reads the share of tokens whose probability ratio the PPO clip cut (PPO's and the PPO-style RLOO's
  `policy/clipfrac_avg`; GRPO's `clip_ratio/region_mean`, `clip_ratio` on trl 0.17-0.19) and warns
  where it stays above `max` (0.3) for `patience` (3) steps; PPO's `policy/approxkl_avg` above
  `max_approxkl` (0.1) likewise. A clip ratio of 0 is never flagged: with one optimizer step per
  generation batch (GRPO's num_iterations 1) the ratio is 1 and nothing is clipped, as designed.
Why is this bad?
  The clip bounds how far one update moves the policy; when a third of the tokens hit it, the
  updates are too large for the data (a learning rate too high, too many epochs over one batch) and
  most of the gradient is thrown away. Typical PPO runs clip 5-20% (TRL's docs: val/ratio should
  float around 1; Schulman et al.'s target KL, 0.01-0.05, bounds approxkl).
Example
  {'policy/clipfrac_avg': 0.46, 'policy/approxkl_avg': 0.21, ...}
Fix safety
  Nothing to rewrite: lower the learning rate, num_ppo_epochs or num_iterations.
  Thresholds: [tool.trl-doctor.watch.ratio-clipping] max, max_approxkl, patience.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, passed, rule, warn
from trl_doctor.facts.metrics import flagged, fmt, limit, optional, patience, series, span, streaks

SLUG = "ratio-clipping"


@rule(id="TW011", slug=SLUG, title="Updates clipped on a large share of tokens", severity="warn",
      trainers=ALL_TRAINERS, contexts=("watch",))
def judge(ctx):
    name, points = series(ctx, "policy/clipfrac_avg", "clip_ratio/region_mean")
    n = patience(ctx, SLUG, 3)
    checks = [(name, points, limit(ctx, SLUG, "max", 0.3), "of the tokens' ratios clipped")]
    approx, approx_points = optional(ctx, "policy/approxkl_avg")
    if approx is not None:
        checks.append((approx, approx_points, limit(ctx, SLUG, "max_approxkl", 0.1), "approximate KL between updates"))
    for metric, values, bound, words in checks:
        runs = streaks(values, lambda p, bound=bound: p.value > bound, n)
        if runs:
            run = runs[0]
            yield warn(f"{metric} {fmt(run[0].value)} {span(run)} (above {fmt(bound)}: {words}): the updates are too "
                       "large for the data; lower the learning rate or the epochs over each batch",
                       **flagged(run, metric=metric))
            return
    yield passed(f"{name} at most {fmt(max(p.value for p in points))} over {len(points)} logs")
