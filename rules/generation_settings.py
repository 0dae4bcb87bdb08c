"""TD021 generation-settings: the job samples as you set it, from prompts `generate` accepts.

What it does
    Merges, through transformers' `_prepare_generation_config`, the GenerationConfig the installed
    trainer builds with generation_config.json and with a blank one: keys that differ are the file's
    doing. Reads from `_validate_model_kwargs` and the trainer's source whether `generate` takes the
    tokenizer's output, who pads prompts, and whether checkpointing is off while generating.

Why is this bad?
    - Sampling defaults in generation_config.json (`min_p`, `top_k`, `no_repeat_ngram_size`...) fill
      every key the trainer leaves unset (4.50-4.57 also keys set to the global default,
      transformers#42762): settings nobody wrote, identical completions, high `frac_reward_zero_std`
      (ms-swift#3135); vLLM reads only the eos ids.
    - `token_type_ids` (Baguettotron's tokenizer) for a forward without them: "ValueError: The
      following `model_kwargs` are not used by the model: ['token_type_ids']" (trl#4549).
    - `padding_side: right` under PPO's DataCollatorWithPadding: "... right-padding was detected!".
    - `generation_kwargs` over TRL's own `temperature` or `n`; vLLM's top_p/top_k/min_p under
      importance sampling (vLLM's log-probs truncated, the trainer's not: trl#6789).
    - GRPO with `gradient_checkpointing: true` and no vLLM before TRL 0.22 (fixed by PR#3891): no KV
      cache, quadratic in the completion length (transformers 4.53+: "Caching is incompatible with
      gradient checkpointing", trl#3683, docs/coverage.md: H4): a warn.

Example
    model_name_or_path: qwen2-minp  # -> warn: generate samples with min_p 0.1 (its file) ...

Fix safety
    Safe: `model_input_names` without `token_type_ids`, or `padding_side: left`, in
    tokenizer_config.json (manual in the hub cache). Manual: pin sampling keys in
    `generation_kwargs` or delete them from generation_config.json; vLLM, trl>=0.22 or no
    checkpointing.
"""

from __future__ import annotations

import re
from typing import Any

from trl_doctor import Edit, Fix, Unavailable, fail, manual, passed, rule, skip, warn

from trl_doctor.facts.inputs.chat import is_conversational
from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.trl.generation import (effective_generation, generation_kwargs_collisions,
                                             token_type_ids_reach_generate, trainer_generation_config)
from trl_doctor.facts.trl.installed import (TRAINER_CLASS, generation_without_kv_cache, trainer_source,
                                            vllm_code_mentions)
from trl_doctor.facts.trl.trainer_config import trainer_config

