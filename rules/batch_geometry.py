"""TD010 batch-geometry: batch sizes divide as the installed TRL needs at the launch's process count.

What it does
    Evaluates the installed TRL's geometry checks (read with `ast` from its config's `__post_init__`
    and trainer's `__init__`) at the launch's process count, with TRL's message and line; builds the
    config class at that `world_size` to cross-check; names the cheapest one-key change; counts the
    train rows and, for PPO's sample generations, the eval rows.

Why is this bad?
    GRPO and RLOO need whole `num_generations` groups per generated batch; PPO (and RLOO < 0.22)
    splits rollouts into `num_mini_batches` (and `rloo_k` groups). Sizes multiply across processes:
    fine on one GPU, a config stops on eight inside the job (from 0.18 in `__post_init__`, before
    after the model loaded): "generation_batch_size (12) must be divisible by num_generations (8)."
    (>= 0.21; other words in 0.15-0.20; 0.14 per device), "GRPO requires at least 2 generations per
    prompt", the eval batch (`num_generations_eval`, 1.0), PPO's "`local_batch_size` must be a
    multiple of `num_mini_batches`", "insufficient for whitening". `auto_find_batch_size` halves the
    batch after an OOM; the retry dies with "shape '[-1, 4]' is invalid for input of size 2"
    (trl#3842; refused from PR#6411). 0.17 multiplied in gradient_accumulation_steps, 0.18 added
    `generation_batch_size`; PPO <= 0.16 multiplied num_mini_batches in; no PPO from 1.13. Rows
    short of one batch: GRPO trains 0 steps (or stops), PPO hangs; of one eval batch: PPO's samples
    get None from accelerate < 1.9 after the first update, and it stops.

Example
    num_generations: 8                  # per_device_train_batch_size 2, launched on one process
    -> fail: generation_batch_size (2) must be divisible by num_generations (8).
       [trl/trainer/grpo_config.py:1132]: set gradient_accumulation_steps: 4 (or num_generations: 2)

Fix safety
    Safe: writes those changes (`gradient_accumulation_steps: 2`, or drops `steps_per_generation`)
    for the report's process count once the installed config class accepts them; else nothing.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from trl_doctor import DELETE, Edit, Fix, InputError, Unavailable, fail, passed, rule, skip, warn
from trl_doctor.facts.launch.launcher import is_geometry_error, launch, process_count
from trl_doctor.facts.launch.settings import config_fields, config_value
from trl_doctor.facts.trl.behaviour import built_config_class, trl_words
from trl_doctor.facts.trl.installed import field_default, ppo_style
from trl_doctor.facts.trl.geometry import (AUTO_FIND_BATCH_SIZE, Evaluator, Problem, config_base, geometry_reading,
                                           plain, probe_class)
from trl_doctor.facts.trl.trainer_config import trainer_config_info

# The knobs a fix may change: (key, tier, direction). Lower tiers change less of what the job does: gradient
# accumulation keeps the per-device memory and the group size; per_device_train_batch_size changes memory.
KNOBS = (
    ("gradient_accumulation_steps", 0, "up"),
    ("steps_per_generation", 0, "up"),
    ("generation_batch_size", 0, "both"),
    ("per_device_eval_batch_size", 0, "both"),
    ("num_generations_eval", 1, "both"),
    ("num_mini_batches", 1, "both"),
    ("local_rollout_forward_batch_size", 1, "both"),
    ("num_generations", 2, "both"),
    ("rloo_k", 2, "both"),
    ("per_device_train_batch_size", 3, "both"),
)
UNSET_COST = 1.0  # removing a key the user set (its default is None: TRL derives it)
MAX_TRIALS = 600  # evaluations of the reading per check, for the fix search


def field_names(cls) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


# -- the words both judgments say ---------------------------------------------------------------------------

def _no_config_class(trl: str, trainer: str) -> str:
    return (f"trl {trl} has no {trainer.upper()}Config, so there is no batch geometry to check (see value-model / "
            "smoke-step for the trainer itself)")


def _refused_numbers(keys: list[str]) -> str:
    return (f"{', '.join(keys)} has a value TRL's parser refuses (see trainer-config): no batch arithmetic to judge "
            "until it is a number")


def _geometry_healthy(procs: int, where: str, summary: str) -> str:
    return f"at {process_count(procs)} ({where}): {summary}"


def _violations(lines: list[str], procs: int, where: str, trl: str) -> str:
    """The failure: each numbered violation line, at the launch's process count (`where`: where it comes from)."""
    count = len(lines)
    return (f"{count} batch-geometry violation{'s' if count != 1 else ''} at {process_count(procs)} ({where}), where trl "
            f"{trl} stops: " + "; ".join(lines))


