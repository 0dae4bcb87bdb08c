"""TD001 pad-token: the tokenizer needs a pad token the trainer, the model files and vLLM agree on.

What it does
    Compares the pad token of the tokenizer the trainer holds (with `added_tokens`) with the eos,
    the embedding rows (`vocab_size`) and `pad_token_id` in config.json and generation_config.json
    (the latter only where the installed trainer passes no pad id to `generate`). Whether the
    trainer sets pad = eos is read from its source. Any other trainer a script builds (OnlineDPO,
    SFT, its own Trainer): whether the collator it was given pads with a pad-less tokenizer.

Why is this bad?
    GPT-2's and the Llama 3 tokenizers ship without a pad token. GRPOTrainer before TRL 0.17 crashes
    at the first batch ("ValueError: Asking to pad but the tokenizer does not have a padding
    token"); from TRL 0.17 on (PR #3290) it silently sets `pad_token = eos_token`. A pad id outside
    the embedding crashes the first forward ("index out of range in self"; a device-side assert on
    GPU). A pad id in the model files that differs from the tokenizer's makes generation pad with
    another token than the trainer masks, where the trainer leaves it to generate (PPO; GRPO, trl
    0.14 to 1.x, passes its own). pad = eos is harmless for GRPO and RLOO (the mask ends at the
    first eos, inclusive), not for PPO, whose value and reward forwards mask every pad id: the final
    eos is masked out and stopping is never rewarded. TRL 0.15-0.17's OnlineDPO stops as GRPO did.

Example
    model_name_or_path: gpt2-nopad      # tokenizer_config.json has no pad_token
    -> warn: the tokenizer has no pad token; GRPOTrainer in trl 1.16.0 will silently set
       pad_token = eos_token '<|endoftext|>' (id 0).

Fix safety
    Safe: picks a pad token the vocabulary already has (`<pad>`, `<|pad|>`, `[PAD]`, `<|padding|>`,
    `<|finetune_right_pad_id|>`, `<|endoftext|>` when it is not the eos), else the eos, never
    growing the vocabulary; writes `pad_token` to tokenizer_config.json and special_tokens_map.json,
    `pad_token_id` to config.json and generation_config.json. Manual for the Hugging Face cache.
"""

from __future__ import annotations

from trl_doctor import ALL_TRAINERS, Edit, fail, Fix, manual, passed, rule, Unavailable, warn

from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.inputs.models import config_json, generation_json
from trl_doctor.facts.inputs.tokens import as_id_list, embedding_rows, specials
from trl_doctor.facts.trl.behaviour import passes_pad_to_generate, sets_pad_to_eos, trl_words, zeroes_pad_ids
from trl_doctor.facts.trl.installed import TRAINER_CLASS

PAD_CANDIDATES = ("<pad>", "<|pad|>", "[PAD]", "<|padding|>", "<|finetune_right_pad_id|>", "<|endoftext|>")

# -- the words both judgments say ---------------------------------------------------------------------------

NEITHER = "the tokenizer has neither a pad token nor an eos token; batches cannot be padded"


def _details(*, tokenizer, pad, pad_id, eos, eos_id, rows, config_pad, generation_json, trl) -> dict:
    """The details every pad-token finding carries (`generation_json`: generation_config.json, or None without one)."""
    return {"tokenizer": tokenizer, "pad_token": pad, "pad_token_id": pad_id, "eos_token": eos, "eos_token_id": eos_id,
            "vocab_size (embedding rows)": rows, "config.json pad_token_id": config_pad,
            "generation_config.json pad_token_id": None if generation_json is None else generation_json.get("pad_token_id"),
            "trl": trl}


