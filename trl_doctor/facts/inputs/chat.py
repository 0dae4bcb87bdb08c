"""Chat-template facts several rules need: whether the dataset is conversational, which token ends an
assistant turn in the template the tokenizer will render, and the dataset's prompts rendered and tokenized
the way the installed trainer does (measured once per check: `prompt_rendering` and `prompt_lengths` are facts
of the context).

The template is the user's code (Jinja): every render runs in the worker's fence (`render_template`, and one fence
around `prompt_lengths`' renders), and a template that ended an earlier worker is not rendered again: its renders
raise UserCodeFailed, which the rules report as they report a template that raises."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, cast

from trl_doctor.runtime import fence as _fence
from trl_doctor.cache import fact

_MARK = "TRLDOCTORMARK"
# why a token is the completion's terminator, in the words every finding about it uses (--static's too)
TURN_END = "the chat template's end of the assistant turn"


def eos_why(conversational: bool) -> str:
    """Why the tokenizer's eos is the terminator: the template ends no turn with a special token, or no template."""
    return "the tokenizer's eos (" + (
        "the template puts no special token after a turn" if conversational else "plain-text prompts") + ")"


def is_conversational(row: dict[str, Any], column: str = "prompt") -> bool:
    value = row.get(column)
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]


def special_ids(tok) -> set[int]:
    ids = set(tok.all_special_ids)
    for token_id, added in getattr(tok, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            ids.add(int(token_id))
    return ids


def template_fence(tok, doing: str):
    """The fence around renders of `tok`'s chat template; raises UserCodeFailed when it ended an earlier worker."""
    _fence.check_failed(_template_key(tok))
    return _fence.user_code(f"the chat template in {_template_file(tok)} ({doing})", key=_template_key(tok))


def _template_key(tok) -> str:
    return f"chat-template:{getattr(tok, 'name_or_path', '')}"


def _template_file(tok) -> str:
    folder = Path(str(getattr(tok, "name_or_path", "") or "."))
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            return str(folder / name)
    return str(folder)


def render_template(tok, conversation: list, doing: str, **kwargs) -> Any:
    """`tok.apply_chat_template(conversation, **kwargs)` in the fence (may raise, UserCodeFailed included)."""
    with template_fence(tok, doing):
        return tok.apply_chat_template(conversation, **kwargs)


def turn_terminator(tok) -> dict[str, Any] | None:
    """The first special token the template puts after an assistant message's content, e.g. <|im_end|>,
    <|eot_id|>: the token a model trained on this template emits to end its turn. None without a template."""
    if not getattr(tok, "chat_template", None):
        return None
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}]
    try:
        text = render_template(tok, conversation, "rendering a test conversation", tokenize=False)
    except _fence.UserCodeFailed:
        raise
    except Exception as exc:  # a template that cannot render is the chat-template rule's finding
        return {"error": f"{type(exc).__name__}: {exc}"}
    if _MARK not in text:
        return {"error": "the template does not render the assistant's content"}
    after = text.split(_MARK, 1)[1]
    specials = special_ids(tok)
    for token_id in tok(after, add_special_tokens=False)["input_ids"]:
        if token_id in specials:
            return {"token": tok.convert_ids_to_tokens(token_id), "id": int(token_id), "text_after_content": after}
    return {"token": None, "id": None, "text_after_content": after}


