"""TD014 reward-functions: reward functions and models work the way the installed trainer calls them.

What it does
    Imports each `reward_funcs` entry as TRL's scripts do and calls it as the installed trainer
    does, in the fence (--user-code-timeout) on the main thread (math_verify's signal.alarm), on 2
    rows x 2 completions: one float (or None, where TRL takes it) per completion; NaN warns where
    TRL skips it, else fails; inf fails. Reward models: files, no weights.

Why is this bad?
    GRPO and RLOO call `reward_func(prompts=..., completions=..., completion_ids=...,
    **reward_kwargs)` with every column but `prompt`, after the first generation:
    - "TypeError: reward() got an unexpected keyword argument 'completion_ids'": no `**kwargs`
      (trl#4939, trl#2644); `completion_ids` from 0.19, `trainer_state` from 0.21;
    - "'list' object has no attribute 'strip'" / "string indices must be integers": the other
      completion format (trl#4202, unsloth#2907);
    - one score per batch: broadcast, or "returned 1 rewards, but 8 were expected" (trl#6533,
      checked after 1.0); None before 0.16 ("must be real number, not NoneType"), NaN, inf, strings;
      `async def` before 0.27; "Number of reward weights (2) must match number of reward functions
      (3)";
    - a reward model that is not a 1-label classifier: a causal LM gets a random head (warn), a
      2-label one fails to load; without pad or eos: "Cannot handle batch sizes > 1 if no padding
      token is defined" (trl#422). RLOO takes reward functions from trl 0.22 .

Example
    reward_funcs: [rewards.no_kwargs_reward]   # def no_kwargs_reward(prompts, completions)
    -> fail: reward function rewards.no_kwargs_reward cannot be called the way trl 1.16.0 calls ...

Fix safety
    No fix: the message names the function, file and line, the keyword it lacks or what it returned,
    and the smallest change (`def reward(completions, **kwargs)`, a float per completion).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trl_doctor import Unavailable, fail, passed, rule, skip, warn

from trl_doctor.facts.inputs.models import SCRIPT_OBJECT, scorer_folder, scorer_head
from trl_doctor.facts.trl.installed import TRAINER_CLASS, trainer_mentions
from trl_doctor.facts.rewards import (RewardCall, RewardImportError, bind_problem, call_reward, is_async, new_stats,
                                     record_values, reward_call, reward_fence, reward_problem, resolve_reward,
                                     as_trl_reads, EnvironmentFailed, fenced_environments, resolve_callables)
from trl_doctor.facts.inputs.text import config_relative
from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.trl.trainer_config import trainer_config

ROWS = 2  # dataset rows the functions are called on
COMPLETIONS = (  # two synthetic completions per prompt, so group-relative rewards can differ
    "The answer is 4.",
    "<think>\nTwo plus two is four.\n</think>\nThe answer is 4.",
)
ASYNC_FROM = "0.27"  # first release whose trainers await async reward functions (read from the wheels)


@rule(
    id="TD014",
    slug="reward-functions",
    title="Reward functions take what the installed trainer passes and return one number per completion",
    trainers=("grpo", "rloo"),
    static_skip="it imports and calls the repository's reward functions (static never runs them)",
)
def check(ctx):
    cfg = ctx.config
    trl_version = ctx.version("trl")
    cls = TRAINER_CLASS[ctx.trainer]
    call = reward_call(ctx.trainer)
    if call is None:
        yield skip(f"trl {trl_version or '(not installed)'} has no {cls} source to read (see the version-skew rule)")
        return
    rm_ref = cfg.get("reward_model_name_or_path")  # a path as the file writes it (relative to the file)
    rm_ref = rm_ref if isinstance(rm_ref, str) and rm_ref else None
    names = list(cfg.reward_funcs)
    details: dict[str, Any] = {"trl": trl_version, "trainer": cls}
    if not call.takes_reward_funcs:
        if names or rm_ref:
            given = ", ".join(names + ([rm_ref] if rm_ref else []))
            yield fail(f"trl {trl_version}'s {cls} is the PPO-style trainer (before trl 0.22): it scores completions with "
                       f"one `reward_model_path` classifier and takes no reward functions, so {given} would never run; "
                       "pin trl>=0.22 for RLOO with reward functions", **details)
        else:
            yield skip(f"trl {trl_version}'s {cls} scores with `reward_model_path` only: no reward functions to check")
        return
    details["TRL calls"] = call.evidence
    sources = ([f"reward model {rm_ref}"] if rm_ref else []) + names
    details["reward sources (in order)"] = sources
    if not sources:
        stops = trainer_mentions(ctx.trainer, "No reward source provided")
        outcome = (f"trl {trl_version}'s {cls} stops at start-up with 'No reward source provided'" if stops else
                   f"trl {trl_version}'s {cls} takes the empty list and trains on no reward at all (loss 0 and grad "
                   "norm 0 at every step)")
        yield fail(f"the config names no `reward_funcs` and no `reward_model_name_or_path`: {outcome}; add a reward "
                   "function (`reward_funcs: [my_rewards.correctness]`) or a reward model", **details)
        return

    findings: list[tuple[Any, str]] = []
    summaries: list[str] = []
    findings += _weights(cfg, sources, cls, ctx.trainer)
    if rm_ref:
        problems, summary, facts = _reward_model(ctx, rm_ref, call, cls)
        details["reward model"] = facts
        findings += problems
        summaries.append(summary)

    inputs, note = _probe_inputs(ctx, call)
    details["probe"] = note
    if inputs is not None:
        details["arguments passed"] = ", ".join(f"{k}=" for k in inputs["kwargs"])
    scored_by_any = [bool(rm_ref)] * (len(inputs["prompts"]) if inputs else 0)
    unjudged = False  # a function the doctor could not call as the trainer does: its scores are unknown
    for name in names:
        try:
            func = resolve_reward(name, cfg.base_dir)
        except RewardImportError as exc:
            findings.append((fail, f"reward function {name} cannot be imported: {exc}{_folder_hint(ctx, name)}"))
            continue
        problem, summary, scores, extra = _probe(ctx, name, func, call, inputs, trl_version)
        details.update(extra)
        if problem is not None:
            findings.append(problem)
        if summary:
            summaries.append(summary)
        unjudged = unjudged or (inputs is not None and problem is None and scores is None)
        for i, s in enumerate(scores or []):
            scored_by_any[i] = scored_by_any[i] or s is not None
    if inputs is not None and call.none_allowed and not any(f is fail for f, _ in findings) and not unjudged \
            and not all(scored_by_any):
        missing = scored_by_any.count(False)
        findings.append((warn, (
            f"{missing} of the {len(scored_by_any)} probe completions get no score from any reward source (every "
            f"function returned None for them): trl {trl_version} logs 'All reward functions returned None' and "
            "those completions teach nothing; make at least one reward function score every completion")))

    if not findings:
        yield passed(f"{len(sources)} reward source(s) as trl {trl_version}'s {cls} calls them: " + "; ".join(summaries),
                     **details)
        return
    for make, message in findings:
        yield make(message, **details)


# -- reward weights ------------------------------------------------------------------------------------------------

def _weights(cfg, sources: list[str], cls: str, trainer: str) -> list[tuple[Any, str]]:
    weights = cfg.get("reward_weights")
    if not isinstance(weights, list) or len(weights) == len(sources):
        return []
    listed = ", ".join(sources)
    return [(fail, (
        f"reward_weights has {len(weights)} weight(s) {weights} for {len(sources)} reward source(s) ({listed}, in the "
        f"order `trl {trainer}` builds them: the reward model first, then reward_funcs): {cls} stops at "
        f"start-up with 'Number of reward weights ({len(weights)}) must match number of reward functions "
        f"({len(sources)})'; give one weight per source, in that order"))]


# -- the reward model ------------------------------------------------------------------------------------------------

def _reward_model(ctx, ref: str, call: RewardCall, cls: str) -> tuple[list, str, dict]:
    from trl_doctor.facts.inputs.models import resolve_artifact

    cfg = ctx.config
    path = resolve_artifact(ref, cfg.base_dir, str(cfg.path), "reward_model_name_or_path", need="config.json").path
    facts: dict[str, Any] = {"path": str(path)}
    problems: list[tuple[Any, str]] = []
    folder = scorer_folder(ctx, path)
    archs, n, labels = list(folder.architectures), folder.num_labels, dict(folder.id2label)
    facts.update({"architectures": archs, "num_labels": n})
    seq = [a for a in archs if a.endswith("ForSequenceClassification")]
    how = f"{cls} loads it with AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)"
    if not archs:
        problems.append((warn, f"reward model {ref}: its config.json names no architectures, so it cannot be "
                               "confirmed to be a 1-label sequence classifier"))
    elif not seq:
        live = ctx.live.aux_models.get("reward_model_name_or_path") if ctx.live is not None else None
        head = scorer_head(ctx, path, live)
        facts["score head"] = head.head if head is not None else None
        if head is not None and head.fresh:
            got = (f"the script's {head.loaded_as} has a new, randomly initialised {head.head}"
                   if head.by == SCRIPT_OBJECT else f"{how}, which gives it a new, randomly initialised {head.head}")
            problems.append((warn, (
                f"reward model {ref} is a {archs[0]} without a trained score head: {got}, and {cls} never trains a "
                "reward model, so every reward comes from an untrained head (the job runs, on noise); use a trained "
                "1-label *ForSequenceClassification checkpoint")))
        else:
            why = (head.error if head is not None and head.error else
                   f"the script passes it as a {head.loaded_as}, whose logits are next-token logits, not one score per "
                   "completion" if head is not None else "its config cannot be read")
            problems.append((fail, (
                f"reward model {ref} is a {archs[0]}, not a sequence classifier, and {cls} cannot score with it: {why}; "
                "use a trained 1-label *ForSequenceClassification checkpoint")))
    elif n not in (None, 1):
        problems.append((fail, (
            f"reward model {ref} is a {seq[0]} with {n} labels ({labels}): {how}, which stops on the score.weight "
            f"size mismatch ([{n}, hidden] in the checkpoint); use a 1-label reward model (one scalar per "
            "completion)")))
    pad, eos, found = folder.pad_token, folder.eos_token, folder.tokenizer_files
    facts.update({"tokenizer pad_token": pad, "tokenizer eos_token": eos})
    if not found:
        facts["tokenizer"] = (f"no tokenizer files in {path}: {cls} loads the reward model's tokenizer from this folder "
                              "(AutoTokenizer.from_pretrained), so it must ship one")
    elif pad is None and (eos is None or not call.eos_pad_for_reward_models):
        fallback = " or an eos token (TRL's fallback)" if call.eos_pad_for_reward_models else ""
        problems.append((fail, (
            f"reward model {ref}: its tokenizer has no pad token{fallback}: {cls} sets the reward model's pad_token_id "
            f"from it, and {seq[0] if seq else 'the classifier'} then refuses batches ('Cannot handle batch sizes > 1 "
            "if no padding token is defined'); set pad_token in its tokenizer_config.json")))
    elif pad is None:
        facts["pad"] = f"none: {cls} uses the eos token {eos!r} as the reward model's pad token"
    kind = f"{n}-label {seq[0]}" if seq else (archs[0] if archs else "unknown architecture")
    return problems, f"reward model {ref} ({kind})", facts


# -- calling the functions --------------------------------------------------------------------------------------------

class _TrainerStateStandIn:
    """What reward functions read from `trainer_state` (transformers.TrainerState) at the first step, without
    importing the trainer stack."""

    def __init__(self, max_steps: int, epochs: float):
        self.epoch = 0.0
        self.global_step = 0
        self.max_steps = max_steps
        self.num_train_epochs = epochs
        self.logging_steps = 1
        self.log_history: list[dict] = []
        self.is_local_process_zero = True
        self.is_world_process_zero = True
        self.best_metric = None
        self.best_model_checkpoint = None

    def __repr__(self) -> str:
        return f"TrainerState(global_step={self.global_step}, max_steps={self.max_steps})"


def _trainer_state(ctx):
    """The TrainerState the first step hands reward functions: transformers' own class, built from the trainer
    config (already loaded for other rules, so the import is cheap), else a stand-in with its common fields."""
    try:
        cfg = trainer_config(ctx)
        from transformers import TrainerState

        return TrainerState(max_steps=cfg.max_steps, num_train_epochs=cfg.num_train_epochs,
                            logging_steps=cfg.logging_steps, train_batch_size=cfg.per_device_train_batch_size)
    except Exception:  # no buildable config: the stand-in still answers what reward functions read at step 0
        return _TrainerStateStandIn(int(config_value(ctx, "max_steps", -1) or -1),
                                    float(config_value(ctx, "num_train_epochs", 3.0) or 3.0))


def _has_environments(ctx) -> bool:
    return config_value(ctx, "environment_factory") is not None


def _probe_inputs(ctx, call: RewardCall) -> tuple[dict | None, str]:
    """The keyword arguments of one probe call (2 dataset rows x 2 synthetic completions), or None and why not."""
    try:
        ds = ctx.dataset
    except Unavailable as exc:
        return None, f"functions imported and signatures checked, not called: {exc}"
    columns = list(ds.column_names)
    if "prompt" not in columns:
        return None, (f"functions imported and signatures checked, not called: the dataset has no `prompt` column "
                      f"(columns: {', '.join(columns) or 'none'})")
    n = min(ROWS, len(ds))
    if n == 0:
        return None, "functions imported and signatures checked, not called: the dataset has no rows"
    from trl_doctor.facts.inputs.chat import is_conversational

    rows = [ds[i] for i in range(n)]
    conversational = is_conversational(rows[0])
    prompts, completions, texts, inputs = [], [], [], []
    for row in rows:
        for text in COMPLETIONS:
            prompts.append(copy.deepcopy(row["prompt"]))
            completions.append([{"role": "assistant", "content": text}] if conversational else text)
            texts.append(text)
            inputs.append(row)
    kwargs: dict[str, Any] = {}
    for key in call.keywords:
        if key == "prompts":
            kwargs[key] = prompts
        elif key == "completions":
            kwargs[key] = completions
        elif key == "completion_ids":
            tok = ctx.tokenizer
            kwargs[key] = [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
        else:
            kwargs[key] = None  # a keyword this doctor does not know: bound, passed empty
    for key in columns:
        if key not in call.excluded_columns:
            kwargs[key] = [copy.deepcopy(r[key]) for r in inputs]
    logged: dict[str, list] = {"log_extra": [], "log_metric": []}
    for key in call.extras:
        if key == "trainer_state":
            kwargs[key] = _trainer_state(ctx)
        elif key in logged:
            kwargs[key] = (lambda *a, _k=key, **kw: logged[_k].append(a or kw))
        else:
            kwargs[key] = None
    if call.environment_extras and _has_environments(ctx):
        try:
            factory = resolve_callables(config_value(ctx, "environment_factory"), ctx.config.base_dir)
            envs = fenced_environments(factory, inputs, ctx.config.base_dir, ctx.options.user_code_timeout)
        except Exception as exc:  # the user's factory or reset: its error is the smoke step's to judge
            said = str(exc) if isinstance(exc, EnvironmentFailed) else f"{type(exc).__name__}: {exc}"
            return None, ("functions imported and signatures checked, not called: the environment_factory's "
                          f"environments could not be built and reset as TRL does ({said[:200]})")
        kwargs.update({key: envs for key in call.environment_extras})
    fmt = "conversational: one assistant message each" if conversational else "plain text"
    note = (f"called on the dataset's first {n} row(s) x {len(COMPLETIONS)} synthetic completions ({fmt}), "
            f"{len(prompts)} completions per call")
    return {"kwargs": kwargs, "prompts": prompts, "logged": logged}, note


def _probe(ctx, name: str, func, call: RewardCall, inputs: dict | None, trl_version: str | None):
    """(problem or None, summary, scores, extra details) for one reward function."""
    import inspect

    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    short = lambda path: config_relative(ctx, path)  # noqa: E731
    stats = new_stats()
    if inputs is not None:
        kwargs = inputs["kwargs"]
    else:
        kwargs = {k: None for k in call.call_names(environments=_has_environments(ctx))}
        kwargs.update({c: None for c in _columns_or_empty(ctx) if c not in call.excluded_columns})
    extra: dict[str, Any] = {}
    bound = bind_problem(func, name, signature, (), kwargs)
    if bound is not None:
        stats["signature"] = bound
        return (fail, reward_problem(name, stats, trl_version, short, call)), "", None, extra
    if is_async(func) and not call.awaits_async:
        return (fail, (f"reward function {name} is `async def`, but trl {trl_version}'s trainer calls reward functions "
                       f"without awaiting them (TRL awaits them from {ASYNC_FROM}): it gets a coroutine instead of "
                       "scores and the step fails building the reward tensor; make it synchronous or upgrade TRL")), \
            "", None, extra
    if inputs is None:
        return None, f"{name} (signature fits; not called)", None, extra

    limit = ctx.options.user_code_timeout
    with reward_fence(name, func, ctx.config.base_dir, limit) as (label, wait):
        outcome = call_reward(func, kwargs, is_async(func), wait, skip_files=(__file__,))
    if outcome.get("printed"):
        extra[f"printed by {name}"] = outcome["printed"]
    if "timeout" in outcome:  # in-process use only: in the worker, the supervisor stops it and fails this rule
        return (fail, (f"{label} did not finish within {limit:g} s (--user-code-timeout) on {len(inputs['prompts'])} "
                       "completions: it would stall every training step (a remote judge or a model loaded per call?)")), \
            "", None, extra
    if outcome.get("off_main"):  # the doctor's calling, not the function: TRL calls it on the main thread
        return None, (f"{name} (not judged: it needs the main thread, where the trainer calls it, and this check "
                      f"ran off it: {outcome['raised']['error'][:120]})"), None, extra
    if "raised" in outcome:
        stats["raised"] = outcome["raised"]
        message = reward_problem(name, stats, trl_version, short, call)
        columns = [k for k in kwargs if k not in call.call_names(environments=True)]
        message += (f" when called as trl {trl_version} calls it (dataset columns passed: "
                     f"{', '.join(columns) or 'none'}; completions in the dataset's format)")
        return (fail, message), "", None, extra
    expected = len(inputs["prompts"])
    value = outcome["value"]
    value = as_trl_reads(value, call)  # a generator: this TRL iterates the output before using it
    scores = record_values(stats, value, expected)
    extra[f"reward {name}"] = [None if s is None else round(s, 4) for s in scores] if scores is not None else \
        repr(outcome["value"])[:120]
    problem = reward_problem(name, stats, trl_version, short, call)
    if problem is not None:
        return (fail, problem), "", None, extra
    if stats["none"] and not call.none_allowed:
        return (fail, (f"reward function {name} returned None for {stats['none']} of {expected} completions: trl "
                       f"{trl_version} builds torch.tensor(scores), which fails on None ('must be real number, not "
                       "NoneType'); return a float (None means 'no score' from trl 0.16)")), "", scores, extra
    inf = stats["nonfinite"] - stats["nan"]
    if inf:
        return (fail, (f"reward function {name} returned inf for {inf} of {expected} completions: the group's mean and "
                       "advantages become NaN; return finite scores")), "", scores, extra
    if stats["nan"]:
        if call.nan_ignored:
            return (warn, (f"reward function {name} returned NaN for {stats['nan']} of {expected} completions: trl "
                           f"{trl_version} sums rewards with nansum, so NaN silently counts as 'no score'; return None "
                           "for that, a NaN is usually a division by zero")), "", scores, extra
        return (fail, (f"reward function {name} returned NaN for {stats['nan']} of {expected} completions: trl "
                       f"{trl_version} sums rewards plainly, so the rewards, advantages and loss become NaN")), \
            "", scores, extra
    numbers = [s for s in scores if s is not None]
    span = f"in [{min(numbers):.3g}, {max(numbers):.3g}]" if numbers else "all None"
    nones = f", {stats['none']} None" if stats["none"] else ""
    return None, f"{name} ({len(scores)} scores {span}{nones})", scores, extra


def _columns_or_empty(ctx) -> list[str]:
    try:
        return list(ctx.dataset.column_names)
    except Unavailable:
        return []


def _folder_hint(ctx, name: str) -> str:
    folder = Path(name).expanduser()
    folder = folder if folder.is_absolute() else ctx.config.base_dir / folder
    if (folder / "config.json").is_file():
        return (f" ({name} is a model folder: `trl {ctx.trainer}` takes reward functions in `reward_funcs` and a reward "
                "model in `reward_model_name_or_path`)")
    return ""