def _set_to_eos(trainer: str, trainer_cls: str, trl: str, eos, eos_id) -> str:
    """No pad token, and the trainer sets pad = eos itself (PPO: with the harm that does to its masks)."""
    harm = (" PPO then masks that eos out of the value and reward forwards, so the model is never rewarded for stopping."
            if trainer == "ppo" else "")
    return (f"the tokenizer has no pad token; {trainer_cls} in trl {trl} will silently set pad_token = eos_token "
            f"{eos!r} (id {eos_id}).{harm}")


def _never_set(trainer_cls: str, trl: str) -> str:
    return (f"the tokenizer has no pad token and {trainer_cls} in trl {trl} does not set one: the first batch fails with "
            "'Asking to pad but the tokenizer does not have a padding token'")


def _outside_rows(pad, pad_id, rows) -> str:
    return (f"pad token {pad!r} has id {pad_id}, outside the model's {rows} embedding rows (config.json vocab_size): "
            "the first forward pass indexes past the embedding matrix")


def _files_disagree(pad, pad_id, disagree: dict) -> str:
    """`disagree`: file name -> the pad_token_id it says."""
    listed = ", ".join(f"{name} says {value}" for name, value in disagree.items())
    return f"pad_token_id disagrees between files: the tokenizer's pad {pad!r} is id {pad_id} but {listed}"


def _ppo_stop(pad, pad_id) -> str:
    return (f"pad token {pad!r} is also PPO's stop token (id {pad_id}): PPO masks pad ids out of the value and reward "
            "forwards, so the final eos is masked and the model is never rewarded for stopping")


def _healthy(pad, pad_id, rows) -> str:
    within = f"and within the {rows} embedding rows" if rows is not None else "(config.json names no vocab_size)"
    return f"pad token {pad!r} (id {pad_id}) is set {within}"


@rule(
    id="TD001",
    slug="pad-token",
    title="Tokenizer has a pad token the trainer and model files agree on",
    needs=("tokenizer", "model_config"),
    trainers=ALL_TRAINERS,
    fixable="sometimes",
    contexts=("full", "static"),
)
def check(ctx):
    if ctx.trainer not in TRAINER_CLASS:  # any other trainer (and an opt-in kind: AsyncGRPO)
        yield from _other_trainer(ctx)
        return
    pad, pad_id, eos, eos_id = specials(ctx)
    rows = embedding_rows(ctx)
    cfg_json, gen_json = config_json(ctx), generation_json(ctx)
    trainer_cls = TRAINER_CLASS[ctx.trainer]
    trl_version = trl_words(ctx)
    gen_eos = as_id_list((gen_json or {}).get("eos_token_id"))
    details = _details(tokenizer=str(ctx.config.tokenizer.path), pad=pad, pad_id=pad_id, eos=eos, eos_id=eos_id,
                       rows=rows, config_pad=cfg_json.get("pad_token_id"), generation_json=gen_json, trl=trl_version)

    if pad is None:
        fix = _pad_fix(ctx, rows, eos_id, gen_json)
        if eos is None:
            yield fail(NEITHER, fix, **details)
            return
        sets, evidence = sets_pad_to_eos(ctx)
        details["trainer behaviour"] = evidence
        if sets:
            yield warn(_set_to_eos(ctx.trainer, trainer_cls, trl_version, eos, eos_id), fix, **details)
        else:
            yield fail(_never_set(trainer_cls, trl_version), fix, **details)
        return

    zeroed = zeroes_pad_ids(ctx) if pad_id is not None and rows is not None and pad_id >= rows else None
    if zeroed:
        # PPO-style trainers replace every pad id with 0 before a forward or generate: the id never indexes the
        # embedding matrix, so TRL's examples may add a `[PAD]` past the model's rows without resizing it
        details["pad ids before each forward"] = f"replaced with 0 by the trainer: {zeroed}"
        yield passed(f"pad token {pad!r} (id {pad_id}) lies past the model's {rows} embedding rows, which {trainer_cls} "
                     f"(trl {trl_version}) allows: it replaces pad ids with 0 before every forward and generate", **details)
        return
    if pad_id is None or (rows is not None and pad_id >= rows):
        yield fail(_outside_rows(pad, pad_id, rows), _pad_fix(ctx, rows, eos_id, gen_json, unless=pad), **details)
        return

    files = {"config.json": cfg_json.get("pad_token_id")}
    if gen_json is not None:
        files["generation_config.json"] = gen_json.get("pad_token_id")
    disagree = {name: value for name, value in files.items() if value is not None and value != pad_id}
    passed_pad = passes_pad_to_generate(ctx) if "generation_config.json" in disagree else None
    if passed_pad:
        # generate takes the trainer's own pad id; the file's would only fill a pad id the trainer left unset
        details["generation_config.json pad_token_id unused"] = (
            f"{disagree.pop('generation_config.json')} pads nothing: {trainer_cls} passes generate the tokenizer's pad id "
            f"({passed_pad}), pads prompts and completions with it and masks completions at the eos")
    if disagree:
        yield warn(
            _files_disagree(pad, pad_id, disagree),
            _fix(ctx, (pad, pad_id, "the tokenizer's own pad token"), gen_json, tokenizer=False),
            **details,
        )

    if ctx.trainer == "ppo":
        # PPO truncates responses at its stop token (stop_token_id, else the tokenizer's eos) and masks pad ids:
        # only a pad equal to that stop token hides the response's end; a pad equal to a secondary
        # generation eos (Qwen instruct: pad <|endoftext|>, stop <|im_end|>) is harmless
        stop_id = config_value(ctx, "stop_token_id")
        if stop_id is None:  # no stop id set: the eos is where responses end and pads are masked from
            stop_id = eos_id
        if pad_id == stop_id:
            yield warn(_ppo_stop(pad, pad_id), _pad_fix(ctx, rows, eos_id, gen_json, exclude={stop_id}), **details)
            return
    elif pad_id == eos_id or pad_id in gen_eos:
        details["pad = eos"] = (
            f"harmless for {trainer_cls}: it masks the completion after the first eos, keeping that eos in the loss"
        )
    yield passed(_healthy(pad, pad_id, rows), **details)


