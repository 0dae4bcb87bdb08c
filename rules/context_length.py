"""TD011 context-length: every prompt plus a full completion fits the model's context and vLLM's.

What it does
    Tokenizes up to 1000 prompts as the installed trainer does (shared with chat-template) and
    compares the longest (after TRL's truncation) plus `max_completion_length` (PPO:
    `response_length`) with `max_position_embeddings` and vLLM's `max_model_len`: past a learned
    position table (GPT-2, OPT, GPT-Neo) fails, rotary or relative warns; also the p99, the prompts
    that do not fit, the share truncated (warn above 2%).

Why is this bad?
    Past a learned table GPT-2 fails with "index out of range in self" (a device-side assert on
    GPU); rotary models run on untrained positions. vLLM refuses: "The decoder prompt (length 3353)
    is longer than the maximum model length of 2560" (trl#3569), or "Input prompt (8128 tokens) is
    too long and exceeds limit of 6000" and TRL fails with an IndexError (trl#3180); a
    `max_model_len` above the model's stops vLLM at start-up. `max_prompt_length` (GRPOConfig
    0.14-0.27, gone in 0.28) keeps the last tokens, so the BOS, system or generation prompt can be
    cut; TRL 0.19.0 also decoded truncated prompts with `skip_special_tokens=True` for vLLM
    (trl#3644). Keys: `vllm_max_model_length` (0.27+), `vllm_max_model_len` (0.15-0.17, only 0.15's
    in-process vLLM reads it), `vllm_mode` (0.18+; a server's `--max-model-len` is a
    `trl vllm-serve` flag).

Example
    model_name_or_path: gpt2-nopad      # learned positions: 512 rows; max_completion_length: 500
    -> fail: the longest prompt is 26 tokens (row 8; p99 26) and max_completion_length is 500:
       26 + 500 = 526 > the model's max_position_embeddings 512, and ... is a learned table ...

Fix safety
    Safe for vLLM's context only: a too small `vllm_max_model_length` (or `vllm_max_model_len` where
    read) becomes the longest prompt plus a full completion (too large: the limit). Changes to
    training are only named (`max_completion_length`, a prompt filter, `max_prompt_length`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trl_doctor import Edit, Finding, Fix, Unavailable, fail, passed, rule, skip, warn
from trl_doctor.facts.trl.subclass import own_data_path
from trl_doctor.facts.inputs.chat import prompt_lengths, prompt_rendering
from trl_doctor.facts.inputs.models import config_json, text_config_json
from trl_doctor.facts.launch.settings import config_fields, config_value, settings
from trl_doctor.facts.trl.behaviour import ppo_style, trl_words
from trl_doctor.facts.trl.installed import strips_truncated_prompts, trainer_mentions, vllm_code_mentions

TRUNCATION_WARN = 0.02  # warn when TRL would truncate more than this share of the prompts
LEARNED_POSITIONS = ("gpt2", "opt", "gpt_neo", "gptj", "bloom", "codegen", "biogpt")  # model types whose positions are a table


@rule(
    id="TD011",
    slug="context-length",
    title="Prompts plus completions fit the model's context and vLLM's",
    needs=("dataset", "tokenizer", "model_config"),  # no dataset named: skip before loading anything else
    fixable="sometimes",
    contexts=("full", "static"),
)
def check(ctx):
    own = own_data_path(ctx)
    if own:  # a framework's trainer reads its rows its own way
        yield skip(f"{own}; the prompt lengths are that code's to render, not judged by TRL's contract")
        return
    try:
        facts = prompt_lengths(ctx)
    except Unavailable as why:  # no prompts measured here (--static): what the lengths set in the config decide
        yield from _bounds(ctx, why)
        return
    if not facts["column"]:
        yield skip("the dataset has no `prompt` column to measure (see dataset-schema)")
        return
    if facts["max"] is None and facts.get("not_run"):
        yield skip(f"the prompts are rendered with the chat template, and {facts['not_run']}")
        return
    if facts["max"] is None:
        yield skip(f"not one prompt renders ({facts['measured']} measured; see chat-template and dataset-schema)")
        return
    s = settings(ctx)
    trl = ctx.version("trl") or "not installed"
    tok = ctx.tokenizer
    completion_key = s.completion_key
    completion, completion_known = config_value(ctx, completion_key), completion_key in s.fields
    if not completion_known and completion is None:
        yield skip(f"trl {trl} has no {ctx.trainer.upper()}Config to read the default `{completion_key}` from; set "
                   f"`{completion_key}` in the config to have it checked")
        return
    completion = int(completion or 0)
    lengths = [n for n in facts["lengths"] if n is not None]
    rows = [facts["indices"][i] for i, n in enumerate(facts["lengths"]) if n is not None]
    longest, p99 = facts["max"], facts["p99"]
    text_cfg = ctx.model_config.get_text_config() if hasattr(ctx.model_config, "get_text_config") else ctx.model_config
    positions = getattr(text_cfg, "max_position_embeddings", None)
    how = prompt_rendering(ctx)
    details = {
        "prompts measured": facts["measured"],
        "prompt tokens": f"max {longest} (row {facts['longest_row']}), p99 {p99}, median {sorted(lengths)[len(lengths) // 2]}",
        "rendered as": _rendering(facts, how),
        completion_key: completion,
        "model max_position_embeddings": positions,
        "model": str(ctx.config.model.path),
    }
    images = facts.get("images")
    if images is not None:
        details["image tokens"] = (f"{images['tokens']} for the {images['images']} images of `{images['column']}` in "
                                   "the measured rows, counted in the prompt tokens as the processor expands them"
                                   if images["counted"] else f"not counted: {images['why']}")
    skipped = len(facts["lengths"]) - len(lengths)
    if skipped:
        details["rows not measured"] = f"{skipped} (no renderable prompt: see chat-template and dataset-schema)"

    # -- TRL's own prompt truncation, where the installed release has it --------------------------------------
    has_truncation = "max_prompt_length" in s.fields
    limit_prompt = config_value(ctx, "max_prompt_length") if has_truncation else None
    if not has_truncation:
        details["max_prompt_length"] = (f"not a field of {s.config_class} in trl {trl}: prompts are not truncated"
                                        if s.config_class else "not used")
        limit_prompt = None
    else:
        details["max_prompt_length"] = limit_prompt
    effective = [min(n, limit_prompt) for n in lengths] if limit_prompt else list(lengths)
    eff_longest = max(effective)
    need = eff_longest + completion

    findings = []
    if limit_prompt:
        found, its_details = _truncation(ctx, facts, trl, tok, limit_prompt, lengths, rows, completion, positions)
        details.update(its_details)
        findings += [replace(f, details=dict(details)) for f in found]  # the details known when they were found

    # -- the model's own positions -------------------------------------------------------------------------------
    if positions is not None and need > positions:
        yield from findings
        finding, its_details = _positions(ctx, facts, rows, effective, lengths, completion, completion_key, positions,
                                          limit_prompt, has_truncation)
        details.update(its_details)
        yield replace(finding, details=dict(details))
        return

    # -- vLLM's context ------------------------------------------------------------------------------------------
    if config_value(ctx, "use_vllm", False):
        found, its_details = _vllm(ctx, s, need, positions, rows, effective, completion, completion_key, eff_longest)
        details.update(its_details)
        findings += [replace(f, details=dict(details)) for f in found]

    for finding in findings:
        yield finding
    if not any(f.status.value in ("fail", "warn") for f in findings):
        if images is not None and not images["counted"]:
            yield skip(f"the prompts' text fits ({eff_longest} + {completion_key} {completion} = {need} tokens), but the "
                       f"tokens of their images (`{images['column']}`) could not be counted here: {images['why']}",
                       **details)
            return
        where = f"the model's max_position_embeddings {positions}" if positions else "the model (no max_position_embeddings)"
        vllm = details.get("vLLM context")
        prompt = f"the longest prompt ({eff_longest} tokens{_after_cut(limit_prompt, longest)}, p99 {p99})"
        yield passed(f"{prompt} + {completion_key} {completion} = {need} fits {where}"
                     + _vllm_words(vllm, details.get("vLLM mode")),
                     **details)


def _bounds(ctx, why: Unavailable):
    """The judgment without the prompts' token lengths: a full completion against the model's positions, and the
    prompt length bound where the judged TRL truncates prompts. Unavailable (`why`) when the prompts decide."""
    cfg, text = config_json(ctx), text_config_json(ctx)
    limit = text.get("max_position_embeddings") or text.get("n_positions")
    if not isinstance(limit, int):
        raise Unavailable(f"{why}; config.json names no max_position_embeddings") from None
    own = config_fields(ctx)[1]
    key = "response_length" if ppo_style(ctx) else "max_completion_length"
    completion = config_value(ctx, key)
    prompt = config_value(ctx, "max_prompt_length") if "max_prompt_length" in own else None
    learned = cfg.get("model_type") in LEARNED_POSITIONS
    details = {"max_position_embeddings": limit, key: completion, "max_prompt_length": prompt, "trl": trl_words(ctx),
               "positions": "a learned table (an index past it crashes)" if learned else "rotary or relative"}
    if not isinstance(completion, int):
        raise Unavailable(f"`{key}` is not a number")
    if completion >= limit:
        words = (f"{key} {completion} alone is as long as the model's context ({limit} positions, config.json "
                 "max_position_embeddings): no prompt fits beside a full completion")
        if learned:
            yield fail(f"{words}; the model looks positions up in a learned table, so the first long completion stops "
                       "the job with \"index out of range in self\"", **details)
        else:
            yield warn(f"{words}: the model never saw the positions past {limit}, and vLLM refuses such a length",
                       **details)
        return
    if isinstance(prompt, int) and prompt + completion <= limit:
        yield passed(f"max_prompt_length {prompt} + {key} {completion} fit the model's {limit} positions", **details)
        return
    if isinstance(prompt, int):  # only a bound: whether prompts that long exist is the dataset's, tokenized
        raise Unavailable(f"{why}: the prompts' token lengths decide (max_prompt_length {prompt} + {key} {completion} "
                          f"could run past the model's {limit} positions)")
    raise Unavailable(f"{why}: the prompts' token lengths decide (trl {ctx.version('trl')} does not truncate prompts; "
                      f"{key} {completion} leaves {limit - completion} of the model's {limit} positions for the prompt)")


def _vllm_words(vllm: str | None, mode: str | None) -> str:
    """How the pass message names vLLM's context: a server's is set where it starts, so it is named as such."""
    if not vllm:
        return ""
    if mode == "server":
        return "; vLLM's server needs --max-model-len of at least that (see details)"
    return f" and vLLM's context ({vllm})"


def _positions(ctx, facts, rows, effective, lengths, completion, completion_key, positions, limit_prompt,
               has_truncation) -> tuple[Finding, dict[str, Any]]:
    """The longest prompt plus a full completion is past max_position_embeddings: how bad that is depends on whether
    a prompt alone is too long and on how the model encodes positions."""
    details: dict[str, Any] = {}
    eff_longest, p99 = max(effective), facts["p99"]
    room = positions - eff_longest
    over = [r for r, n in zip(rows, effective) if n + completion > positions]
    alone = [r for r, n in zip(rows, effective) if n >= positions]
    fixes = []
    if room > 0:
        fixes.append(f"set {completion_key}: {room}")
    if positions - completion > 0:
        fixes.append(f"drop the {len(over)} prompts longer than {positions - completion} tokens")
        if has_truncation:
            fixes.append(f"set max_prompt_length: {positions - completion}")
    details["prompts that do not fit with a full completion"] = _rows(over, len(lengths))
    details["smallest fixes"] = fixes
    learned = _learned_positions(ctx, positions)
    details["position encoding"] = learned or "not a learned table (rotary or relative): no error past the limit"
    head = (f"the longest prompt is {eff_longest} tokens{_after_cut(limit_prompt, facts['max'])} (row {facts['longest_row']}; "
            f"p99 {p99})")
    if alone:
        return fail(
            f"{head}: {_share(len(alone), len(lengths))} of the measured prompts are as long as the model's "
            f"max_position_embeddings {positions} or longer on their own, so they leave no room for a completion "
            f"({learned + ': index out of range in self' if learned else 'generation starts past the trained context'}"
            f"{'; vLLM refuses them' if config_value(ctx, 'use_vllm', False) else ''}); "
            f"{' or '.join(fixes[1:]) or 'use a model with a longer context'}"
        ), details
    if learned:
        return fail(
            f"{head} and {completion_key} is {completion}: {eff_longest} + {completion} = {eff_longest + completion} > the "
            f"model's max_position_embeddings {positions}, and {learned}: the first completion that runs past {room} tokens "
            f"stops the job with 'IndexError: index out of range in self' (a device-side assert on GPU); "
            f"{' or '.join(fixes)}"
        ), details
    text = (f"completions longer than {room} tokens (of {completion_key} {completion}) run past the model's "
            f"max_position_embeddings {positions} after the longest prompt ({_share(len(over), len(lengths))} of the prompts "
            "leave less room than a full completion): no error, but those tokens are generated at positions the model "
            f"was never trained on, and vLLM cuts them at its limit; {' or '.join(fixes)}")
    return warn(f"{head}: {text}"), details


def _learned_positions(ctx, positions: int) -> str | None:
    """'<module> is a learned table of N positions' when the model looks up absolute positions in an embedding table
    (GPT-2, OPT, GPT-Neo): past it the lookup fails. Read from the meta-device model (no weights)."""
    try:
        model = ctx.meta_model
    except Exception:  # no meta build (remote code, unknown class): judge from the config alone
        cfg = ctx.model_config
        return f"{cfg.model_type} has a learned position table" if hasattr(cfg, "n_positions") else None
    import torch

    tokens = model.get_input_embeddings()
    for name, module in model.named_modules():
        table = isinstance(module, torch.nn.Embedding) and module is not tokens
        if table and positions <= module.num_embeddings <= positions + 2:  # OPT keeps 2 extra rows
            return f"{type(model).__name__}.{name} is a learned table of {module.num_embeddings} positions"
    return None


def _truncation(ctx, facts, trl, tok, limit, lengths, rows, completion, positions) -> tuple[list[Finding], dict[str, Any]]:
    details: dict[str, Any] = {}
    cut = [r for r, n in zip(rows, lengths) if n > limit]
    details["prompts TRL truncates"] = _rows(cut, len(lengths))
    if not cut:
        return [], details
    conversational = [i for i, n in enumerate(facts["lengths"]) if n is not None and n > limit
                      and facts["formats"][i] == "conversational"]
    out = []
    if conversational:
        i = max(conversational, key=lambda j: facts["lengths"][j])
        opening, closing = _template_edges(tok, ctx.dataset[facts["indices"][i]]["prompt"], facts["texts"][i])
        if closing is not None:
            details["template's tokens after the last message"] = f"{closing[0]!r} ({closing[1]} tokens)"
        if opening is not None:
            details["template's tokens before the first message"] = f"{opening[0]!r} ({opening[1]} tokens)"
        if closing is not None and limit < closing[1]:
            out.append(fail(
                f"max_prompt_length {limit} is shorter than the {closing[1]} tokens the chat template writes after the last "
                f"message ({closing[0]!r}, the generation prompt included): TRL keeps the last {limit} tokens, so "
                f"{_share(len(cut), len(lengths))} truncated prompts lose the generation prompt and all of the conversation; "
                f"set max_prompt_length to at least {closing[1]} (the longest prompt is {facts['max']} tokens)"
            ))
            return out, details
        strips = strips_truncated_prompts(ctx.trainer)
        if strips is not None and config_value(ctx, "use_vllm", False):
            details["trainer behaviour"] = strips
            out.append(fail(
                f"trl {trl} decodes truncated prompts with skip_special_tokens=True before sending them to vLLM (trl#3644): "
                f"the {len(cut)} prompts longer than max_prompt_length {limit} lose every chat-template token, the generation "
                "prompt included; upgrade trl (fixed in 0.19.1) or drop the prompts longer than max_prompt_length"
            ))
            return out, details
    share = len(cut) / len(lengths)
    if share > TRUNCATION_WARN:
        opening = details.get("template's tokens before the first message")
        what = (f"the start of each is cut: the chat template's opening tokens{f' {opening}' if opening else ''}, "
                "the system prompt and the first messages" if conversational else "the start of each is cut")
        fits = facts["max"] + completion <= positions if positions else True
        fix = (f"set max_prompt_length: {facts['max']} (the longest prompt; {facts['max']} + {completion} fits "
               f"max_position_embeddings {positions})" if fits else f"drop the prompts longer than {limit} tokens")
        out.append(warn(
            f"max_prompt_length {limit} truncates {_share(len(cut), len(lengths))} of the measured prompts (longest "
            f"{facts['max']} tokens, p99 {facts['p99']}): TRL keeps their last {limit} tokens, so {what}; {fix}"
        ))
    return out, details


def _vllm(ctx, s, need, positions, rows, effective, completion, completion_key, eff_longest) -> tuple[list[Finding], dict[str, Any]]:
    details: dict[str, Any] = {}
    mode_known = "vllm_mode" in s.fields
    mode = config_value(ctx, "vllm_mode") if mode_known else ("server" if trainer_mentions(ctx.trainer, "vllm_client") else "in-process")
    details["vLLM mode"] = mode
    if mode == "server":
        details["vLLM context"] = (f"the server's --max-model-len (default: the model's {positions}); start "
                                   f"`trl vllm-serve` with --max-model-len {need} or more")
        return [], details
    field = next((f for f in ("vllm_max_model_length", "vllm_max_model_len")
                  if f in s.fields and vllm_code_mentions(ctx.trainer, f)), None)
    value = config_value(ctx, field) if field else None
    if not value:
        details["vLLM context"] = f"{positions} (no {field or 'max_model_len setting'}: vLLM takes the model's)"
        return [], details
    details["vLLM context"] = f"{field} {value}"
    config = ctx.config
    if positions is not None and value > positions:
        fix = Fix(f"set {field}: {positions} (the model's max_position_embeddings) in {config.path.name}",
                  (Edit(str(config.path), set=((field, positions),)),)) if need <= positions else None
        return [fail(
            f"{field} {value} is larger than the model's max_position_embeddings {positions}: vLLM refuses to start "
            f"('User-specified max_model_len ({value}) is greater than the derived max_model_len'); set {field}: {positions}",
            fix,
        )], details
    if need <= value:
        return [], details
    over = [r for r, n in zip(rows, effective) if n + completion > value]
    too_long = [r for r, n in zip(rows, effective) if n > value]
    details["prompts that do not fit vLLM"] = _rows(over, len(effective))
    fix = None
    if positions is None or need <= positions:
        fix = Fix(f"set {field}: {need} (the longest prompt {eff_longest} + {completion_key} {completion}) in "
                  f"{config.path.name}", (Edit(str(config.path), set=((field, need),)),))
    effect = (f"{len(too_long)} of them are longer than {value} on their own and vLLM rejects them ('The decoder prompt "
              f"(length {eff_longest}) is longer than the maximum model length of {value}')" if too_long else
              "their completions are cut at vLLM's limit, short of " + f"{completion_key} {completion}")
    return [fail(
        f"vLLM's context ({field} {value}) is shorter than the longest prompt + {completion_key} = {eff_longest} + "
        f"{completion} = {need}: {_share(len(over), len(effective))} of the measured prompts do not fit, and {effect}; "
        f"set {field}: {need}" + ("" if fix else f" (above the model's max_position_embeddings {positions}: shorten "
                                                  f"{completion_key} or the prompts instead)"),
        fix,
    )], details


def _template_edges(tok, prompt, text):
    """(text, tokens) the chat template writes before the first message's content and after the last one's."""
    if not isinstance(prompt, list) or not text:
        return None, None
    first, last = prompt[0].get("content"), prompt[-1].get("content")
    opening = closing = None
    if isinstance(first, str) and first and first in text:
        head = text[:text.index(first)]
        opening = (head, len(tok(head, add_special_tokens=False)["input_ids"]))
    if isinstance(last, str) and last and last in text:
        tail = text[text.rindex(last) + len(last):]
        closing = (tail, len(tok(tail, add_special_tokens=False)["input_ids"]))
    return opening, closing


def _rendering(facts, how) -> str:
    kinds = set(k for k, n in zip(facts["formats"], facts["lengths"]) if n is not None)
    parts = []
    if "conversational" in kinds:
        parts.append(f"conversational prompts through the chat template ({how.chat}), no extra special tokens")
    if "standard" in kinds:
        parts.append("plain-text prompts tokenized " + ("with" if how.plain_special_tokens else "without")
                     + f" special tokens ({how.evidence})")
    return "; ".join(parts)


def _rows(rows: list[int], measured: int) -> str:
    if not rows:
        return "none"
    shown = ", ".join(str(r) for r in rows[:10]) + (", ..." if len(rows) > 10 else "")
    return f"{_share(len(rows), measured)} (rows {shown})"


def _share(n: int, measured: int) -> str:
    return f"{n} of {measured} ({100 * n / measured:.1f}%)" if measured else str(n)


def _after_cut(limit, longest) -> str:
    return f" after truncation to max_prompt_length {limit} (untruncated {longest})" if limit and longest > limit else ""