def completion_terminator(tok, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The token a completion should end with: the template's turn terminator for conversational prompts,
    else the tokenizer's eos. {"id", "token", "why", "conversational", "template_error"}. Raises Unavailable for
    conversational prompts when the template ended (or overran) an earlier worker: every rule that renders them (the
    trainer run's too) is skipped, and the rule that ran it reported why."""
    conversational = bool(rows) and is_conversational(rows[0])
    out = {"conversational": conversational, "template_error": None}
    if conversational:
        try:
            term = turn_terminator(tok)
        except _fence.UserCodeFailed as exc:
            from trl_doctor.errors import Unavailable

            raise Unavailable(f"the prompts are rendered with the chat template, and {exc}") from None
        if term and term.get("error"):
            out["template_error"] = term["error"]
        elif term and term.get("id") is not None:
            return {**out, "id": term["id"], "token": term["token"], "why": TURN_END}
    return {**out, "id": tok.eos_token_id, "token": tok.eos_token,
            "why": eos_why(conversational)}


def terminator(ctx) -> dict[str, Any]:
    """completion_terminator for the check's tokenizer and its dataset's first rows, in either preflight context:
    the loaded tokenizer (full), or under --static the template rendered from the files in Jinja2's sandbox
    (trl_doctor.static.StaticContext.turn_terminator) and the first rows of a local dataset file."""
    if ctx.kind == "static":
        return _terminator_from_files(ctx)
    from trl_doctor.errors import Unavailable

    try:
        rows = ctx.dataset.select(range(min(2, len(ctx.dataset)))).to_list()
    except Unavailable:
        rows = []
    return completion_terminator(ctx.tokenizer, rows)


def _terminator_from_files(ctx) -> dict[str, Any]:
    from trl_doctor.errors import Unavailable

    tok, data = ctx.token_ids(), ctx.dataset_file
    if data.unread and tok.chat_template[0] is not None:
        raise Unavailable(f"whether prompts go through the chat template depends on the dataset ({data.unread})")
    conversational = bool(data.rows) and is_conversational(data.rows[0])
    out = {"conversational": conversational, "template_error": None}
    if conversational:
        found = ctx.turn_terminator()
        if found and found.get("error"):
            out["template_error"] = found["error"]
        elif found and found.get("id") is not None:
            return {**out, "id": found["id"], "token": found["token"], "why": TURN_END}
    eos = tok.token("eos_token")
    return {**out, "id": tok.id_of(eos), "token": eos, "why": eos_why(conversational)}


# -- prompts as the installed trainer renders and tokenizes them ---------------------------------------------------

SAMPLE_ROWS = 1000  # prompt lengths are measured on at most this many rows, evenly spaced over the dataset
CHAR_BUDGET = 400_000  # characters tokenized at most (0.1-0.3 s); beyond it the other rows' lengths are estimated
LONGEST_EXACT = 100  # rows always tokenized when over the budget: the longest by characters (the maximum stays exact)
HEAD_CHARS = 200  # prefix tokenized for the first ids (the BOS checks) of estimated rows

def sample_indices(total: int, limit: int = SAMPLE_ROWS) -> list[int]:
    """Up to `limit` row indices spread evenly over `total` rows (all of them when there are few)."""
    if total <= limit:
        return list(range(total))
    step = total / limit
    return sorted({int(i * step) for i in range(limit)})


def measured_label(total: int, measured: int) -> str:
    return f"all {total} rows" if measured == total else f"{measured} rows evenly spaced over {total}"


def prompt_format(value: Any) -> str:
    """'standard' (text), 'conversational' (role/content messages), 'empty', 'missing' (null) or 'malformed'."""
    if value is None:
        return "missing"
    if isinstance(value, str):
        return "standard" if value else "empty"
    if isinstance(value, list):
        if not value:
            return "empty"
        if all(isinstance(m, dict) and isinstance(m.get("role"), str)
               and (m.get("content") is not None or m.get("tool_calls")) for m in value):
            return "conversational"
    return "malformed"




@dataclass(frozen=True)
class PromptRendering:
    """How the check's prompts become token ids in the installed trainer (`trl.prompt_tokenization`), with the
    config's chat_template_kwargs where the trainer hands them to the template."""

    chat: str  # how conversational prompts are rendered, in words
    maybe_apply: bool  # TRL's maybe_apply_chat_template (the generation prompt by the last message's role)
    plain_special_tokens: bool  # plain-text prompts are tokenized with special tokens
    evidence: str  # where the plain-prompt call is, or what was assumed
    vllm_gets_text: bool  # vLLM gets the rendered text and tokenizes it again
    template_kwargs: Mapping[str, Any]  # the chat_template_kwargs the template gets


@fact
def prompt_rendering(ctx) -> PromptRendering:
    """How the installed trainer turns the config's dataset prompts into token ids, once per check."""

    from trl_doctor.facts.launch.settings import as_mapping
    from trl_doctor.facts.trl.installed import prompt_tokenization

    how = prompt_tokenization(ctx.trainer)
    kwargs = as_mapping(ctx.config.get("chat_template_kwargs"))
    chat = ("maybe_apply_chat_template (add_generation_prompt when the last message is the user's)"
            if how.maybe_apply else "apply_chat_template(add_generation_prompt=True)")
    return PromptRendering(chat, how.maybe_apply, how.plain_special_tokens, how.evidence, how.vllm_gets_text,
                           kwargs if how.takes_template_kwargs else {})


def render_prompt(tok, prompt: Any, how: PromptRendering) -> str:
    """One conversational prompt rendered to text as the installed trainer renders it (may raise), inside a
    `template_fence` the caller holds."""
    _fence.check_failed(_template_key(tok))
    if how.maybe_apply:
        from trl.data_utils import maybe_apply_chat_template

        return maybe_apply_chat_template({"prompt": prompt}, tok)["prompt"]
    return tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **how.template_kwargs)


def _exact_rows(texts: list[str | None]) -> set[int]:
    """Rows to tokenize: all of them within CHAR_BUDGET; else the LONGEST_EXACT longest by characters and evenly
    spaced others up to the budget."""
    present = [i for i, t in enumerate(texts) if t is not None]
    text = cast("list[str]", texts)  # read at the present rows only
    if sum(len(text[i]) for i in present) <= CHAR_BUDGET:
        return set(present)
    longest = sorted(present, key=lambda i: -len(text[i]))[:LONGEST_EXACT]
    keep, used = set(longest), sum(len(text[i]) for i in longest)
    rest = [i for i in present if i not in keep]
    room = max(0, CHAR_BUDGET - used) * len(rest) // max(1, sum(len(text[i]) for i in rest))
    keep.update(rest[j] for j in sample_indices(len(rest), room))
    return keep


def _render_rows(tok, how: PromptRendering, indices: list[int], prompts: list, texts: list, formats: list,
                 errors: dict) -> None:
    """Each prompt's format and text (conversational ones rendered); a row whose rendering raises gets its error."""
    for row, prompt in zip(indices, prompts):
        kind = prompt_format(prompt)
        formats.append(kind)
        text = None
        if kind == "conversational":
            try:
                text = render_prompt(tok, prompt, how)
            except _fence.UserCodeFailed as exc:
                errors[row] = str(exc)
            except Exception as exc:  # a template that raises is the chat-template rule's finding
                errors[row] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        elif kind == "standard":
            text = prompt
        texts.append(text)


def _add_image_tokens(ctx, indices: list[int], lengths: list, out: dict) -> None:
    """A vision-language model's prompt holds each image as one placeholder the processor expands to the image's
    tokens (Qwen2-VL: one per 28x28 pixels): the expansion is added to each measured row's length. out["images"]
    says how they were counted, or why they could not be (the lengths are then the text's alone)."""
    from trl_doctor.context.twin import vision_language
    from trl_doctor.facts.inputs.vision import image_columns, image_counter, image_sizes

    if vision_language(ctx.model_config) is None:
        return
    columns = image_columns(ctx.dataset)
    if not columns:
        return
    count, why = image_counter(ctx)
    if count is None:
        out["images"] = {"counted": False, "why": why, "column": columns[0]}
        return
    try:
        sizes = image_sizes(ctx.dataset, columns[0], indices)
    except ImportError:
        out["images"] = {"counted": False, "why": "reading the images' sizes needs Pillow, not installed here",
                         "column": columns[0]}
        return
    except (ValueError, OSError) as exc:  # an image that cannot be read: its tokens are unknown, said so
        out["images"] = {"counted": False, "why": f"an image could not be read: {exc}", "column": columns[0]}
        return
    per_row = [sum(count(h, w) for h, w in row) for row in sizes]
    added = [n - len(row) for n, row in zip(per_row, sizes)]  # each image's placeholder is already one token
    for i, extra in enumerate(added):
        if lengths[i] is not None:
            lengths[i] += extra
    out["images"] = {"counted": True, "column": columns[0], "images": sum(len(r) for r in sizes),
                     "tokens": sum(per_row), "max_per_row": max(per_row, default=0)}


@fact
def prompt_lengths(ctx) -> dict[str, Any]:
    """The dataset's prompts rendered and tokenized as the installed trainer does, on up to SAMPLE_ROWS rows spread
    over the dataset, measured once per run and shared (context-length, chat-template, logits-contract).

    {"total", "indices", "formats", "texts", "lengths", "heads" (first 2 ids), "errors" {row: message},
     "max", "p99", "longest_row", "measured", "column"}; "column" False when there is no `prompt` column; "not_run":
    why the chat template was not run here (it ended or overran an earlier worker of the check, whose rule said so)."""
    ds = ctx.dataset
    tok = ctx.tokenizer
    total = len(ds)
    out: dict[str, Any] = {"total": total, "column": "prompt" in ds.column_names, "indices": [], "formats": [],
                           "texts": [], "lengths": [], "heads": [], "errors": {}, "max": None, "p99": None,
                           "longest_row": None, "measured": measured_label(total, 0)}
    if not out["column"] or not total:
        return out
    how = prompt_rendering(ctx)
    indices = sample_indices(total)
    prompts = ds.select_columns(["prompt"])[indices]["prompt"]  # one batched read (iterating a Column is per row)
    texts: list[str | None] = []
    formats: list[str] = []
    try:
        fence = template_fence(tok, f"rendering {len(indices)} dataset prompts")
    except _fence.UserCodeFailed as exc:  # each render raises it: the rows' errors say why, "not_run" says it once
        fence = contextlib.nullcontext()
        out["not_run"] = str(exc)
    with fence:
        _render_rows(tok, how, indices, prompts, texts, formats, out["errors"])
    lengths: list[int | None] = [None] * len(texts)
    heads: list[list[int]] = [[] for _ in texts]
    exact = _exact_rows(texts)
    for chat, special in ((True, False), (False, how.plain_special_tokens)):
        group = [i for i, t in enumerate(texts) if t is not None and (formats[i] == "conversational") == chat]
        pick = [i for i in group if i in exact]
        if pick:
            encoded = tok([texts[i] for i in pick], add_special_tokens=special)["input_ids"]
            for i, ids in zip(pick, encoded):
                lengths[i], heads[i] = len(ids), list(ids[:2])
        rest = [i for i in group if i not in exact]
        if rest:  # over the budget: tokens from characters at the ratio of the tokenized rows, first ids from a prefix
            text = cast("list[str]", texts)  # the group's rows have text; `pick`'s have lengths
            ratio = sum(cast(int, lengths[i]) for i in pick) / max(1, sum(len(text[i]) for i in pick))
            encoded = tok([text[i][:HEAD_CHARS] for i in rest], add_special_tokens=special)["input_ids"]
            for i, ids in zip(rest, encoded):
                lengths[i], heads[i] = max(len(ids), round(len(text[i]) * ratio)), list(ids[:2])
            out["estimated"] = out.get("estimated", 0) + len(rest)
    _add_image_tokens(ctx, indices, lengths, out)
    label = measured_label(total, len(indices))
    if out.get("estimated"):
        label += (f"; {len(indices) - out['estimated']} tokenized (the {LONGEST_EXACT} longest by characters among them), "
                  f"the other {out['estimated']} estimated from their characters to stay within {CHAR_BUDGET} characters")
    out.update(indices=indices, formats=formats, texts=texts, lengths=lengths, heads=heads, measured=label)
    known = sorted(n for n in lengths if n is not None)
    if known:
        out["max"] = known[-1]
        out["p99"] = known[max(0, -(-99 * len(known) // 100) - 1)]
        out["longest_row"] = indices[lengths.index(known[-1])]
    return out