def _pad_fix(ctx, rows, eos_id, gen_json, exclude=frozenset(), unless=None):
    """The fix that sets the pad token the vocabulary offers (None when it offers none but `unless`, or when the
    vocabulary needs the loaded tokenizer: --static names no fix)."""
    try:
        tok = ctx.tokenizer
    except Unavailable:
        return None
    choice = _choose_pad(tok, rows, eos_id, exclude=exclude)
    if choice is None or choice[0] == unless or (exclude and choice[1] in exclude):
        return None
    return _fix(ctx, choice, gen_json)


# -- a trainer the other rules do not check (a launch command's OnlineDPO, SFT, a script's own Trainer) ----------

def _other_trainer(ctx):
    """Judged where the script's trainer reached transformers' Trainer constructor: after the subclass's own set-up,
    so a trainer that sets pad = eos itself (TRL's from 0.18 or so) has done it. Only the padding is judged: whether
    the collator the trainer was given pads with a tokenizer without a pad token, and whether the trainer's own code
    pads with another tokenizer it holds (OnlineDPO's reward_processing_class) that has none. A collator of the
    script's own is not guessed at."""
    cls = ctx.live.trainer_cls
    name = cls.__qualname__ if cls is not None else "the script's trainer"
    held = list(_held_without_pad(ctx, cls, name))
    yield from held
    try:
        yield _collated(ctx, cls, name)
    except Unavailable:
        if not held:  # nothing judged at all: the rule says skip, and why
            raise