_RANK = {"pass": 0, "warn": 1, "fail": 2}
# the value that turns a sampling filter off, for keys whose unset value (None) the merge would fill again
NEUTRAL = {"min_p": 0.0, "typical_p": 1.0, "top_k": 0, "top_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
           "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "temperature": 1.0}


@rule(
    id="TD021",
    slug="generation-settings",
    title="Generation samples with the configured settings, from inputs generate accepts",
    needs=("tokenizer", "model_config"),
    fixable="sometimes",
    static_skip="it reads the trainer's generation code",
)
def check(ctx):
    if TRAINER_CLASS.get(ctx.trainer) is None or trainer_source(ctx.trainer) is None:
        yield skip(f"the installed trl has no {ctx.trainer} trainer source to read")
        return
    details: dict = {}
    findings = []
    for part in (_sampling, _kwargs_collisions, _truncated_importance_sampling, _token_type_ids, _padding_side,
                 _checkpointed_generation):
        found, its_details = part(ctx)  # (status, message, fix) or None
        details.update(its_details)
        if found:
            findings.append(found)
    if not findings:
        yield passed("generate samples with the trainer's own settings, from left-padded prompts it accepts", **details)
        return
    findings.sort(key=lambda f: -_RANK[f[0]])
    status, message = findings[0][0], "; ".join(f[1] for f in findings)
    by_path: dict = {}  # one Edit per file: the token_type_ids and padding fixes both write tokenizer_config.json
    for f in findings:
        for e in (f[2].edits if f[2] is not None else ()):
            by_path.setdefault(e.path, []).extend(e.set)
    edits = tuple(Edit(path, set=tuple(sets)) for path, sets in by_path.items())
    manuals = [f[2].description for f in findings if f[2] is not None and not f[2].edits]
    fixes = [f[2] for f in findings if f[2] is not None and f[2].edits]
    fix = None
    if fixes:
        fix = Fix("; ".join([x.description for x in fixes] + manuals), edits)
    elif manuals:
        fix = manual("; ".join(manuals))
    yield (fail if status == "fail" else warn)(message, fix, **details)


def _config(ctx):
    try:
        return trainer_config(ctx)
    except Unavailable:
        return None


def _sampling(ctx) -> tuple[tuple | None, dict[str, Any]]:
    """generation_config.json keys that change what the job samples with (transformers' generate path)."""
    details: dict[str, Any] = {}
    gen_path = ctx.model_file("generation_config.json")
    gen_json = ctx.read_json(gen_path)
    if gen_json is None:
        details["sampling"] = "no generation_config.json: generate uses the trainer's settings and transformers' defaults"
        return None, details
    if config_value(ctx, "use_vllm", False):
        details["sampling"] = ("vLLM samples with the SamplingParams TRL builds from the config; it reads only the eos "
                               "ids from generation_config.json")
        return None, details
    cfg = _config(ctx)
    if cfg is None:
        details["sampling"] = "not judged: TRL rejects this config (see trainer-config)"
        return None, details
    built = trainer_generation_config(ctx.trainer, cfg, ctx.tokenizer)
    if built is None:
        details["sampling"] = f"not judged: no GenerationConfig(...) call found in the installed {TRAINER_CLASS[ctx.trainer]}"
        return None, details
    details["trainer's GenerationConfig"] = built.evidence
    passed_kwargs = {k: v for k, v in built.kwargs.items() if k not in ("eos_token_id", "pad_token_id", "bos_token_id")}
    effective = _quiet(lambda: effective_generation(ctx, passed_kwargs, built.overrides_model_config))
    if effective is None:
        details["sampling"] = "not judged: the installed transformers cannot merge the generation configs here"
        return None, details
    details["merge"] = effective.how
    if not effective.changed:
        details["sampling"] = "generation_config.json changes no sampling setting of the trainer's GenerationConfig"
        return None, details
    cls = type(cfg).__name__
    parts = []
    for key, (used, plain) in sorted(effective.changed.items()):
        if key in built.kwargs:
            whose = f"{built.sources.get(key, 'the trainer')} = {built.kwargs[key]!r}"
        else:
            whose = f"{TRAINER_CLASS[ctx.trainer]} does not pass it; transformers' default {plain!r}"
        shown = "unset" if plain is None else repr(plain)
        parts.append(f"{key} {used!r} (generation_config.json) instead of {shown} ({whose})")
    details["sampling"] = parts
    fields, extra = [], []
    for key, (_used, plain) in sorted(effective.changed.items()):
        value = NEUTRAL.get(key, plain) if plain is None else plain
        source = built.sources.get(key, "")
        if source.startswith(cls + ".") and source != f"{cls}.generation_kwargs":
            fields.append(f"`{source.split('.', 1)[1]}: {value!r}`")
        else:
            extra.append(f"{key}: {value!r}")
    pins = fields + ([f"`generation_kwargs: {{{', '.join(extra)}}}`"] if extra else [])
    fix = manual(f"pin them in the config ({', '.join(pins)}) or delete {', '.join(sorted(effective.changed))} "
                 f"from {gen_path}")
    return ("warn", f"generate samples with {'; '.join(parts)}: transformers fills what the trainer leaves unset from "
                    f"{gen_path.name}, so the job does not sample as {cls} says", fix), details


def _quiet(fn):
    """Run `fn` with transformers' logging at error level (its merge warns about flags it will ignore)."""
    try:
        from transformers.utils import logging
    except ImportError:
        return fn()
    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        return fn()
    finally:
        logging.set_verbosity(before)


def _kwargs_collisions(ctx) -> tuple[tuple | None, dict[str, Any]]:
    """`generation_kwargs` keys that silently replace a sampling setting TRL sets itself (issue 46)."""
    cfg = _config(ctx)
    if cfg is None or not hasattr(cfg, "generation_kwargs"):  # a release without it (trl < 0.19) drops the key
        return None, {}
    kwargs = cfg.generation_kwargs
    if not isinstance(kwargs, dict) or not kwargs:
        return None, {}
    # a key the config leaves at its default is TRL's to fill and generation_kwargs' to pin (the documented way to
    # pin min_p, top_k...), except temperature (TRL scores log-probs at it) and the length cap, which always hold one
    raw = ctx.config.raw
    own = {k: config_value(ctx, k) for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                             "max_completion_length") if k in raw or k in ("temperature",
                                                                                           "max_completion_length")}
    found = generation_kwargs_collisions(kwargs, own)
    if not found:
        return None, {}
    said = []
    for c in found:
        if c.follows is None:
            said.append(f"generation_kwargs sets `{c.key}: {c.value}`, which TRL sets itself (one completion a prompt "
                        "under colocated vLLM, num_generations a prompt for a server, num_return_sequences from "
                        "num_generations): the completions generated no longer match the groups TRL scores")
        elif c.key == "temperature":
            said.append(f"generation_kwargs' `temperature: {c.value}` replaces the config's temperature {c.own}: "
                        f"completions are sampled at {c.value} while TRL scores their log-probs at {c.own}, so the "
                        "policy ratio and the KL are computed off the distribution that sampled them")
        else:
            said.append(f"generation_kwargs' `{c.key}: {c.value}` silently replaces {c.follows} {c.own}")
    counts = [c for c in found if c.follows is None]
    keys = ", ".join(c.key for c in found)
    fix = manual(f"set {', '.join(sorted({c.follows for c in found if c.follows}))} with the config's own keys and "
                 f"drop {keys} from generation_kwargs" if not counts else f"drop {keys} from generation_kwargs")
    return ("fail" if counts else "warn", "; ".join(said), fix), {"generation_kwargs collisions": keys}