def _read_from(units) -> list[str] | str:
    """The details' list of the TRL code the geometry was read from (facts.trl.geometry's units)."""
    return [f"{u.where} ({u.kind})" for u in units] or "no geometry code found"


@rule(
    id="TD010",
    slug="batch-geometry",
    title="Batch sizes, generations and mini-batches divide as the installed TRL requires at the launch's process count",
    fixable="sometimes",
    contexts=("full", "static"),
)
def check(ctx):
    name, fields = config_fields(ctx)
    trl_version = trl_words(ctx)
    if name is None:
        yield skip(_no_config_class(trl_version, ctx.trainer))
        return
    refused = sorted(k for k in set(trainer_config_info(ctx).type_errors) & fields
                     if any(w in k for w in ("batch", "generation", "steps", "accumulation", "rloo_k", "epochs")))
    if refused:
        yield skip(_refused_numbers(refused))
        return
    the_launch = launch(ctx)
    procs, where = the_launch.processes, the_launch.processes_from
    reading = geometry_reading(ctx)
    base = config_base(ctx)
    state = Evaluator(reading, procs)
    problems, resolved = state.run(base)
    details: dict[str, Any] = {"trl": trl_version, "processes": f"{procs} ({where})"}
    if the_launch.processes_note:
        details["process count note"] = the_launch.processes_note
    details["geometry"] = _geometry(resolved, procs)
    details["read from"] = _read_from(reading.units)

    try:
        cls = built_config_class(ctx)
    except Unavailable as why:  # TRL's class is not built here (--static): the arithmetic read from its code alone
        cls, extra = None, []
        details["not done here"] = f"the cross-check that builds TRL's config class, and the --fix plan ({why})"
    else:
        problems, extra, verdict = _cross_check(ctx, cls, ctx.config.raw, procs, problems)
        if verdict:
            details["cross-check"] = verdict
    own = _auto_find_batch_size(ctx, extra)
    short, rows_details = _rows_for_one_batch(ctx, resolved, procs)
    own += short
    details.update(rows_details)
    stops, empty, eval_details = _eval_rows_for_samples(ctx, resolved, procs)
    own += stops
    details.update(eval_details)

    if not problems and not extra and not own:
        if empty:
            yield warn(empty, **details)
            return
        yield passed(_geometry_healthy(procs, where, _summary(resolved, procs)), **details)
        return

    plan = _plan_fixes(state, base, problems, cls, set(ctx.config.raw)) if cls is not None else _Plan({}, {})
    lines = []
    for i, p in enumerate(problems, 1):
        hint = plan.hints.get(p.site)
        advice = "" if cls is None else f": {hint}" if hint else ": no change of one key fixes it"
        lines.append(f"({i}) {p.message} [{p.site}]{advice}")
    for msg in extra:
        lines.append(f"({len(lines) + 1}) TRL's {cls.__name__} at {procs} processes: {msg}")
    lines += [f"({len(lines) + i}) {msg}" for i, msg in enumerate(own, 1)]
    details["violations"] = lines
    fix = None
    if plan.changes and not extra and not own:
        ok, why = _accepted(ctx, cls, ctx.config.raw, plan.changes, procs)
        if ok:
            sets = ", ".join(f"{k}: {v}" for k, v in plan.changes.items() if v is not DELETE)
            drops = ", ".join(k for k, v in plan.changes.items() if v is DELETE)
            changes = "; ".join(w for w in (f"set {sets}" if sets else "", f"remove {drops}" if drops else "") if w)
            fix = Fix(f"{changes} in {ctx.config.path.name} (for {process_count(procs)})",
                      (Edit(str(ctx.config.path), set=tuple(plan.changes.items())),))
            details["changes"] = changes
        else:
            details["fix not offered"] = f"TRL's {cls.__name__} rejects the changed config: {why}"
    yield fail(_violations(lines, procs, where, trl_version), fix=fix, **details)


