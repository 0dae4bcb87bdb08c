"""TW013 degenerate-completions: the completions themselves went wrong: loops, copies, no format

What it does
  Reads the completions where they are at hand (inside the job the trainer's newest batch; TRL's
  log_completions files and the trackio and wandb tables) and compares the newest two steps with
  the run's first: most completions ending in a repeated chunk (`loop_share`, 0.5) or every group's
  completions identical (`identical_share`, 0.9) fail over `patience` (5) steps, two logs at least
  (fewer: a warn); a switch
  to another script (`switch_share`, 0.5, where the first steps were in the prompts' script), a
  format marker the first steps carried (a tag, \\boxed{, ####) dropped, and a collapse to 3 words
  or fewer are warns.
Why is this bad?
  No metric shows the text: a loop to the length limit, a group of copies (no spread: nothing
  learned), a policy that drifted into another language or stopped writing the format its rewards
  parse, an answer shrunk to a word. Each costs every step after it; trainsafe-style probes of the
  text catch them, the metrics only late or never.
Example
  'the answer is 4. the answer is 4. the answer is 4. ...' in 14 of 16 completions at steps 40, 50.
Fix safety
  Nothing to rewrite: lower the learning rate, raise the KL coefficient (beta) or the temperature;
  set repetition_penalty; check the reward functions against the completions shown.
  Thresholds: [tool.trl-doctor.watch.degenerate-completions] loop_share, identical_share,
  switch_share, patience.
"""

from __future__ import annotations

from statistics import median

from trl_doctor import ALL_TRAINERS, fail, passed, rule, warn
from trl_doctor.facts.completions import (batches, completions, identical_groups, loop, markers, script, share,
                                          words)
from trl_doctor.facts.metrics import fmt, limit

SLUG = "degenerate-completions"


@rule(id="TW013", slug=SLUG, title="Degenerate completions: loops, copies, another language, no format",
      trainers=ALL_TRAINERS, contexts=("watch",))
def judge(ctx):
    steps = batches(completions(ctx))
    needed = limit(ctx, SLUG, "patience", 5)
    run = _severe_run(ctx, steps)  # the newest steps whose completions loop or copy, oldest first
    recent = run or steps[-2:]
    first = [b for b in steps[:2] if b not in recent]
    severe = _loops(ctx, recent) + _copies(ctx, recent) if run else []
    mild = _switch(ctx, first, recent) + _format(first, recent) + _shrunk(first, recent) if first else []
    if severe and _covers(run, needed):
        yield fail(f"{'; '.join(severe + mild)}: lower the learning rate, or raise beta or the temperature",
                   since_step=recent[0].step, metric="completions")
    elif severe or mild:
        so_far = f"; {_span_steps(run)} of the {needed:g} steps a fail needs so far" if severe else ""
        yield warn(f"{'; '.join(severe + mild)} ({_steps(recent)}){so_far}", since_step=recent[0].step,
                   metric="completions")
    else:
        total = sum(len(b.items) for b in steps)
        yield passed(f"{total} completions over {len(steps)} steps read: no loops, no groups of copies, the first "
                     "steps' script and format kept")


def _severe_run(ctx, steps) -> list:
    """The newest steps, back from the last one, whose completions mostly loop or whose groups are all copies."""
    run: list = []
    for batch in reversed(steps):
        if not (_loops(ctx, [batch]) or _copies(ctx, [batch])):
            break
        run.insert(0, batch)
    return run


def _covers(run, needed: float) -> bool:
    """Whether the steps of `run` cover `needed` optimizer steps (`patience`, 5, as the metric rules count it: a
    batch is a log's, so at logging_steps 10 two batches are 20 steps), and are two batches at least."""
    return len(run) >= 2 and _span_steps(run) >= needed


def _span_steps(run) -> int:
    """The optimizer steps a run of batches covers: their count times the steps between two of them."""
    known = [b.step for b in run if b.step is not None]
    spacing = min((b - a for a, b in zip(known, known[1:]) if b > a), default=1)
    return len(run) * spacing


def _steps(recent) -> str:
    named = [f"step {b.step}" if b.step is not None else "the newest batch" for b in recent]
    return " and ".join(named)


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _loops(ctx, recent) -> list[str]:
    needed = limit(ctx, SLUG, "loop_share", 0.5)
    found = [[(c, loop(c.text)) for c in b.items] for b in recent]
    shares = [share(pairs, lambda p: p[1] is not None) for pairs in found]
    if not all(n and k / n >= needed for k, n in shares):
        return []
    chunk, repeats = next(p[1] for p in found[-1] if p[1] is not None)
    counts = ", ".join(f"{k} of {n}" + (f" at step {b.step}" if b.step is not None else "")
                       for (k, n), b in zip(shares, recent))
    return [f"repetition loops: most completions end in a chunk repeated to their end ({counts}; e.g. "
            f"{_quote(chunk)} x{repeats})"]


def _copies(ctx, recent) -> list[str]:
    needed = limit(ctx, SLUG, "identical_share", 0.9)
    counts = [identical_groups(b) for b in recent]
    if not all(n and k / n >= needed for k, n in counts):
        return []
    sample = recent[-1].items[0].text
    where = ", ".join(f"{k} of {n} groups" + (f" at step {b.step}" if b.step is not None else "")
                      for (k, n), b in zip(counts, recent))
    return [f"copies: every completion of a group is the same text ({where}; e.g. {_quote(sample)}), so their "
            "rewards tie and teach nothing"]


def _switch(ctx, first, recent) -> list[str]:
    texts = [c.text for b in first for c in b.items] + [c.prompt for b in first for c in b.items]
    reference = _most(script(t) for t in texts)
    if reference is None:
        return []
    needed = limit(ctx, SLUG, "switch_share", 0.5)
    early = share((c for b in first for c in b.items), lambda c: script(c.text) not in (None, reference))
    late = share((c for b in recent for c in b.items), lambda c: script(c.text) not in (None, reference))
    if not late[1] or late[0] / late[1] < needed or early[1] and early[0] / early[1] > 0.2:
        return []
    other = _most([script(c.text) for b in recent for c in b.items if script(c.text) not in (None, reference)])
    return [f"another language: {late[0]} of {late[1]} completions are in {other} script, where the first steps' "
            f"were in {reference}"]


def _most(values) -> str | None:
    from collections import Counter

    counted = Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else None


def _format(first, recent) -> list[str]:
    early = [markers(c.text) for b in first for c in b.items]
    late = [markers(c.text) for b in recent for c in b.items]
    if not early or not late:
        return []
    kept = [m for m in set().union(*early) if sum(m in e for e in early) >= 0.8 * len(early)]
    dropped = [m for m in sorted(kept) if sum(m in x for x in late) <= 0.2 * len(late)]
    if not dropped:
        return []
    return [f"the format dropped: {', '.join(dropped[:3])} in {fmt(100 * sum(dropped[0] in e for e in early) / len(early))}% "
            f"of the first steps' completions, {fmt(100 * sum(dropped[0] in x for x in late) / len(late))}% now (a "
            "reward that parses it pays nothing)"]


def _shrunk(first, recent) -> list[str]:
    early = median(words(c.text) for b in first for c in b.items)
    late = median(words(c.text) for b in recent for c in b.items)
    if late > 3 or early < 8 or early < 4 * max(late, 1):
        return []
    return [f"collapsed to a few words: a median of {fmt(late)} words, from {fmt(early)} at the first steps"]
