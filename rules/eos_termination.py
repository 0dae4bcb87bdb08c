"""TD004 eos-termination: generation stops at the token the model ends its turn with.

What goes wrong
    If generation never stops at the model's end-of-turn token, every completion runs to
    `max_completion_length` (PPO: `response_length`): the job pays for the longest possible completions
    and the rewards score rambling text after the real answer. Typical causes: generation_config.json's
    `eos_token_id` lacks the token the chat template ends assistant turns with (`<|im_end|>` on a Qwen
    base checkpoint, `<|eot_id|>` on the first Llama 3 Instruct release); the tokenizer's eos differs from
    the model's; PPO's `stop_token` / `stop_token_id` is unset, so responses are neither stopped nor
    truncated at eos.

Versions
    Generation's stop set is what HF `generate` and vLLM each derive from the checkpoint: the tokenizer's
    eos plus generation_config.json's `eos_token_id` (vLLM adds the latter to every request's stop ids).
    TRL 1.x's GRPOTrainer also passes that union to `generate`; TRL 0.15's built its own GenerationConfig
    without eos ids and relied on transformers' defaults. The static reading is therefore checked by a probe.

How it is detected
    Static: the chat template is rendered on a short conversation (for conversational datasets) to find
    the first special token after the assistant's content; for plain-text prompts the terminator is the
    tokenizer's eos. That token must be in the stop set the generation path will use (HF generate, and
    vLLM's when `use_vllm` is set).
    Dynamic (with the smoke step): the miniature twin is made to emit that token as the 4th to 6th
    completion token (a hook on its LM head, during generation only) while the installed trainer runs its
    real generation path with this config's settings; generation must stop there instead of running to
    the length limit. The probe decides for the HF path; vLLM's path is judged statically (it needs a GPU).
    PPO: `stop_token` or `stop_token_id` must be set.

What the fix does
    Adds the missing id to generation_config.json's `eos_token_id` (kept as a list, existing ids first);
    for PPO sets `stop_token: eos` in the config.
"""

from __future__ import annotations

from trl_doctor import Edit, Fix, Unavailable, fail, manual, passed, rule, warn

from trl_doctor.facts.chat import completion_terminator
from trl_doctor.facts.tokens import as_id_list
from trl_doctor.facts.trainer_run import FORCE_AFTER, MAX_COMPLETION, trainer_run


@rule(
    id="TD004",
    slug="eos-termination",
    title="Generation stops at the model's end-of-turn token",
    needs=("tokenizer", "model_config", "trainer_run"),
    fixable="sometimes",
)
def check(ctx):
    if ctx.trainer == "ppo":
        yield from _ppo(ctx)
        return
    tok = ctx.tokenizer
    gen_path = ctx.model_file("generation_config.json")
    gen_json = ctx.read_json(gen_path)
    cfg_json = ctx.read_json(ctx.model_file("config.json")) or {}
    # without generation_config.json, transformers and vLLM fall back to config.json's eos
    gen_eos = as_id_list((gen_json if gen_json is not None else cfg_json).get("eos_token_id"))
    try:
        rows = ctx.dataset.select(range(min(2, len(ctx.dataset)))).to_list()
    except Unavailable:
        rows = []
    term = completion_terminator(tok, rows)
    if term["template_error"]:
        yield warn(f"the chat template cannot be rendered ({term['template_error']}); the turn terminator is unknown",
                   **{"tokenizer": str(ctx.config.tokenizer.path)})
        return
    stop_set = sorted(set(gen_eos) | ({tok.eos_token_id} if tok.eos_token_id is not None else set()))
    names = {i: tok.convert_ids_to_tokens(i) for i in stop_set}
    use_vllm = bool(ctx.config.get("use_vllm"))
    details = {
        "terminator": f"{term['token']!r} (id {term['id']}): {term['why']}",
        "tokenizer eos": f"{tok.eos_token!r} (id {tok.eos_token_id})",
        "config.json eos_token_id": cfg_json.get("eos_token_id"),
        "generation_config.json eos_token_id": None if gen_json is None else gen_json.get("eos_token_id"),
        "stop set (HF generate and vLLM: tokenizer eos + generation config eos ids)": [f"{names[i]!r} ({i})" for i in stop_set],
        "generation path": "vLLM" if use_vllm else "transformers generate",
    }
    if term["id"] is None:
        yield fail("the tokenizer has no eos token: nothing can end a completion", **details)
        return
    static_ok = term["id"] in stop_set
    fix = None if static_ok else _add_eos_fix(ctx, gen_path, gen_json, gen_eos, term)

    probe = _probe(ctx, term)
    details.update(probe.get("details", {}))
    where = f"{gen_path.name} eos_token_id {gen_eos}" if gen_json is not None else f"config.json eos_token_id {gen_eos} (no generation_config.json)"
    if probe.get("stopped") is False:
        yield fail(
            f"generation does not stop at {term['token']!r} (id {term['id']}): the probe made the model emit it as the "
            f"{FORCE_AFTER + 1}th token and generation still ran all {probe['steps']} steps of the probe's limit; "
            f"{where} lacks it, so every completion will run to max_completion_length ({_limit(ctx)})",
            fix, **details,
        )
        return
    if not static_ok and (use_vllm or probe.get("stopped") is None):
        path = "vLLM" if use_vllm else "generation"
        yield fail(
            f"{term['token']!r} (id {term['id']}) ends the assistant's turn but {path} will not stop at it: {where} and the "
            f"tokenizer's eos {tok.eos_token!r} ({tok.eos_token_id}) do not include it, so completions run to max_completion_length",
            fix, **details,
        )
        return
    if not static_ok:
        yield warn(
            f"the installed trainer's generation stops at {term['token']!r} (id {term['id']}), but {where} lacks it: "
            "vLLM and other tools that read the checkpoint will not stop there",
            fix, **details,
        )
        return
    how = f"; the probe saw generation stop after {probe['steps']} steps" if probe.get("stopped") else ""
    yield passed(f"completions end at {term['token']!r} (id {term['id']}), which is in the stop set{how}", **details)