def _collated(ctx, cls, name):
    """The finding on the collator's padding with the tokenizer the trainer was given."""
    given = ctx.live.tokenizer
    tok = ctx.tokenizer if hasattr(ctx.tokenizer, "pad_token") else getattr(ctx.tokenizer, "tokenizer", None)
    if tok is None:
        raise Unavailable(f"{name} was given {type(ctx.tokenizer).__name__}, which holds no tokenizer")
    if not _loader_uses_collator(cls):
        raise Unavailable(f"{name} builds its own training dataloader (get_train_dataloader) without the trainer's "
                          "data_collator: its padding is not judged")
    pads, words = _collator_pad(ctx.live.data_collator, given)
    details = {"tokenizer": type(tok).__name__, "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id,
               "eos_token": tok.eos_token, "trainer": name, "trl": ctx.version("trl") or "not installed",
               "collator": words, "judged": "the padding of the trainer's tokenizers; nothing else of pad-token"}
    if tok.pad_token is not None:
        return passed(f"{name} was given a tokenizer with pad token {tok.pad_token!r} (id {tok.pad_token_id}), and "
                      f"{words}", **details)
    if pads is None:
        raise Unavailable(f"the tokenizer has no pad token when {name} is built, and {words}: whether it pads "
                          "with the tokenizer is not judged")
    if pads is False:
        return passed(f"the tokenizer has no pad token, and {name}'s collator does not pad with it ({words})",
                      **details)
    rows = embedding_rows(ctx)
    gen_json = ctx.read_json(ctx.model_file("generation_config.json"))
    return fail(f"the tokenizer has no pad token when {name} is built (it sets none itself), and {words}: the first "
                "batch fails ('Asking to pad but the tokenizer does not have a padding token')",
                _fix(ctx, _choose_pad(tok, rows, tok.eos_token_id), gen_json), **details)


def _held_without_pad(ctx, cls, name):
    """A fail for each tokenizer the trainer holds besides its processing_class (a reward model's) that has no pad
    token where the trainer's own code calls it with padding on."""
    for attr, tok in ctx.live.held_tokenizers.items():
        if tok.pad_token is not None:
            continue
        where = _pads_with(cls, attr)
        if where is None:
            continue
        source = getattr(tok, "name_or_path", "") or "?"
        yield fail(f"{name}'s {attr} (the tokenizer of {source}) has no pad token, and {name} pads with it at {where}: "
                   "the first batch fails ('Asking to pad but the tokenizer does not have a padding token')",
                   manual(f"give that tokenizer a pad token before the trainer is built (`{attr.split('[')[0]}`'s "
                          f"tokenizer: `tokenizer.pad_token = tokenizer.eos_token` in the script, or `pad_token` in "
                          f"{source}/tokenizer_config.json)"),
                   trainer=name, tokenizer=source, attribute=attr, eos_token=tok.eos_token, pads_at=where)


def _pads_with(cls, attr: str) -> str | None:
    """`file:line` where the trainer's own code (its classes up to transformers') calls the tokenizer held in `attr`
    with padding on, or None."""
    import inspect
    import re

    call = re.compile(rf"self\.{re.escape(attr.split('[')[0])}\((?:[^()]|\([^()]*\))*?\bpadding\s*=\s*"
                      r"(?:True|[\"'](?:longest|max_length)[\"'])")
    for klass in getattr(cls, "__mro__", ()):
        if klass.__module__.split(".")[0] in ("transformers", "builtins"):
            break
        try:
            lines, first = inspect.getsourcelines(klass)
            path = inspect.getsourcefile(klass)
        except (OSError, TypeError):
            continue
        text = "".join(lines)
        m = call.search(text)
        if m:
            return f"{path}:{first + text.count(chr(10), 0, m.start())}"
    return None


def _loader_uses_collator(cls) -> bool:
    """Whether the trainer's training dataloader collates with `self.data_collator`: transformers' own, or an override
    whose source names it."""
    import inspect

    method = getattr(cls, "get_train_dataloader", None)
    if cls is None or method is None or method.__module__.startswith("transformers."):
        return True
    try:
        return "data_collator" in inspect.getsource(method)
    except (OSError, TypeError):
        return False


