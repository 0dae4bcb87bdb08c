"""Facts about a job's logged metrics, for the watch rules (the `watch` context, trl_doctor.interface).

A watch rule reads a quantity by the names the releases gave it (`series(ctx, "frac_reward_zero_std")`), finds where a
condition held long enough (`streaks`), and reads its thresholds through `limit`, which the project config can change
(`[tool.trl-doctor.watch.<slug>]`, or `[watch.<slug>]` in .trl-doctor.toml). Outside the watch context these facts
are unavailable (the rule is `skip`).

Evidence is counted in optimizer steps, not logs (issue 43): a log covers `logging_steps` steps (TRL averages most
metrics over them; the history knows the interval from the state, the callback's arguments or the gaps between logged
steps), so `patience(ctx, slug, 5)` is the number of logs in a row that covers 5 steps, and at least 2 where one log
covers more: at GRPOConfig's default logging_steps=10 a condition from step 1 is flagged at step 20. A streak
tolerates one log's dip inside it (`streaks`), so its onset is where the condition began; a condition the newest
logs hold for fewer logs than that is `pending` (a skip that says how much is needed), not a pass.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, NamedTuple

from trl_doctor.errors import Unavailable


class Point(NamedTuple):
    """One logged value: the log it came from (`at`: "step 40" or "log 4"), its number in the log, its step."""

    at: str
    number: int
    step: int | None
    value: float


def history(ctx):
    """The watched job's logs (trl_doctor.watch.history.History); Unavailable outside the watch."""
    found = getattr(ctx, "history", None)
    if found is None:
        raise Unavailable("judged on a job's logged metrics: `trl-doctor watch PATH` or DoctorCallback(watch=True)")
    return found


def series(ctx, *names: str) -> tuple[str, list[Point]]:
    """The first of `names` the job logged, and its values, oldest first; Unavailable naming them when it logged none."""
    logs = history(ctx)
    for name in names:
        points = logs.column(name)
        if points:
            return name, points
    raise Unavailable(f"the log has no {' or '.join(names)}")


def optional(ctx, *names: str) -> tuple[str, list[Point]] | tuple[None, list[Point]]:
    """`series`, or (None, []) when the job logged none of `names`."""
    try:
        return series(ctx, *names)
    except Unavailable:
        return None, []


def by_number(points: Iterable[Point]) -> dict[int, float]:
    return {p.number: p.value for p in points}


DIP_SHARE = 0.8  # a run bridges a one-log dip while at least this share of its logs hold the condition


def streaks(points: list[Point], holds: Callable[[Point], bool], patience: int, dip: bool = True) -> list[list[Point]]:
    """Every run of at least `patience` logged values that hold the condition, oldest first (each run: its holding
    points). With `dip`, a run goes on through one log that does not hold when the next one does and at least
    DIP_SHARE of the run holds: a failure that holds from step 80 with one dip at step 200 starts at step 80."""
    out: list[list[Point]] = []
    run: list[Point] = []
    misses = 0  # logs of the run that did not hold (bridged dips)
    gap = 0  # logs since the run's last holding one
    for p in points:
        if holds(p):
            if run and gap == 1 and dip and len(run) / (len(run) + misses + 1) >= DIP_SHARE:
                misses += 1
            elif run and gap:
                if len(run) >= patience:
                    out.append(run)
                run, misses = [], 0
            run.append(p)
            gap = 0
            continue
        gap += 1
        if gap > 1 and run:
            if len(run) >= patience:
                out.append(run)
            run, misses = [], 0
    if len(run) >= max(patience, 1):
        out.append(run)
    return out


def streak(points: list[Point], holds: Callable[[Point], bool], patience: int) -> list[Point] | None:
    """The first run of `streaks`, or None."""
    runs = streaks(points, holds, patience)
    return runs[0] if runs else None


def window_mean(points: list[Point], window: int, threshold: float) -> tuple[list[Point], float] | None:
    """The first `window` logs in a row whose values average `threshold` or more, with that mean; None when none do.
    A windowed fraction: a condition that holds for most of a stretch, dips and all, not only in a strict streak."""
    from statistics import fmean

    window = max(1, window)
    total = 0.0  # the window's sum, kept as it slides
    for i, p in enumerate(points):
        total += p.value - (points[i - window].value if i >= window else 0.0)
        if i + 1 >= window and total / window >= threshold:
            chunk = points[i + 1 - window:i + 1]
            mean = fmean(q.value for q in chunk)
            if mean >= threshold:  # the running sum's rounding: the window's own mean decides
                return chunk, mean
    return None