# -- the smallest change ----------------------------------------------------------------------------------

@dataclass
class _Plan:
    changes: dict  # key -> new value (or DELETE), for the Fix
    hints: dict  # problem site -> "set gradient_accumulation_steps: 2 (or num_generations: 6)"


def _candidates(cls, values: dict, user_keys: set) -> list[tuple[float, str, Any]]:
    """(cost, key, new value or DELETE) for one-key changes, cheapest first."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(cls)}
    out = []
    for order, (key, tier, direction) in enumerate(KNOBS):
        current = values.get(key)
        if key not in fields or current is None or isinstance(current, bool) or not isinstance(current, int):
            continue
        tie = order * 1e-3  # equal costs: the order of KNOBS decides
        if key in user_keys and field_default(cls, key) is None:
            out.append((tier + UNSET_COST + tie, key, DELETE))  # let TRL derive it again
        if current < 1:
            out.append((tier + 1 + tie, key, 1))
            continue
        for v in _values_near(current):
            if v != current and not (direction == "up" and v < current):
                out.append((tier + abs(math.log2(v / current)) + tie, key, v))
    out.sort(key=lambda c: c[0])
    return out


def _values_near(current: int) -> list[int]:
    """Values to try for a knob now at `current`: every one up to 4x (or +16) for real sizes; for a huge value
    (a typo's 10**9) a sparse set, so planning never walks a billion candidates."""
    top = max(4 * current, current + 16)
    if top <= 4096:
        return list(range(1, top + 1))
    near = {current + d for d in range(-16, 17)} | {current * k for k in (2, 3, 4)} | {current // k for k in range(2, 65)}
    return sorted(v for v in near | set(range(1, 257)) | {2**i for i in range(top.bit_length())} if 1 <= v <= top)


ALT_TRIALS = 80  # evaluations spent looking for an alternative once the best change is known


def _plan_fixes(state: Evaluator, base: dict, problems: list[Problem], cls, user_keys: set) -> _Plan:
    """One change per violation, cheapest first, each removing its violation without adding another."""
    values = dict(base)
    keys = set(user_keys)
    changes: dict[str, Any] = {}
    hints: dict[str, str] = {}
    current = [p for p in problems]
    unfixable: set[str] = set()
    for _ in range(len(problems) + 3):
        todo = [p for p in current if p.site not in unfixable]
        if not todo:
            break
        target = todo[0]
        before = {p.site for p in current}
        best, alt, spent = None, None, 0
        for _cost, key, value in _candidates(cls, values, keys):
            if state.trials >= MAX_TRIALS or (best is not None and spent >= ALT_TRIALS):
                break
            if best is not None:
                if key == best[0]:
                    continue
                spent += 1
            trial = dict(values)
            trial[key] = field_default(cls, key) if value is DELETE else value
            after, _ = state.run(trial)
            sites = {p.site for p in after}
            if target.site in sites or not sites <= before:
                continue
            if best is None:
                best = (key, value, trial, after)
            else:
                alt = (key, value)
                break
        if best is None:
            unfixable.add(target.site)
            continue
        key, value, values, after = best
        gone = [p for p in current if p.site != target.site and p.site not in {a.site for a in after}]
        current = after
        changes[key] = value
        if value is DELETE:
            keys.discard(key)
        else:
            keys.add(key)
        hint = f"remove {key} (TRL then derives it)" if value is DELETE else f"set {key}: {value}"
        if alt is not None:
            hint += f" (or remove {alt[0]})" if alt[1] is DELETE else f" (or {alt[0]}: {alt[1]})"
        hints[target.site] = hint
        for p in gone:  # removed by the same change
            main = f"removing {key}" if value is DELETE else f"{key}: {value}"
            hints.setdefault(p.site, f"fixed by the same change ({main})")
    return _Plan({k: v for k, v in changes.items() if v is DELETE or v != base.get(k)}, hints)


# -- the installed config class as a cross-check ----------------------------------------------------------




def _build(ctx, cls, raw: dict, changes: dict, procs: int) -> str | None:
    """None when the installed config class accepts the config at `procs` processes, else its error."""
    import dataclasses
    import warnings

    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {k: v for k, v in raw.items() if k in fields}
    for k, v in changes.items():
        if v is DELETE:
            kwargs.pop(k, None)
        else:
            kwargs[k] = v
    kwargs.setdefault("output_dir", str(ctx.workdir / "output"))
    try:
        kwargs.update(trainer_config_info(ctx).injected)  # use_cpu on a machine without a GPU, as TD009 builds it
    except Exception:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe_class(cls, procs)(**kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def _cross_check(ctx, cls, raw: dict, procs: int, problems: list[Problem]) -> tuple[list[Problem], list[str], str | None]:
    """(problems kept, TRL errors the reading missed, words) from building the installed config class."""
    error = _build(ctx, cls, raw, {}, procs)
    config_sites = [p for p in problems if p.kind == "config"]
    if error is None:
        if config_sites:  # TRL accepts what the reading rejects: trust TRL, say so
            kept = [p for p in problems if p not in config_sites]
            return kept, [], (f"{cls.__name__} accepts the config at {procs} processes; not reported: "
                              + "; ".join(p.message for p in config_sites))
        return problems, [], f"{cls.__name__} built with world_size {procs}: accepted"
    if not is_geometry_error(error):
        return problems, [], f"{cls.__name__} stops first on another error (see trainer-config): {error}"
    message = error.split(": ", 1)[-1]
    if any(_same(message, p.message) for p in problems):
        return problems, [], f"{cls.__name__} built with world_size {procs}: {error}"
    return problems, [message], f"{cls.__name__} built with world_size {procs}: {error} (not found by the reading)"


def _auto_find_batch_size(ctx, already: list[str]) -> list[str]:
    """GRPO and RLOO need whole groups of num_generations in every generation batch; `auto_find_batch_size` halves
    the per-device batch after an out-of-memory error (transformers' find_executable_batch_size) and breaks them.
    TRL refuses it in the config from the release with PR#6411 (then the cross-check has it already); before, the
    job dies at its first out-of-memory retry."""
    if ctx.trainer not in ("grpo", "rloo") or config_value(ctx, "auto_find_batch_size", False) is not True:
        return []
    if any("auto_find_batch_size" in m for m in already):
        return []
    return [AUTO_FIND_BATCH_SIZE]


def _rows_for_one_batch(ctx, v: dict, procs: int) -> tuple[list[str], dict]:
    """The training set must fill one batch of the trainer's train dataloader, which yields whole batches only:
    GRPO/RLOO's RepeatSampler (trl >= 0.18) takes generation_batch_size / num_generations distinct prompts per
    generation batch across all processes, and drops a shorter remainder; PPO (and RLOO before 0.22) batch the rows
    with `drop_last=True`, local_dataloader_batch_size per process. Fewer rows and the dataloader is empty: GRPO's
    `trainer.train()` stops ("args.max_steps must be set to a positive value if dataloader does not have a length")
    or, with max_steps set, trains 0 steps and saves the model unchanged; PPO's `repeat_generator` waits forever."""
    if ppo_style(ctx.trainer):
        per_batch = v.get("local_dataloader_batch_size") or v.get("local_batch_size")
        needed = per_batch * procs if isinstance(per_batch, int) else None
        where = "on 1 process" if procs == 1 else f"on each of {procs} processes"
        takes = f"{per_batch} per batch {where}, a partial batch dropped"
        then = "its training loop (`repeat_generator`) waits forever for a first batch: the job hangs, no step is taken"
    else:
        gbs, g = v.get("generation_batch_size"), v.get("num_generations")
        needed = gbs // g if isinstance(gbs, int) and isinstance(g, int) and g > 0 else None
        takes = f"distinct prompts per generation batch: {gbs} completions / {g} generations"
        then = ("`trainer.train()` stops with \"args.max_steps must be set to a positive value if dataloader does not "
                "have a length\", or with max_steps set trains 0 steps and saves the model unchanged")
    if not needed:
        return [], {}
    try:
        rows = len(ctx.dataset)
    except (Unavailable, InputError, TypeError):  # no dataset here, or a stream (no len): dataset-schema's to say
        return [], {}
    details = {"training rows": rows, "rows one batch takes": f"{needed} ({takes})"}
    if rows >= needed:
        return [], details
    return [f"the training set has {_n(rows, 'row')}, fewer than the {needed} one batch takes ({takes}): the train "
            f"dataloader yields no batch, and {then}"], details


def _eval_rows_for_samples(ctx, v: dict, procs: int) -> tuple[list[str], str | None, dict]:
    """PPO-style trainers generate sample completions from the eval set after their first update when
    num_sample_generations > 0 (the default, 10): `for batch in self.eval_dataloader`, a `drop_last=True` dataloader
    of per_device_eval_batch_size rows on each process. An eval set that fills no batch leaves it empty; the
    installed accelerate decides what follows (empty_loader_yields_none, below): a `None` batch that stops the job
    after its first update, or a loop that runs zero times. Returns (the stop, as a violation; the empty loop, as a
    warning; details)."""
    if not ppo_style(ctx.trainer):
        return [], None, {}
    try:
        samples = config_value(ctx, "num_sample_generations", 0)
        eval_set = ctx.eval_dataset
        rows = len(eval_set) if not isinstance(eval_set, dict) else None
    except (Unavailable, InputError, TypeError):  # no eval set given, or a stream (no len)
        return [], None, {}
    per_batch = v.get("per_device_eval_batch_size")
    if rows is None or not isinstance(samples, int) or samples <= 0 or not isinstance(per_batch, int) or per_batch <= 0:
        # a dict of eval sets (the sample loop takes no dict), or no sample generation to judge
        return [], None, {}
    needed = per_batch * procs
    takes = f"per_device_eval_batch_size {per_batch}" + ("" if procs == 1 else f" on each of {procs} processes")
    details = {"eval rows": rows, "rows one eval batch takes": f"{needed} ({takes}, a partial batch dropped)"}
    if rows >= needed:
        return [], None, details
    short = (f"the eval set has {_n(rows, 'row')}, fewer than the {needed} one eval batch takes ({takes}): the eval "
             f"dataloader (`drop_last=True`) yields no batch, and the sample generation that follows the first update "
             f"(num_sample_generations {samples}) iterates it")
    hint = f"set per_device_eval_batch_size to at most {rows // procs} or num_sample_generations: 0" \
        if rows >= procs else "set num_sample_generations: 0"
    yields_none = empty_loader_yields_none()
    accelerate = ctx.version("accelerate") or "not installed"
    details["accelerate"] = accelerate
    if yields_none:
        return [f"{short}: accelerate {accelerate} yields None from an empty dataloader, so the job stops after its "
                f"first update with TypeError: 'NoneType' object is not subscriptable ({hint})"], None, details
    if yields_none is None:
        details["empty eval dataloader"] = f"not judged: accelerate {accelerate} could not be asked what it yields"
        return [], None, details
    return [], (f"{short}, which runs zero times on accelerate {accelerate}: the job trains, and its sample "
                f"generations show nothing ({hint})"), details


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).rstrip(".") == " ".join(b.split()).rstrip(".")


def _accepted(ctx, cls, raw: dict, changes: dict, procs: int) -> tuple[bool, str]:
    error = _build(ctx, cls, raw, changes, procs)
    if error is None or not is_geometry_error(error):
        return True, ""
    return False, error


# -- words ------------------------------------------------------------------------------------------------

def _geometry(v: dict, procs: int) -> dict:
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size",
            "num_generations", "num_generations_eval", "eval_strategy", "per_device_eval_batch_size", "num_mini_batches",
            "rloo_k", "local_batch_size", "batch_size", "mini_batch_size", "local_mini_batch_size",
            "local_rollout_forward_batch_size", "whiten_rewards", "total_episodes", "num_total_batches")
    out = {"processes": procs}
    for k in keys:
        if k in v and v[k] is not None:
            out[k] = plain(v[k])
    return out


def _summary(v: dict, procs: int) -> str:
    pd, ga = v.get("per_device_train_batch_size"), v.get("gradient_accumulation_steps")
    g = v.get("num_generations")
    parts = []
    if v.get("generation_batch_size") and g:
        gbs, spg = v["generation_batch_size"], v.get("steps_per_generation")
        parts.append(f"generation batch {gbs} ({pd} per device × {_n(procs, 'process', 'processes')} × "
                     f"{_n(spg, 'step')} per generation) = {_n(gbs // g, 'prompt')} × {g} generations")
    elif "num_mini_batches" in v or "rloo_k" in v:
        local = v.get("local_batch_size")
        if local:
            parts.append(f"rollout batch {local} per process ({v.get('batch_size')} in all), "
                         f"{v.get('num_mini_batches')} mini-batch{'es' if v.get('num_mini_batches') != 1 else ''} "
                         f"of {v.get('local_mini_batch_size')} per process")
        else:
            parts.append(f"{pd} per device × {ga} accumulation steps, {v.get('num_mini_batches')} mini-batches")
        if v.get("rloo_k"):
            parts.append(f"rloo_k {v['rloo_k']}")
    elif g:
        total = pd * procs
        parts.append(f"{pd} per device × {procs} = {total} completions per step, num_generations {g}")
    if str(plain(v.get("eval_strategy", "no"))) != "no" and g:
        ge = v.get("num_generations_eval") or g
        parts.append(f"eval batch {v.get('per_device_eval_batch_size')} × {procs} divides into groups of {ge}")
    return "; ".join(parts) + "; nothing the installed TRL checks fails" if parts else "nothing the installed TRL checks fails"


def _n(count: Any, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


# -- what the installed accelerate does with a dataloader that holds no batch ------------------------------------------
# TRL's PPO-style trainers (PPOTrainer; RLOOTrainer before 0.22) build their eval dataloader with `drop_last=True` and
# hand it to `accelerator.prepare`; after the first update, sample generation (`num_sample_generations` > 0) runs
# `for batch in self.eval_dataloader: query = batch["input_ids"]`. An eval set smaller than one eval batch leaves that
# dataloader empty, and what the loop then sees is accelerate's: releases before 1.9 yield one `None` from an empty
# `DataLoaderShard` (its `__iter__`: `except StopIteration: yield`), so the job stops with "TypeError: 'NoneType'
# object is not subscriptable" after its first update; from 1.9 the loop runs zero times and nothing is printed.
#
# `empty_loader_yields_none()` asks the installed accelerate itself, on an empty prepared dataloader (no model, no
# process group), instead of trusting a version number.

@functools.cache
def empty_loader_yields_none() -> bool | None:
    """Whether the installed accelerate's prepared dataloader yields `None` when its dataset fills no batch (None when
    accelerate cannot be asked: not installed, or its API changed)."""
    try:
        from accelerate.data_loader import prepare_data_loader
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    try:
        loader = prepare_data_loader(DataLoader([], batch_size=1, drop_last=True), num_processes=1, process_index=0,
                                     put_on_device=False)
        batches = iter(loader)  # DataLoaderShard.__iter__ is a generator
        first = next(batches, StopIteration)
        batches.close()
    except Exception:  # an accelerate this reading does not know: no answer rather than a guess
        return None
    return first is None