def _truncated_importance_sampling(ctx) -> tuple[tuple | None, dict[str, Any]]:
    """vLLM sampling with top_p / top_k / min_p under TRL's importance-sampling correction (issue 46): vLLM returns the
    log-probs of the truncated, renormalized distribution (`logprobs_mode="processed_logprobs"`, which the installed
    TRL asks for), while the trainer scores the sampled tokens over the whole vocabulary at the temperature (its
    top_p / top_k reach generation only): each token's ratio is the kept mass, at most 1."""
    cfg = _config(ctx)
    if cfg is None or not getattr(cfg, "use_vllm", False) or not getattr(cfg, "vllm_importance_sampling_correction", False):
        return None, {}
    if not vllm_code_mentions(ctx.trainer, "processed_logprobs"):
        return None, {}
    kwargs = getattr(cfg, "generation_kwargs", None) or {}
    value = {k: kwargs.get(k, getattr(cfg, k, None)) for k in ("top_p", "top_k", "min_p")}
    cut = [f"{k} {v}" for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
           and ((k == "top_p" and v < 1.0) or (k == "top_k" and v > 0) or (k == "min_p" and v > 0))]
    if not cut:
        return None, {}
    mode = str(getattr(cfg, "vllm_importance_sampling_mode", "") or "token_truncate")
    effect = ("the sequence's ratio is the product over its tokens, so a completion's weight falls exponentially with "
              "its length: long completions all but vanish from the gradient" if mode.startswith("sequence") else
              "every token is down-weighted by the mass the filter cut")
    floor = getattr(cfg, "vllm_importance_sampling_clip_min", None)
    if mode.endswith("mask") and floor:
        effect += f" (masked out below vllm_importance_sampling_clip_min {floor})"
    message = (f"vLLM samples with {', '.join(cut)} and returns the truncated distribution's log-probs, while the "
               f"trainer scores over the whole vocabulary: every ratio of the importance-sampling correction "
               f"({mode}) is below 1, and {effect}")
    fix = manual("sample without top_p / top_k / min_p under vLLM, or set vllm_importance_sampling_correction: false")
    return ("warn", message, fix), {"importance sampling": f"{mode} over vLLM's processed log-probs of {', '.join(cut)}"}


