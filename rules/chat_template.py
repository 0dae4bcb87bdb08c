"""TD012 chat-template: the template renders the prompts and opens the assistant's turn, after one BOS.

What it does
    Renders and tokenizes up to 1000 prompts as the trainer does (`maybe_apply_chat_template` up to
    TRL 0.24, `apply_chat_template(add_generation_prompt=True)` from 0.25), in the worker's fence:
    conversational rows need a template that renders them and opens the assistant's turn, and, where
    the tokenizer adds a BOS, one BOS in each prompt's ids as the trainer (and vLLM) get them.

Why is this bad?
    Each step renders prompts, after the model and vLLM loaded:
    - no template: "ValueError: Cannot use apply_chat_template() because tokenizer.chat_template is
      not set" (open-r1#85; transformers 5: "Cannot use chat template functions ..."; no class
      defaults from 4.43, transformers#33246);
    - a template that raises: Mistral's and Gemma's first ones on a system message ("Conversation
      roles must alternate user/assistant/user/assistant/..."), TRL 0.14-0.24 on a last message not
      from the user ("Invalid role in the last message");
    - BOS: chat prompts are tokenized without special tokens, so a template without
      `{{ bos_token }}` drops the BOS Llama, Mistral and Gemma were trained with; TRL up to 0.25
      also tokenizes plain prompts without it (Gemma: garbage, trl#3520), 0.26+ with it
      (pre-rendered `<|begin_of_text|>` gets two); up to 0.24 vLLM got rendered text, two BOS for
      Llama 3 (trl#3853).

Example
    dataset_path: chat.jsonl            # role/content messages; gpt2-nopad has no chat_template
    -> fail: 16 of the 16 measured prompts are conversational ... but the tokenizer ... has no chat
       template: ... the first step fails with ValueError: Cannot use chat template functions ...

Fix safety
    No fix; the message names the change: the instruct sibling's template, the role rejected,
    `{{ bos_token }}` first, the BOS to strip or prepend.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trl_doctor import Finding, fail, passed, rule, skip, warn
from trl_doctor.facts.trl.subclass import own_data_path

from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.inputs.chat import _MARK, prompt_lengths, prompt_rendering, render_template, special_ids


@rule(
    id="TD012",
    slug="chat-template",
    title="The chat template renders the prompts, opens the assistant's turn and gives one BOS",
    needs=("dataset", "tokenizer"),  # no dataset named: skip before loading the tokenizer
    static_skip="it tokenizes every prompt through the template",
)
def check(ctx):
    own = own_data_path(ctx)
    if own:  # a framework's trainer reads its rows its own way
        yield skip(f"{own}; the prompts are that code's to render, not judged by TRL's contract")
        return
    facts = prompt_lengths(ctx)
    if not facts["column"]:
        yield skip("the dataset has no `prompt` column to render (see dataset-schema)")
        return
    tok = ctx.tokenizer
    how = prompt_rendering(ctx)
    formats = facts["formats"]
    conv = [i for i, k in enumerate(formats) if k == "conversational"]
    plain = [i for i, k in enumerate(formats) if k == "standard"]
    details = {
        "tokenizer": str(ctx.config.tokenizer.path),
        "chat template": _template_source(ctx, tok),
        "prompts measured": facts["measured"],
        "conversational prompts": len(conv),
        "plain-text prompts": len(plain),
    }
    if conv:
        details["chat prompts rendered with"] = how.chat + (f", chat_template_kwargs {how.template_kwargs}"
                                                               if how.template_kwargs else "")
    if plain:
        details["plain prompts tokenized"] = ("with" if how.plain_special_tokens else "without") + \
            f" special tokens: {how.evidence}"
    if not conv and not plain:
        yield skip("no row has a text or message-list prompt to render (see dataset-schema)", **details)
        return

    if conv and not getattr(tok, "chat_template", None):
        error = facts["errors"].get(facts["indices"][conv[0]]) or "no chat template"
        yield fail(
            f"{len(conv)} of the {len(formats)} measured prompts are conversational (lists of role/content messages) but the "
            f"tokenizer at {ctx.config.tokenizer.path} has no chat template: TRL renders every prompt with it "
            f"(add_generation_prompt=True), so the first step fails with {_first_sentence(error)}; copy the chat template "
            "of the model's instruct sibling into its tokenizer (chat_template.jinja), or turn the prompts into plain text",
            **details,
        )
        return

    findings = []
    failed = [i for i in conv if facts["indices"][i] in facts["errors"]]
    if failed:
        first = facts["indices"][failed[0]]
        prompt = ctx.dataset[first]["prompt"]
        roles = [m.get("role") for m in prompt]
        details["first failing row"] = {"row": first, "roles": roles, "error": facts["errors"][first]}
        findings.append(fail(
            f"the chat template raises on {len(failed)} of the {len(conv)} conversational prompts measured: row {first} "
            f"(roles {roles}) gives {facts['errors'][first]}; TRL renders every batch with it, so training stops at the "
            f"first batch holding such a row. {_raise_hint(roles, facts['errors'][first])}",
            **details,
        ))
    rendered = [i for i in conv if facts["texts"][i] is not None]
    parts = [_generation_prompt(ctx, tok, how, facts, rendered[0])] if rendered else []
    parts.append(_bos(ctx, tok, how, facts, conv, plain))
    for found, its_details in parts:
        # a part's finding carries the check's details and the part's own found so far
        findings += [replace(f, details={**details, **f.details}) for f in found]
        details.update(its_details)

    for finding in findings:
        yield finding
    if not any(f.status.value in ("fail", "warn") for f in findings):
        parts = []
        if rendered:
            parts.append(f"the chat template renders all {len(rendered)} conversational prompts measured and opens the "
                         "assistant's turn")
        if plain:
            parts.append(f"{len(plain)} plain-text prompts are used as they are")
        if tok.bos_token_id is not None and "prepends it" in details.get("BOS", ""):
            parts.append(f"each starts with one BOS {tok.bos_token!r} (id {tok.bos_token_id}), which the tokenizer prepends "
                         "to text")
        yield passed("; ".join(parts), **details)


def _first_sentence(error: str) -> str:
    return error.split("!")[0].split(". ")[0]


def _template_source(ctx, tok) -> str:
    path = ctx.config.tokenizer.path
    for name in ("chat_template.jinja", "chat_template.json"):
        if (path / name).is_file():
            return str(path / name)
    if getattr(tok, "chat_template", None):
        return f"{path / 'tokenizer_config.json'} (chat_template)"
    return "none"


def _raise_hint(roles, error: str) -> str:
    if "Invalid role in the last message" in error:
        return ("This TRL renders a prompt with the generation prompt only when its last message is the user's "
                "(or the assistant's, continued): end every prompt with a user message")
    if "system" in roles and ("system" in error.lower() or "alternate" in error.lower() or "roles" in error.lower()):
        return ("The template does not accept a system message: merge the system text into the first user message, or "
                "use a template that supports the system role")
    return "Make the rows match what the template accepts, or fix the template"


def _generation_prompt(ctx, tok, how, facts, i) -> tuple[list[Finding], dict[str, Any]]:
    """The rendered prompt must reach up to the assistant's content: what the template writes between the prompt and
    an assistant message appended to the same conversation may hold no special token."""
    details: dict[str, Any] = {}
    prompt = ctx.dataset[facts["indices"][i]]["prompt"]
    text = facts["texts"][i]
    if prompt[-1].get("role") == "assistant":
        return [], details  # TRL continues a final assistant message instead of opening a new turn
    try:
        full = render_template(tok, list(prompt) + [{"role": "assistant", "content": _MARK}], "rendering a prompt with a "
                               "reply", tokenize=False, **how.template_kwargs)
    except Exception as exc:  # a template that cannot render an answer says nothing about the prompt
        details["generation prompt check"] = f"not run: the template cannot render an assistant reply ({type(exc).__name__})"
        return [], details
    if _MARK not in full or not full.split(_MARK, 1)[0].startswith(text):
        details["generation prompt check"] = "not run: the template renders the conversation differently with a reply"
        return [], details
    gap = full.split(_MARK, 1)[0][len(text):]
    specials = special_ids(tok)
    gap_ids = tok(gap, add_special_tokens=False)["input_ids"] if gap else []
    marks = [tok.convert_ids_to_tokens(t) for t in gap_ids if t in specials]
    details["rendered prompt (row %d)" % facts["indices"][i]] = _short(text)
    if not marks:
        details["generation prompt"] = "the prompt ends where the assistant's content starts"
        return [], details
    try:
        without = render_template(tok, list(prompt), "rendering a prompt without the generation prompt", tokenize=False,
                                  add_generation_prompt=False, **how.template_kwargs)
    except Exception:
        without = None
    ignored = (" (the template gives the same text with add_generation_prompt=False: it ignores the flag)"
               if without == text else "")
    details["missing before the assistant's content"] = repr(gap)
    return [warn(
        f"the rendered prompt does not open the assistant's turn: the template writes {gap!r} (special tokens {marks}) "
        f"before an assistant's reply, but the prompt TRL renders with add_generation_prompt=True ends before it{ignored}; "
        "the model has to write the assistant header itself and every completion carries it. Add an "
        "`{% if add_generation_prompt %}` block that writes it to the chat template",
        **details,
    )], details


def _bos(ctx, tok, how, facts, conv, plain) -> tuple[list[Finding], dict[str, Any]]:
    details: dict[str, Any] = {}
    bos = tok.bos_token_id
    if bos is None:
        return [], details
    expects = tok("a", add_special_tokens=True)["input_ids"][:1] == [bos]
    name = tok.bos_token
    details["BOS"] = (f"{name!r} (id {bos}); the tokenizer " + ("prepends it to text it encodes, so the model expects it"
                                                                 if expects else "does not prepend it"))
    heads, rows = facts["heads"], facts["indices"]
    out = []
    for group, label in ((conv, "conversational"), (plain, "plain-text")):
        done = [i for i in group if heads[i]]
        if not done:
            continue
        double = [i for i in done if heads[i][:2] == [bos, bos]]
        missing = [i for i in done if expects and heads[i][0] != bos]
        if double:
            i = double[0]
            details[f"{label} prompt with two BOS (row {rows[i]})"] = _short(facts["texts"][i])
            if label == "plain-text":
                why = (f"the prompt text already starts with {name!r} (rendered chat text?) and the trainer tokenizes plain "
                       f"prompts with special tokens ({how.evidence}), which prepends another; strip {name!r} from the "
                       "start of the prompts, or store them as message lists")
            else:
                why = (f"the rendered prompt holds {name!r} twice at its start; remove the duplicate from the template "
                       "or from the messages")
            out.append(warn(f"{len(double)} of {len(done)} {label} prompts start with a duplicated BOS {name!r}: {why}",
                            **details))
        elif missing:
            i = missing[0]
            details[f"{label} prompt without BOS (row {rows[i]})"] = _short(facts["texts"][i])
            if label == "plain-text":
                why = (f"the trainer tokenizes plain prompts without special tokens ({how.evidence}; trl#3520): prepend "
                       f"{name!r} to the prompts, use message lists, or upgrade trl (0.26 and later tokenize plain prompts "
                       "with special tokens)")
            else:
                why = (f"the chat template writes no {name!r} and TRL tokenizes the rendered prompt without special tokens: "
                       "add `{{ bos_token }}` at the start of the chat template")
            out.append(warn(f"{len(missing)} of {len(done)} {label} prompts reach the model without the BOS {name!r} "
                            f"its tokenizer prepends to text (id {bos}): {why}", **details))
    if conv and how.vllm_gets_text and config_value(ctx, "use_vllm", False):
        texts = [facts["texts"][i] for i in conv if facts["texts"][i] is not None]
        if texts:
            ids = tok(texts, add_special_tokens=True)["input_ids"]
            double = sum(1 for x in ids if x[:2] == [bos, bos])
            if double:
                details["vLLM prompts"] = (f"trl {ctx.version('trl')} sends the rendered chat text to vLLM, which tokenizes "
                                           "it with add_special_tokens=True")
                out.append(warn(
                    f"{double} of {len(texts)} conversational prompts reach vLLM with two BOS {name!r}: trl "
                    f"{ctx.version('trl')} sends vLLM the rendered text, which already starts with {name!r}, and vLLM "
                    "prepends another (trl#3853: rewards drop against generation without vLLM); upgrade trl (0.25 and "
                    "later give vLLM the messages or the token ids)",
                    **details,
                ))
    return out, details


def _short(text: str | None, limit: int = 200) -> str:
    text = text or ""
    return repr(text if len(text) <= limit else text[:limit] + "...")
