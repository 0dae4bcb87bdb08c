"""TD001 pad-token: the tokenizer needs a pad token the trainer, the model files and vLLM agree on.

What it does
    Compares the pad token of the tokenizer the trainer holds (with `added_tokens`) with the eos,
    the embedding rows (`vocab_size`) and `pad_token_id` in config.json and generation_config.json
    (the latter only where the installed trainer passes no pad id to `generate`). Whether the
    trainer sets pad = eos is read from its source, and the line quoted.

Why is this bad?
    GPT-2's and the Llama 3 tokenizers ship without a pad token. GRPOTrainer before TRL 0.17 crashes
    at the first batch ("ValueError: Asking to pad but the tokenizer does not have a padding
    token"); from TRL 0.17 on (PR #3290) it silently sets `pad_token = eos_token`. A pad id outside
    the embedding crashes the first forward ("index out of range in self"; a device-side assert on
    GPU). A pad id in the model files that differs from the tokenizer's makes generation pad with
    another token than the trainer masks, where the trainer leaves it to generate (PPO; GRPO, trl
    0.14 to 1.x, passes its own). pad = eos is harmless for GRPO and RLOO (the mask ends at the
    first eos, inclusive), not for PPO, whose value and reward forwards mask every pad id: the final
    eos is masked out and stopping is never rewarded.

Example
    model_name_or_path: gpt2-nopad      # tokenizer_config.json has no pad_token
    -> warn: the tokenizer has no pad token; GRPOTrainer in trl 1.16.0 will silently set
       pad_token = eos_token '<|endoftext|>' (id 0).

Fix safety
    Safe: picks a pad token the vocabulary already has (`<pad>`, `<|pad|>`, `[PAD]`, `<|padding|>`,
    `<|finetune_right_pad_id|>`, `<|endoftext|>` when it is not the eos), else the eos, never
    growing the vocabulary; writes `pad_token` to tokenizer_config.json (and
    special_tokens_map.json) and `pad_token_id` to config.json and generation_config.json. Manual
    for the Hugging Face cache (copy the snapshot with `cp -rL`, point the config at it).
"""

from __future__ import annotations

from trl_doctor import Edit, Fix, fail, manual, passed, rule, warn

from trl_doctor.facts.generation import pad_passed_to_generate
from trl_doctor.facts.tokens import as_id_list, embedding_rows
from trl_doctor.facts.trl import TRAINER_CLASS, pad_ids_zeroed, trainer_sets_pad_to_eos
from trl_doctor.facts import wording_pad as words

PAD_CANDIDATES = ("<pad>", "<|pad|>", "[PAD]", "<|padding|>", "<|finetune_right_pad_id|>", "<|endoftext|>")


@rule(
    id="TD001",
    slug="pad-token",
    title="Tokenizer has a pad token the trainer and model files agree on",
    needs=("tokenizer", "model_config"),
    fixable="sometimes",
)
def check(ctx):
    tok = ctx.tokenizer
    rows = embedding_rows(ctx)
    cfg_json = ctx.read_json(ctx.model_file("config.json")) or {}
    gen_json = ctx.read_json(ctx.model_file("generation_config.json"))
    trainer_cls = TRAINER_CLASS[ctx.trainer]
    trl_version = ctx.version("trl") or "not installed"
    pad, pad_id, eos, eos_id = tok.pad_token, tok.pad_token_id, tok.eos_token, tok.eos_token_id
    gen_eos = as_id_list((gen_json or {}).get("eos_token_id"))
    details = words.details(tokenizer=str(ctx.config.tokenizer.path), pad=pad, pad_id=pad_id, eos=eos, eos_id=eos_id,
                            rows=rows, config_pad=cfg_json.get("pad_token_id"), generation_json=gen_json, trl=trl_version)

    if pad is None:
        choice = _choose_pad(tok, rows, eos_id)
        fix = _fix(ctx, choice, gen_json)
        if eos is None:
            yield fail(words.NEITHER, fix, **details)
            return
        sets, evidence = trainer_sets_pad_to_eos(ctx.trainer)
        details["trainer behaviour"] = evidence
        if sets:
            yield warn(words.set_to_eos(ctx.trainer, trainer_cls, trl_version, eos, eos_id), fix, **details)
        else:
            yield fail(words.never_set(trainer_cls, trl_version), fix, **details)
        return

    zeroed = pad_ids_zeroed(ctx.trainer) if pad_id is not None and rows is not None and pad_id >= rows else None
    if zeroed:
        # PPO-style trainers replace every pad id with 0 before a forward or generate: the id never indexes the
        # embedding matrix, so TRL's examples may add a `[PAD]` past the model's rows without resizing it
        details["pad ids before each forward"] = f"replaced with 0 by the trainer: {zeroed}"
        yield passed(f"pad token {pad!r} (id {pad_id}) lies past the model's {rows} embedding rows, which {trainer_cls} "
                     f"(trl {trl_version}) allows: it replaces pad ids with 0 before every forward and generate", **details)
        return
    if pad_id is None or (rows is not None and pad_id >= rows):
        choice = _choose_pad(tok, rows, eos_id)
        yield fail(
            words.outside_rows(pad, pad_id, rows),
            _fix(ctx, choice, gen_json) if choice and choice[0] != pad else None,
            **details,
        )
        return

    files = {"config.json": cfg_json.get("pad_token_id")}
    if gen_json is not None:
        files["generation_config.json"] = gen_json.get("pad_token_id")
    disagree = {name: value for name, value in files.items() if value is not None and value != pad_id}
    passed_pad = pad_passed_to_generate(ctx) if "generation_config.json" in disagree else None
    if passed_pad:
        # generate takes the trainer's own pad id; the file's would only fill a pad id the trainer left unset
        details["generation_config.json pad_token_id unused"] = (
            f"{disagree.pop('generation_config.json')} pads nothing: {trainer_cls} passes generate the tokenizer's pad id "
            f"({passed_pad}), pads prompts and completions with it and masks completions at the eos")
    if disagree:
        yield warn(
            words.files_disagree(pad, pad_id, disagree),
            _fix(ctx, (pad, pad_id, "the tokenizer's own pad token"), gen_json, tokenizer=False),
            **details,
        )

    if ctx.trainer == "ppo":
        # PPO truncates responses at its stop token (stop_token_id, else the tokenizer's eos) and masks pad ids:
        # only a pad equal to that stop token hides the response's end; a pad equal to a secondary
        # generation eos (Qwen instruct: pad <|endoftext|>, stop <|im_end|>) is harmless
        stop_id = ctx.config.get("stop_token_id", eos_id)
        if pad_id == stop_id:
            choice = _choose_pad(tok, rows, eos_id, exclude={stop_id})
            yield warn(
                words.ppo_stop(pad, pad_id),
                _fix(ctx, choice, gen_json) if choice and choice[1] != pad_id else None,
                **details,
            )
            return
    elif pad_id == eos_id or pad_id in gen_eos:
        details["pad = eos"] = (
            f"harmless for {trainer_cls}: it masks the completion after the first eos, keeping that eos in the loss"
        )
    yield passed(words.healthy(pad, pad_id, rows), **details)


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