def pending(points: list[Point], holds: Callable[[Point], bool], needed: int) -> list[Point]:
    """The newest logs' run of the condition when it is shorter than `needed` (too little evidence yet), else []."""
    run: list[Point] = []
    for p in reversed(points):
        if not holds(p):
            break
        run.append(p)
    return list(reversed(run)) if 0 < len(run) < needed else []


def too_little(ctx, points: list[Point], holds: Callable[[Point], bool], needed: int, what: str):
    """A `skip` when the newest logs hold the condition (`what`) for fewer than `needed` logs: not yet a verdict, and
    not a pass either; None when they do not hold it."""
    from trl_doctor.types import skip

    run = pending(points, holds, needed)
    if not run:
        return None
    per = steps_per_log(ctx)
    return skip(f"{what} {span(run)}: too little evidence yet, {needed} logs in a row are needed "
                f"({needed * per} optimizer steps at {per} per log); the next logs decide",
                **flagged(run, pending=True))


def ongoing(ctx, run: list[Point], metric: str | None = None) -> bool:
    """Whether `run` lasts to the newest log that reports its `metric` (where a job logs a metric only at some steps,
    TRL's reward and completion metrics at the steps that generate, the logs between say nothing of it): the failure
    is still going on (a run that later logs ended is a past phase)."""
    h = history(ctx)
    column = h.column(metric) if metric else []
    last = column[-1].number if column else (h.logs[-1].number if h.logs else None)
    return last is not None and run[-1].number >= last


def carried(points: list[Point], numbers: Iterable[int]) -> dict[int, float]:
    """Per log number in `numbers`, the metric's value at that log or, where the log lacks it, at the newest log
    before that has it: a step that trains on an earlier generation's batch (steps_per_generation > 1, where TRL logs
    the rewards only at the generating step) has that generation's reward statistics."""
    known = by_number(points)
    out, value = {}, None
    for n in sorted(numbers):
        value = known.get(n, value)
        if value is not None:
            out[n] = value
    return out


def finite(value: float) -> bool:
    return math.isfinite(value)


def near(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-6) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def threshold_problem(table: object) -> str | None:
    """What is wrong with a table of watch thresholds ({slug: {name: number}}, as `[tool.trl-doctor.watch]` and
    DoctorCallback(watch={...}) give them), as `watch.<slug>.<name> ...` words, or None: each must be a finite number
    (TOML and Python both spell inf and nan, which no comparison of a rule's can use)."""
    if not isinstance(table, dict):
        return "the watch thresholds must be a table of rules' thresholds ({slug: {name: number}})"
    for slug, values in table.items():
        if not isinstance(values, dict):
            return f"watch.{slug} must be a table of numbers (a watch rule's thresholds)"
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"watch.{slug}.{name} must be a number, not {type(value).__name__}"
            if not math.isfinite(value):
                return f"watch.{slug}.{name} must be a finite number, not {value}"
    return None


def limit(ctx, slug: str, name: str, default: float) -> float:
    """A watch rule's threshold: the project config's `[watch.<slug>] <name> = ...` when set, else `default` (the
    rule's docstring says where each default comes from)."""
    table = (getattr(ctx, "thresholds", None) or {}).get(slug) or {}
    value = table.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return value


def steps_per_log(ctx) -> int:
    """The optimizer steps one log covers (the job's logging_steps; 1 when the log cannot tell)."""
    return history(ctx).steps_per_log()


# transformers logs these as the interval's last optimizer step's value (the gradient norm of that step, the learning
# rate now), where loss and TRL's own metrics are the interval's mean: at logging_steps 10, a logged grad_norm of 0
# says one step in ten had no gradient, not that the ten had none
LAST_STEP_ONLY = frozenset(("grad_norm", "learning_rate"))


def one_step_of_many(ctx, name: str) -> bool:
    """Whether a log's `name` is one step's reading of several the log covers (see LAST_STEP_ONLY)."""
    return name in LAST_STEP_ONLY and steps_per_log(ctx) > 1


