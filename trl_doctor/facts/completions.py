"""Facts about a job's completions, the text itself (issue 61), for the watch's completion rules: what metrics cannot
show. The completions are the watch's (trl_doctor.watch.completions: the live trainer's newest batch, TRL's
log_completions files, the trackers' tables); the run's first batches are the reference a drift is measured from.

Each reading is plain text analysis, no tokenizer: a repetition loop is a chunk of text repeated to the completion's
end; a group is the completions of one prompt at one step; a script is the Unicode script most of a text's letters
are written in; a format is a tag (`<think>`, `</answer>`), `\\boxed{` or `####` most of the first completions carry.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from typing import Iterable, NamedTuple

from trl_doctor.errors import Unavailable

LOOP_MIN_REPEATS = 4  # a chunk repeated this many times at the end, over half the text, is a loop
LOOP_MAX_PERIOD = 200  # characters of the longest chunk looked for
LOOP_TAIL = 4000
_TAG = re.compile(r"</?[A-Za-z_][\w-]{0,30}>")


def completions(ctx) -> list:
    """The job's completions at hand (trl_doctor.watch.completions.Completion), oldest first; Unavailable saying
    how to have them where there are none."""
    history = getattr(ctx, "history", None)
    if history is None:
        raise Unavailable("judged on a job's completions: `trl-doctor watch PATH` or DoctorCallback(watch=True)")
    found = list(getattr(history, "completions", None) or ())
    if not found:
        raise Unavailable("no completions at hand: inside the job DoctorCallback(watch=True) reads the trainer's "
                          "newest batch; from the outside TRL's log_completions=True writes them (output_dir/"
                          "completions/*.parquet, the trackio and wandb tables)")
    return found


class Batch(NamedTuple):
    step: int | None
    items: list


def batches(found: list) -> list[Batch]:
    """The completions by step, oldest first (a batch without a step is its own, last)."""
    by_step: dict = defaultdict(list)
    for c in found:
        by_step[c.step].append(c)
    steps = sorted((s for s in by_step if s is not None))
    out = [Batch(s, by_step[s]) for s in steps]
    if None in by_step:
        out.append(Batch(None, by_step[None]))
    return out


def loop(text: str) -> tuple[str, int] | None:
    """(the repeated chunk, how many times) where the text ends in one chunk repeated LOOP_MIN_REPEATS times or more
    and the repetition covers half the text or more; None otherwise. Whitespace at the end is not part of it."""
    tail = text[-LOOP_TAIL:].rstrip()
    if len(tail) < 16:
        return None
    for period in range(1, min(LOOP_MAX_PERIOD, len(tail) // LOOP_MIN_REPEATS) + 1):
        chunk = tail[-period:]
        if not tail.endswith(chunk * LOOP_MIN_REPEATS):
            continue
        if period > 1 and chunk == chunk[0] * period:
            continue  # one character repeated: the period-1 loop found it already
        repeats, end = LOOP_MIN_REPEATS, len(tail) - period * LOOP_MIN_REPEATS
        while end >= period and tail[end - period:end] == chunk:
            repeats, end = repeats + 1, end - period
        if repeats * period * 2 >= len(tail) and repeats * period >= 12:
            return chunk, repeats
    return None


def identical_groups(batch: Batch) -> tuple[int, int]:
    """(groups whose completions are all the same text, groups of two completions or more) at one step."""
    groups: dict = defaultdict(list)
    for c in batch.items:
        groups[c.prompt].append(c.text.strip())
    sized = [g for g in groups.values() if len(g) >= 2]
    return sum(1 for g in sized if len(set(g)) == 1), len(sized)


def script(text: str) -> str | None:
    """The Unicode script most of the text's letters are in (LATIN, CJK, CYRILLIC, ARABIC, HANGUL, ...), or None
    for a text with fewer than 8 letters. Format tags (`<think>`) are not the text's language."""
    counts: Counter = Counter()
    for ch in _TAG.sub(" ", text[:2000]):
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            first = name.split(" ", 1)[0]
            counts["CJK" if first in ("CJK", "HIRAGANA", "KATAKANA") else first] += 1
    if sum(counts.values()) < 8:
        return None
    return counts.most_common(1)[0][0]


def markers(text: str) -> set[str]:
    """The format markers a completion carries: tags (`<think>`, `</answer>`), `\\boxed{`, `####`."""
    found = set(_TAG.findall(text))
    if "\\boxed{" in text:
        found.add("\\boxed{")
    if "####" in text:
        found.add("####")
    return found


def words(text: str) -> int:
    """A completion's length in words (a CJK character counts as one)."""
    return len(text.split()) + sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")


def share(items: Iterable, holds) -> tuple[int, int]:
    items = list(items)
    return sum(1 for x in items if holds(x)), len(items)