def _token_type_ids(ctx) -> tuple[tuple | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    tok = ctx.tokenizer
    try:
        returned = list(tok("trl-doctor probe").keys())
    except Exception as exc:  # a tokenizer that cannot tokenize is for other rules to report
        details["token_type_ids"] = f"not judged: the tokenizer raised {type(exc).__name__}"
        return None, details
    if "token_type_ids" not in returned:
        return None, details
    try:
        model = ctx.meta_model
        model._validate_model_kwargs({"token_type_ids": [[0]]})
        details["token_type_ids"] = f"the tokenizer returns token_type_ids; {type(model).__name__} accepts them in generate"
        return None, details
    except ValueError as exc:
        refusal = " ".join(str(exc).split())
    except Exception as exc:  # no meta model (remote code, an unknown architecture): not judged
        details["token_type_ids"] = f"not judged: {type(exc).__name__}: {exc}"
        return None, details
    reach, evidence = token_type_ids_reach_generate(ctx.trainer)
    details["trainer's prompt inputs"] = evidence
    try:
        rows = ctx.dataset.select(range(min(1, len(ctx.dataset)))).to_list()
    except Unavailable:
        rows = []
    chat = bool(rows) and is_conversational(rows[0])
    uses_generate = not config_value(ctx, "use_vllm", False)
    details["token_type_ids"] = (f"the tokenizer returns {returned}; {type(ctx.meta_model).__name__}.generate refuses "
                                 f"token_type_ids ({refusal[:160]})")
    if not (reach and chat and uses_generate):
        return None, details
    names = [n for n in tok.model_input_names if n != "token_type_ids"] or ["input_ids", "attention_mask"]
    fix = _tokenizer_fix(ctx, "model_input_names", names,
                         f"write model_input_names {names} to tokenizer_config.json (the tokenizer stops returning token_type_ids)")
    return ("fail", f"the tokenizer returns token_type_ids (model_input_names {list(tok.model_input_names)}) and "
                    f"{TRAINER_CLASS[ctx.trainer]} passes them with the chat prompts to generate, which "
                    f"{type(ctx.meta_model).__name__} refuses: the first step stops with \"{refusal[:120]}\"", fix), details


_LEFT = re.compile(r"""padding_side\s*=\s*["']left["']""")


def _padding_side(ctx) -> tuple[tuple | None, dict[str, Any]]:
    details: dict[str, Any] = {}
    tok = ctx.tokenizer
    side = getattr(tok, "padding_side", "right")
    rel, text = trainer_source(ctx.trainer)
    m = _LEFT.search(text)
    cls = TRAINER_CLASS[ctx.trainer]
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        details["padding side"] = f"tokenizer pads {side}; {cls} pads prompts left itself ({rel}:{line}: `{m.group(0)}`)"
        return None, details
    if ctx.live is None:
        # from a config file, the trainer gets the tokenizer TRL's example script builds:
        # examples/scripts/ppo/ppo.py loads it with `AutoTokenizer.from_pretrained(..., padding_side="left")`
        details["padding side"] = (f"tokenizer_config.json pads {side}; {rel} pads as the tokenizer says, and TRL's example "
                                   "script (examples/scripts/ppo/ppo.py) loads it with padding_side='left'")
        return None, details
    details["padding side"] = f"the script's tokenizer pads {side}; {rel} never sets padding_side: its collator pads as the tokenizer says"
    if side != "right":
        return None, details
    fix = _tokenizer_fix(ctx, "padding_side", "left", "write padding_side: left to tokenizer_config.json (or pass "
                                                      "padding_side='left' to AutoTokenizer.from_pretrained in the script)")
    return ("fail", f"the script's tokenizer pads on the right (padding_side 'right') and {cls} batches prompts with the "
                    "tokenizer's own padding: pad tokens sit between each shorter prompt and its completion, so "
                    "generation continues after padding and those rollouts degrade", fix), details


def _checkpointed_generation(ctx) -> tuple[tuple | None, dict[str, Any]]:
    """GRPO generating in the trainer (no vLLM) with gradient checkpointing left on: no KV cache (docs/coverage.md: H4)."""
    details: dict[str, Any] = {}
    if ctx.trainer != "grpo" or _config(ctx) is None or not config_value(ctx, "gradient_checkpointing", False):
        return None, details
    if config_value(ctx, "use_vllm", False):
        details["generation and checkpointing"] = "vLLM generates: gradient checkpointing does not touch its KV cache"
        return None, details
    without_cache, evidence = generation_without_kv_cache(ctx.trainer)
    details["generation and checkpointing"] = evidence
    if not without_cache:
        return None, details
    length = config_value(ctx, "max_completion_length", None)
    return ("warn", f"gradient_checkpointing is on and the trainer generates itself ({evidence}): in training mode "
                    "with checkpointing enabled transformers turns the KV cache off (use_cache=False), so every new "
                    f"token recomputes the whole prompt and completion so far, and generating {length} tokens per "
                    "completion is quadratic in its length; transformers 4.53 and later also log 'Caching is "
                    "incompatible with gradient checkpointing' at every layer and step (trl#3683)",
            manual("generate with vLLM (use_vllm: true), or upgrade to trl>=0.22, whose unwrap_model_for_generation "
                   "turns checkpointing off while it generates (trl PR#3891), or set gradient_checkpointing: false "
                   "where memory allows")), details


def _tokenizer_fix(ctx, key, value, what):
    tok_path = ctx.config.tokenizer
    if tok_path.in_cache:
        return manual(f"{what}: {tok_path.path} is in the Hugging Face cache, which --fix never rewrites: copy the "
                      f"snapshot to a folder of your own (`cp -rL {tok_path.path} <dest>`), point the config at it "
                      "and rerun --fix")
    return Fix(what, (Edit(str(tok_path.path / "tokenizer_config.json"), set=((key, value),)),))