def logs_for(ctx, steps: float) -> int:
    """The logs in a row that cover `steps` optimizer steps: at least 2 where one log covers more (one log's average
    is a single reading), never more than `steps`."""
    steps = max(1, int(steps))
    per = steps_per_log(ctx)
    return max(min(2, steps), -(-steps // per))


def patience(ctx, slug: str, default: int = 3) -> int:
    """How many logs in a row a condition must hold before a rule flags it: `[watch.<slug>] patience` (default
    `default`) counts optimizer steps, turned into logs by `logs_for`."""
    return logs_for(ctx, limit(ctx, slug, "patience", default))


def fmt(value: float) -> str:
    """A metric value as a finding prints it."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4g}"


def range_of(points: list[Point]) -> str:
    """`0.1 to 0.5 over 8 logs`: what a pass says it saw."""
    finite_values = [p.value for p in points if math.isfinite(p.value)] or [p.value for p in points]
    return f"{fmt(min(finite_values))} to {fmt(max(finite_values))} over {len(points)} logs"


def span(run: list[Point]) -> str:
    """`from step 4 to step 12 (5 logs)`."""
    if len(run) == 1:
        return f"at {run[0].at}"
    return f"from {run[0].at} to {run[-1].at} ({len(run)} logs)"


def flagged(run: list[Point], **more) -> dict:
    """The details a watch finding carries: where it starts and ends (the log numbers the sparklines and the plot
    mark; `logs` lists them where they are apart, as a rule's spikes are)."""
    numbers = [p.number for p in run]
    apart = numbers != list(range(numbers[0], numbers[0] + len(numbers)))
    return {"since": run[0].at, "since_log": numbers[0], "until_log": numbers[-1], **({"logs": numbers} if apart else {}),
            **more}


BRIEF_SHARE = 0.1  # a past phase shorter than this share of the metric's logs, ...
RECOVERED_TIMES = 5  # ... followed by at least this many times as many logs ...
RECOVERED_SHARE = 0.25  # ... and at least this share of them, is a blip the run got over: noted


def streak_finding(ctx, run: list[Point], now: str, past: str, brief_ok: bool = True, **details):
    """A streak's finding: a fail saying `now` while it lasts to the newest log, a warn saying `past` when later logs
    ended it (a past phase: those steps are lost, the job is not failing now), and a pass that still says `past`
    where that phase was a blip the run got over (`brief_ok`, the rule's word that this kind can be one): under
    BRIEF_SHARE of the logs of its metric, followed by RECOVERED_TIMES as many logs and at least RECOVERED_SHARE of
    them. Healthy public runs hold such blips (a few logs of tied groups or of cut completions in 200, then 150 logs
    of learning); a phase late in a run that then ends is no blip."""
    from trl_doctor.types import fail, passed, warn

    metric = details.get("metric")
    if ongoing(ctx, run, metric):
        return fail(now, **flagged(run, **details))
    blip = brief_past(ctx, run, metric) if brief_ok else None
    if blip is not None:
        return passed(f"a brief past phase, over since: {past} ({blip})", **flagged(run, **details))
    return warn(past, **flagged(run, **details))


def brief_past(ctx, run: list[Point], metric: str | None) -> str | None:
    """Where `run` is a blip the run got over (see streak_finding), how much of the run it was and came after, in
    words; None where it is not (it lasts to the newest log, it was long, or too little came after it)."""
    column = history(ctx).column(metric) if metric else history(ctx).logs
    after = sum(1 for p in column if p.number > run[-1].number)
    if column and len(run) < BRIEF_SHARE * len(column) and after >= RECOVERED_TIMES * len(run) \
            and after >= RECOVERED_SHARE * len(column):
        return f"{len(run)} of {len(column)} logs, and {after} logs since"
    return None


def brief_past_all(ctx, runs: list[list[Point]], metric: str | None) -> str | None:
    """Where every one of `runs` is a short stretch the job got over, in words (None where not): each under
    BRIEF_SHARE of the metric's logs, all of them together under twice that, and the last followed by RECOVERED_TIMES
    as many logs and RECOVERED_SHARE of them. A healthy run's isolated spikes (a warm-up transient's first two logs,
    one log at 45 nats among 37 near 0.5) are not a level; a stretch the job stays in is."""
    if not runs:
        return None
    column = history(ctx).column(metric) if metric else history(ctx).logs
    total = sum(len(run) for run in runs)
    if len(runs) == 1:
        return brief_past(ctx, runs[0], metric)
    if not column or total >= 2 * BRIEF_SHARE * len(column) or any(len(r) >= BRIEF_SHARE * len(column) for r in runs):
        return None
    after = sum(1 for p in column if p.number > runs[-1][-1].number)
    if after >= RECOVERED_TIMES * len(runs[-1]) and after >= RECOVERED_SHARE * len(column):
        return f"{len(runs)} short stretches, {total} of {len(column)} logs, and {after} logs since the last"
    return None


def marked(details) -> set[int]:
    """The log numbers a finding's details flag (see `flagged`)."""
    if details.get("logs"):
        return set(details["logs"])
    if "since_log" in details:
        return set(range(details["since_log"], details.get("until_log", details["since_log"]) + 1))
    return set()


def preflight(ctx, slug: str) -> tuple[str, str] | None:
    """(status, message) of the preflight check's rule `slug` on this job, when the watch has that report."""
    found = (getattr(ctx, "preflight", None) or {}).get(slug)
    return (found["status"], found["message"]) if found else None


# -- TRL's AsyncGRPOTrainer (trl.experimental.async_grpo; read in trl 1.16, fixtures/_async_grpo_runs.py ran it) ----
# Its logs are its own (async_grpo_trainer.py: `_log_metrics` 622-660, `compute_loss` 1588-1612, `_log_step_metrics`
# 1634-1696, `log` 1698-1721; async_rollout_worker.py: `_score_group` 1026-1124, `_push_rollout_metrics` 829-876),
# one row every logging_steps (AsyncGRPOConfig's default: 1), each value the window's mean unless its name says
# `total`, `max` or `min` (`_reduce_metric`, 81-106):
# - `reward`, `reward_std`, `rewards/<f>`: per trained sample, averaged over the step's samples. `reward_std` is the
#   population std of the sample's own group (np.std), so the log's value is the mean of the groups' spreads: 0 when
#   every group trained in the window tied. No `frac_reward_zero_std`. `rewards/<f>` is a function's mean (read as
#   `rewards/<f>/mean`, as trl <= 0.16 named it).
# - `completions/mean_length`, `completions/clipped_ratio` (a completion not ending on eos or pad, GRPOTrainer's
#   definition), `completions/max_length`, `/min_length`: the rollout worker's, over the rollouts it finished since
#   the previous log (sent through its metrics queue), not the batch trained; a log without a finished rollout lacks
#   them. A rollout_worker= of the script's own may send none.
# - `entropy`: the trained tokens' mean entropy at the sampling temperature (the fused LM head's), as GRPOTrainer's.
# - `clip_ratio/low_mean|high_mean|region_mean` (token shares), `/low_min`, `/high_max`: GRPOTrainer's definitions.
# - `ratio`, `kl`: the mean of pi/pi_old over the trained tokens and the k3 estimate of KL(pi_old || pi), pi_old the
#   sampler's log-probabilities (vLLM's). There is no reference model and no beta: this `kl` measures how far the
#   trained policy is from the one that generated (staleness, sampler/trainer mismatch), not drift from a reference,
#   and no KL term is in the loss: with every advantage 0 the loss and the gradient are exactly 0 (bar a MoE's
#   aux_loss).
# - `loss`, `grad_norm`, `learning_rate`: transformers' Trainer's.
# - `sample/*`, `batch/*`, `perf/*`, `rollout/*`, `tools/*`: queueing, packing and timing; no rule reads them.
ASYNC_GRPO_MARKS = ("sample/staleness_mean", "sample/staleness_max", "batch/samples_per_step",
                    "batch/groups_per_step", "perf/fwd_bwd_s")  # names no other TRL trainer logs

# why a watch rule written for GRPOTrainer's metrics does not judge AsyncGRPO's (the rule says `skip` with it)
ASYNC_GRPO_NOT_JUDGED = {
    "kl-blowup": "it has no reference model and no beta: its `kl` is the k3 estimate of KL(sampler || "
                 "trained policy) over the trained tokens (async_grpo_trainer.py compute_loss), how stale or "
                 "mismatched the rollouts are, not the policy's drift from a reference this rule's thresholds and "
                 "advice are for",
}


def is_async_grpo(ctx) -> bool:
    """Whether the watched job is TRL's AsyncGRPOTrainer (the callback's trainer, or its names in the log)."""
    from trl_doctor.vocabulary import ASYNC_GRPO

    return getattr(ctx, "trainer", None) == ASYNC_GRPO


def judged(ctx, slug: str) -> None:
    """Unavailable (the rule says `skip`) with why, where watch rule `slug` does not judge this trainer's logs."""
    if is_async_grpo(ctx) and slug in ASYNC_GRPO_NOT_JUDGED:
        raise Unavailable(f"not judged for AsyncGRPOTrainer: {ASYNC_GRPO_NOT_JUDGED[slug]}")


def kl_term(ctx) -> bool:
    """Whether the logged `kl` is the policy's KL to a reference, the loss's KL term (GRPO, RLOO, PPO), not
    AsyncGRPO's sampler/trainer mismatch."""
    return not is_async_grpo(ctx)


def reward_std_meaning(ctx) -> str:
    """What a logged `reward_std` is, where no `frac_reward_zero_std` is logged beside it."""
    if is_async_grpo(ctx):
        return "AsyncGRPO logs the mean of its trained samples' group spreads"
    return "trl <= 0.17 logs the mean of the groups' spreads"


def no_spread(ctx, numbers: Iterable[int] | None = None) -> set[int]:
    """The logs where no group's rewards had any spread: `frac_reward_zero_std` >= 0.99 where logged, else a
    `reward_std` of 0 (the mean of the groups' spreads: trl <= 0.17, AsyncGRPO). With `numbers`, each of those logs
    reads the newest value at or before it (`carried`: a step training on an earlier generation's batch)."""
    name, points = optional(ctx, "frac_reward_zero_std")
    holds = lambda v: v >= 0.99
    if name is None:
        name, points = optional(ctx, "reward_std")
        holds = lambda v: abs(v) <= 1e-8
    values = carried(points, numbers) if numbers is not None else by_number(points)
    return {n for n, v in values.items() if holds(v)}


# -- whether the reward rose (learning goes on) ---------------------------------------------------------------------
RISING_Z = 3.0  # Mann-Kendall's z a steady rise must reach (one-sided p ~ 0.001): a noisy or flat reward does not
RISING_LOGS = 10  # the fewest logs a trend is read from


def mann_kendall_z(values: list[float]) -> float:
    """Mann-Kendall's trend statistic as a z score: the pairs (earlier, later) that rose less those that fell, over
    the spread a random order gives, with continuity correction. Rank-based: a spike weighs as one pair's order,
    so a noisy log's outliers cannot make a trend."""
    n = len(values)
    if n < 3:
        return 0.0
    s = sum((later > earlier) - (later < earlier) for i, earlier in enumerate(values) for later in values[i + 1:])
    spread = math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    return (s - (s > 0) + (s < 0)) / spread


def reward_rising(ctx, run: list[Point]) -> str | None:
    """Where the mean reward rose steadily over `run`'s logs (at least RISING_LOGS of them, Mann-Kendall z at least
    RISING_Z, the last quarter's median above the first's), in words: the job learns through what the run shows;
    None where it did not, or the log cannot tell."""
    from statistics import median

    name, rewards = optional(ctx, "reward", "objective/rlhf_reward", "objective/scores")
    if name is None or not run:
        return None
    first, last = run[0].number, run[-1].number
    values = [p.value for p in rewards if first <= p.number <= last and math.isfinite(p.value)]
    if len(values) < RISING_LOGS:
        return None
    z = mann_kendall_z(values)
    quarter = max(1, len(values) // 4)
    start, end = median(values[:quarter]), median(values[-quarter:])
    if z < RISING_Z or end <= start:
        return None
    return f"{name} rose from {fmt(start)} to {fmt(end)} over those {len(values)} logs (a steady rise: trend z {z:.1f})"


# -- where the run's reward sits (saturation or failure) ------------------------------------------------------------
def reward_level(ctx, run: list[Point]) -> str | None:
    """Where the mean reward over `run`'s logs sits in the whole log's range: "top" (the run's best, reached by
    learning: the log's first quarter sat in the lower half of the range; every completion now earns what the rewards
    pay most, the task is too easy), "bottom" (its worst: nothing is rewarded), or None where the log cannot tell (no
    `reward` logged; between; a best the run sat at from its start, which may be no more than a format reward every
    completion earns). A reward flat over the whole log is "bottom" at 0 or below (no completion ever rewarded)."""
    from statistics import median

    values, inside = _rewards_at(ctx, run)
    if not values or not inside:
        return None
    level, lo, hi = sum(inside) / len(inside), min(values), max(values)
    if hi - lo <= 1e-6 * max(1.0, abs(hi)):
        return "bottom" if hi <= 0 else None
    where = (level - lo) / (hi - lo)
    if where <= 0.2:
        return "bottom"
    early = (median(values[:max(1, len(values) // 4)]) - lo) / (hi - lo)
    return "top" if where >= 0.8 and early <= 0.5 else None


def _rewards_at(ctx, run: list[Point]) -> tuple[list[float], list[float]]:
    """(the log's finite rewards, those at `run`'s logs, carried to the logs that have none), or two empty lists."""
    name, rewards = optional(ctx, "reward", "objective/rlhf_reward")
    if name is None:
        return [], []
    values = [p.value for p in rewards if math.isfinite(p.value)]
    inside = [v for v in carried(rewards, [p.number for p in run]).values() if math.isfinite(v)]
    return values, inside


def reward_fell(ctx, run: list[Point]) -> bool:
    """Whether the mean reward over `run`'s logs sits at the log's bottom ("bottom", see reward_level) under half the
    level the run started at, that start above 0 and in the upper half of the log's range: the run was rewarded and
    lost it. Ties there are the collapse itself, however common ties had grown on the way down."""
    from statistics import median

    if reward_level(ctx, run) != "bottom":
        return False
    values, inside = _rewards_at(ctx, run)
    start, lo, hi = median(values[:max(1, len(values) // 4)]), min(values), max(values)
    return start > 0 and (start - lo) >= 0.5 * (hi - lo) and sum(inside) / len(inside) < 0.5 * start


def near_best(ctx, run: list[Point], fraction: float = 0.8) -> bool:
    """Whether the mean reward over `run`'s logs is at least `fraction` of the best the whole log reached (that best
    above 0, the reward not flat): most completions earn about what the rewards pay most, so most groups tie because
    their completions are right. A saturation whether or not the run learned its way there (a model that starts good
    at its task); `reward_level`'s "top" asks for the learning too, for a tie that lasts."""
    values, inside = _rewards_at(ctx, run)
    if not values or not inside:
        return False
    hi, lo = max(values), min(values)
    return hi > 0 and hi - lo > 1e-6 * hi and sum(inside) / len(inside) >= fraction * hi


def window_logs(ctx, steps: float, points: list[Point], needed: int) -> int:
    """The logs a windowed share is averaged over: those that cover `steps` optimizer steps, or, in a log shorter than
    four such windows, a quarter of its logs (at least `needed`): a 40-log run is judged on its last 10, not never."""
    logs = logs_for(ctx, steps)
    return max(1, min(logs, max(needed, len(points) // 4)))


def start_level(points: list[Point], first: int = 3) -> float:
    """A metric's level at the run's start, that a collapse falls from: its first finite log, or the median of its
    first `first` where that is higher (a low first log, a warm-up step's, does not set it; a fall within the first
    logs still counts from the first)."""
    from statistics import median

    values = [p.value for p in points[:first * 2] if math.isfinite(p.value)][:first]
    return max(values[0], median(values)) if values else math.nan


def collapsed_entropy(ctx, run: list[Point], fraction: float = 0.1) -> bool:
    """Whether the policy's entropy over `run`'s logs is below `fraction` of its start: identical completions tie
    every group whatever the reward (a collapse, not a saturation)."""
    name, entropy = optional(ctx, "entropy", "policy/entropy_avg")
    if name is None:
        return False
    start = start_level(entropy)
    at = [v for v in carried(entropy, [p.number for p in run]).values() if math.isfinite(v)]
    return bool(at) and math.isfinite(start) and start > 0 and sum(at) / len(at) < fraction * start


def onset(points: list[Point], run: list[Point], began: Callable[[Point], bool]) -> Point:
    """Where a condition that `run` shows began: the earliest log of the unbroken stretch before the run whose logs
    hold `began` (a milder form of the condition: an entropy below half its start, before it fell below a tenth),
    bridging one log's dip as `streaks` does; the run's first log when the stretch is empty."""
    at = next(i for i, p in enumerate(points) if p.number == run[0].number)
    first, dips = at, 0
    for i in range(at - 1, -1, -1):
        if began(points[i]):
            first, dips = i, 0
        else:
            dips += 1
            if dips > 1:
                break
    return points[first]


CHANCE = 0.05  # a streak expected this often or more from the run's own rate is chance, not a failure


def by_chance(points: list[Point], run: list[Point], holds: Callable[[Point], bool]) -> float | None:
    """How many streaks as long as `run` the log's length would hold by chance, at the rate the condition held in
    the logs before the run (where each log is one small draw, as a step of one prompt group is: a tie of 8 binary
    rewards is common); None where fewer than 10 logs come before it (no rate to judge from). A condition that held
    in 31% of logs gives a 5-log streak in 250 about once by chance; 10 logs, once in 30,000 runs."""
    before = [p for p in points if p.number < run[0].number]
    if len(before) < 10:
        return None
    rate = sum(1 for p in before if holds(p)) / len(before)
    return len(points) * rate ** len(run) * (1 - rate)