def _limit(ctx):
    try:
        return getattr(ctx.trainer_config, "max_completion_length", None)
    except Unavailable:
        return ctx.config.get("max_completion_length")


def _probe(ctx, term) -> dict:
    """The dynamic half, from the shared trainer run (None when the smoke step is off or could not run)."""
    if not ctx.options.smoke:
        return {"details": {"termination probe": "not run (--no-smoke): the static reading decides"}}
    try:
        run = trainer_run(ctx)
    except Unavailable as exc:
        return {"details": {"termination probe": f"not run: {exc}"}}
    if run.outcome != "ok" or not run.result.get("train"):
        return {"details": {"termination probe": f"not run: the trainer run {run.outcome} (see smoke-step)"}}
    train = run.result["train"]
    steps = max(train.get("generate_steps") or [0])
    if train.get("forced_token_id") != term["id"] or not steps:
        return {"details": {"termination probe": "not run: no generation was observed"}}
    stopped = steps < MAX_COMPLETION
    return {
        "stopped": stopped,
        "steps": steps,
        "details": {
            "termination probe": f"{term['token']!r} forced as completion token {FORCE_AFTER + 1}-{FORCE_AFTER + 3}; "
                                 f"generate ran {train['generate_steps']} steps (limit {MAX_COMPLETION})",
            "completion lengths (trainer's mask)": f"mean {train.get('completion_mean_length')}, max {train.get('completion_max_length')}",
        },
    }


def _add_eos_fix(ctx, gen_path, gen_json, gen_eos, term):
    ids = list(gen_eos) + [term["id"]]
    edits = (Edit(str(gen_path), set=(("eos_token_id", ids),)),)
    action = "add" if gen_json is not None else "create generation_config.json with"
    what = f"{action} {term['token']!r} (id {term['id']}) to generation_config.json eos_token_id: {ids}"
    model = ctx.config.model
    if model.in_cache:  # never rewrite the Hugging Face cache: say how, by hand
        return manual(f"{what}: {model.path} is in the Hugging Face cache, which --fix never rewrites: copy the snapshot "
                      f"to a folder of your own (`cp -rL {model.path} <dest>`), point `model_name_or_path` at it and "
                      "rerun --fix")
    return Fix(what, edits)


def _ppo(ctx):
    raw = ctx.config.raw
    tok = ctx.tokenizer
    details = {"stop_token": raw.get("stop_token"), "stop_token_id": raw.get("stop_token_id"),
               "response_length": raw.get("response_length", "TRL's default"), "tokenizer eos": f"{tok.eos_token!r} ({tok.eos_token_id})"}
    if raw.get("stop_token") is None and raw.get("stop_token_id") is None:
        fix = Fix("set `stop_token: eos` in the config", (Edit(str(ctx.config.path), set=(("stop_token", "eos"),)),))
        yield fail(
            f"PPO's `stop_token` and `stop_token_id` are unset: responses are neither stopped nor truncated at eos "
            f"{tok.eos_token!r} (id {tok.eos_token_id}), so every response runs to response_length and is scored whole",
            fix, **details,
        )
        return
    if raw.get("stop_token_id") is not None and raw.get("stop_token_id") != tok.eos_token_id:
        yield warn(f"stop_token_id {raw['stop_token_id']} ({tok.convert_ids_to_tokens(raw['stop_token_id'])!r}) is not the "
                   f"tokenizer's eos {tok.eos_token!r} ({tok.eos_token_id})", **details)
        return
    yield passed(f"PPO truncates responses at {tok.eos_token!r} (id {tok.eos_token_id})", **details)