def _collator_pad(collator, tokenizer) -> tuple[bool | None, str]:
    """(whether the collator pads with the tokenizer's pad token: True, False, or None when not known; in words)."""
    kind = f"the function {collator.__qualname__}" if callable(collator) and hasattr(collator, "__qualname__") \
        and not isinstance(collator, type) and type(collator).__name__ == "function" else type(collator).__name__
    if collator is None:
        from transformers import PreTrainedTokenizerBase

        if isinstance(tokenizer, PreTrainedTokenizerBase):
            return True, "no collator: transformers' Trainer pads with the tokenizer (DataCollatorWithPadding)"
        return False, (f"no collator, and {type(tokenizer).__name__} is no tokenizer: transformers' Trainer collates "
                       "without padding (default_data_collator)")
    if "pad_token_id" in vars(collator) or hasattr(type(collator), "pad_token_id"):
        pad_id = collator.pad_token_id
        if pad_id is None:
            return True, f"its collator {kind} pads with pad_token_id None"
        return False, f"its collator {kind} pads with id {pad_id}"
    inner = getattr(collator, "tokenizer", None) or getattr(collator, "processing_class", None)
    if inner is not None and hasattr(inner, "pad_token"):
        return (True, f"its collator {kind} pads with the tokenizer") if inner.pad_token is None else \
            (False, f"its collator {kind} pads with {inner.pad_token!r}")
    return None, f"its collator is {kind}"


def _choose_pad(tok, rows, eos_id, exclude=frozenset()):
    """(token, id, why) for the best pad the vocabulary already has, or the eos as the last resort."""
    vocab = tok.get_vocab()
    banned = set(exclude) | {eos_id}
    for name in PAD_CANDIDATES:
        tid = vocab.get(name)
        if tid is not None and tid not in banned and (rows is None or tid < rows):
            return name, tid, "a dedicated pad token already in the vocabulary"
    if tok.eos_token is not None and eos_id not in exclude:
        return tok.eos_token, eos_id, "the eos token (the vocabulary has no dedicated pad token, and growing it would need new embedding rows)"
    return None


def _fix(ctx, choice, gen_json, tokenizer=True):
    if choice is None:
        return None
    token, tid, why = choice
    cfg = ctx.config
    what = f"set pad_token to {token!r} (id {tid}), {why}" if tokenizer else f"align pad_token_id to {tid}"
    if (tokenizer and cfg.tokenizer.in_cache) or cfg.model.in_cache:  # never rewrite the Hugging Face cache: say how
        return manual(f"{what}: {_copy_first(cfg)}")
    edits = []
    if tokenizer:
        edits.append(Edit(str(cfg.tokenizer.path / "tokenizer_config.json"), set=(("pad_token", token),)))
        if (cfg.tokenizer.path / "special_tokens_map.json").is_file():
            edits.append(Edit(str(cfg.tokenizer.path / "special_tokens_map.json"), set=(("pad_token", token),)))
    edits.append(Edit(str(cfg.model.path / "config.json"), set=(("pad_token_id", tid),)))
    if gen_json is not None:
        edits.append(Edit(str(cfg.model.path / "generation_config.json"), set=(("pad_token_id", tid),)))
    return Fix(f"{what}; write pad_token_id {tid} to config.json" + (" and generation_config.json" if gen_json is not None else ""), tuple(edits))


def _copy_first(cfg) -> str:
    """The steps that take a model out of the Hugging Face cache so that --fix can write to it."""
    cached = [(a, key) for a, key in ((cfg.model, "model_name_or_path"), (cfg.tokenizer, "tokenizer_name_or_path"))
              if a.in_cache and (key == "model_name_or_path" or a.path != cfg.model.path)]
    return "; ".join(f"{a.path} is in the Hugging Face cache, which --fix never rewrites: copy the snapshot to a folder "
                     f"of your own (`cp -rL {a.path} <dest>`), point `{key}` at it and rerun --fix" for a, key in cached)
