"""What the judged TRL release does, asked of a context, with one provider per context: the installed TRL's source
(the full check: trl_doctor.facts.trl.installed, read without importing TRL where it can be) or the release's data
shipped with trl-doctor (`check --static`, the release `--trl-version` names or the installed one:
trl_doctor.facts.trl.fields). A job's logs (the watch) hold none of it: Unavailable there, with the reason."""

from __future__ import annotations

from trl_doctor.errors import Unavailable

GENERATE_PAD = "GRPO and RLOO pass generate the tokenizer's pad id themselves (GenerationConfig(..., pad_token_id=...))"


def _judged(ctx) -> str:
    """The context's kind, where a provider answers: `full` or `static`."""
    if ctx.kind in ("full", "static"):
        return ctx.kind
    raise Unavailable(f"what trl does is not known from a job's logs ({ctx.kind} context)")


def trl_words(ctx) -> str:
    """The TRL release judged, as a report names it: the installed one (full; "not installed"), or the release
    `--static` judges against with why that one."""
    if _judged(ctx) == "static":
        return ctx.release_words
    return ctx.version("trl") or "not installed"


def ppo_style(ctx) -> bool:
    """Whether the trainer is PPO-style (PPO, and RLOO before trl 0.22): responses end at the config's stop token."""
    from trl_doctor.facts.trl import fields, installed

    if _judged(ctx) == "static":
        return fields.ppo_style(ctx.release, ctx.trainer)
    return installed.ppo_style(ctx.trainer)


def sets_pad_to_eos(ctx) -> tuple[bool | None, str]:
    """(whether the trainer fills a missing pad token with the eos token, the evidence: file:line, or what the
    release's data says)."""
    from trl_doctor.facts.trl import fields, installed

    if _judged(ctx) == "full":
        return installed.trainer_sets_pad_to_eos(ctx.trainer)
    evidence = fields.release(ctx.release)["sets_pad_to_eos"].get(ctx.trainer)
    if evidence:
        return True, evidence
    return False, f"{installed.TRAINER_CLASS[ctx.trainer]} in trl {ctx.release} never assigns the policy tokenizer's pad_token"


def zeroes_pad_ids(ctx) -> str | None:
    """Where a PPO-style trainer replaces pad ids with 0 before every forward and generate (so a pad id past the
    embedding rows never indexes them), as "file:line: `code`"; None for any other trainer. The release's data does
    not record it: Unavailable under --static for a PPO-style trainer."""
    from trl_doctor.facts.trl import installed

    if _judged(ctx) == "full":
        return installed.pad_ids_zeroed(ctx.trainer)
    if ppo_style(ctx):
        raise Unavailable("needs the full check: whether the trainer replaces pad ids before each forward (a pad id "
                          "past the embedding rows may be allowed) is read from the installed TRL")
    return None


def passes_pad_to_generate(ctx) -> str | None:
    """Where the trainer hands `generate` the tokenizer's pad id itself (then generation_config.json's pad_token_id
    pads nothing), or None (PPO-style: generate pads with generation_config.json's)."""
    if _judged(ctx) == "full":
        from trl_doctor.facts.trl.generation import pad_passed_to_generate

        return pad_passed_to_generate(ctx)
    return None if ppo_style(ctx) else GENERATE_PAD


def bf16_default(ctx) -> tuple[str, object, bool, str] | None:
    """(the config class's name, its `bf16` default, whether its __post_init__ turns a None into `not fp16`, whose
    class: "the installed TRL" or "trl <release>"); None when the release has no config class for the trainer."""
    from trl_doctor.facts.trl import fields

    if _judged(ctx) == "static":
        own, name = fields.config_fields(ctx.release, ctx.trainer)
        if name is None:
            return None
        post_init = ctx.trainer in ("grpo", "rloo") and fields.release_key(ctx.release) >= (0, 19)
        return name, own.get("bf16", {}).get("default", False), post_init, f"trl {ctx.release}"
    import dataclasses

    from trl_doctor.facts.trl.installed import config_class, post_init_sets_bf16

    cls = config_class(ctx.trainer)
    if cls is None:
        return None
    default = next((f.default for f in dataclasses.fields(cls) if f.name == "bf16"), False)
    return cls.__name__, default, post_init_sets_bf16(cls), "the installed TRL"


def completion_mask(ctx):
    """Which stop ids end the trainer's completion mask (trl_doctor.facts.trl.generation.mask_eos: every stop id, or
    the tokenizer's eos only), read from the installed trainer; None when no mask code is recognised there. The
    release's data does not record it: Unavailable under --static."""
    if _judged(ctx) == "static":
        raise Unavailable("needs the full check: read from the installed trainer's code")
    from trl_doctor.facts.trl.generation import mask_eos

    return mask_eos(ctx.trainer)


def stream_support(ctx):
    """How the trainer takes a streamed dataset (trl_doctor.facts.trl.installed.stream_support), read from the
    installed trainer; a stream is loaded by the datasets library, so --static says Unavailable."""
    if _judged(ctx) == "static":
        raise Unavailable("needs the full check: a stream or a dataset mixture is loaded by the datasets library")
    from trl_doctor.facts.trl import installed

    return installed.stream_support(ctx.trainer)


def parser_policy(ctx) -> tuple[str, str] | None:
    """("stops" | "drops", evidence) for what TRL's parser does with a config key no dataclass has, as the release's
    data says it (--static: `trl <trainer> --config` stops on one from trl 0.19); None in the full check, where the
    installed TrlParser's own code is read (trl_doctor.rules.trainer_config.unknown_key_policy)."""
    if _judged(ctx) == "full":
        return None
    from trl_doctor.facts.trl import fields

    if fields.release_key(ctx.release) >= (0, 19):
        return "stops", f"TrlParser in trl {ctx.release} stops on a key no dataclass takes"
    return "drops", f"TrlParser in trl {ctx.release} drops a key no dataclass takes"


def built_config_class(ctx):
    """The installed TRL's config class for the trainer, to build and cross-check a config with (None without one);
    --static imports no TRL: Unavailable there."""
    if _judged(ctx) == "static":
        raise Unavailable("needs the full check: TRL's config class is built by the installed TRL")
    from trl_doctor.facts.trl.installed import config_class

    return config_class(ctx.trainer)


def ppo_v1(ctx) -> str | None:
    """The PPOTrainer of TRL's first API (trl before 0.12 under the name PPOTrainer: `PPOTrainer(config=PPOConfig(
    model_name=...), model=AutoModelForCausalLMWithValueHead, ref_model, tokenizer, dataset)`, LLaMA-Factory's
    CustomPPOTrainer on trl 0.9.6) as the job built it, in words; None for every other trainer. Its contract is its
    own: the value head sits on the policy (no value model), and responses end where the caller's `generate` keywords
    say (no stop_token in its config). Read from the captured class: the TRL class it derives from takes `config`,
    not `args`."""
    import inspect

    live = getattr(ctx, "live", None)
    if ctx.trainer != "ppo" or live is None or not isinstance(live.trainer_cls, type):
        return None
    own = next((c for c in live.trainer_cls.__mro__ if (c.__module__ or "").split(".")[0] == "trl"), None)
    if own is None:
        return None
    try:
        params = inspect.signature(own.__init__).parameters  # type: ignore[misc]  # the TRL class's own, read
    except (TypeError, ValueError):
        return None
    if "config" not in params or "args" in params:
        return None
    return f"trl {ctx.version('trl')}'s {own.__name__} (its first API: PPOConfig(model_name=...), a value head on the policy)"
