"""TD004 eos-termination: generation stops at the token the model ends its turn with.

What it does
    Finds the token the chat template ends the assistant's turn with (plain prompts: the eos) and
    checks it is in the stop set of HF `generate` and, with `use_vllm`, vLLM (the tokenizer's eos
    plus generation_config.json's `eos_token_id`), and where the installed trainer ends the
    completion mask. With the smoke step a probe makes the twin emit it as completion token 4-6 in
    the trainer's real generation path, which must stop there. PPO, RLOO < trl 0.22: the config's
    `stop_token` / `stop_token_id`, no probe.

Why is this bad?
    A completion that never stops runs to `max_completion_length` (PPO: `response_length`): the job
    pays for the longest ones and the rewards score rambling. Typical causes: generation_config.json
    lacks the turn end (`<|im_end|>` on a Qwen base checkpoint, `<|eot_id|>` on the first Llama 3
    Instruct release), the tokenizer's eos differs from the model's, PPO's `stop_token` is unset. A
    mask that ends at the tokenizer's eos only (TRL up to 1.12 at least) counts completions that
    stopped at another terminator as truncated (Phi-3.5's `<|end|>`, trl PR #7039;
    docs/coverage.md: B8). TRL 0.15's GRPOTrainer built its GenerationConfig without eos ids.

Example
    model_name_or_path: qwen2-base      # ChatML: turns end with <|im_end|>; eos is <|endoftext|>
    -> fail: generation does not stop at '<|im_end|>' (id 2): the probe made the model emit it as
       the 4th token and generation still ran all 8 steps of the probe's limit; ...

Fix safety
    Safe: adds the id to generation_config.json's `eos_token_id` (existing ids first) and, where the
    mask ends at the tokenizer's eos only, makes the terminator its `eos_token`; PPO:
    `stop_token: eos`. Manual for the Hugging Face cache (copy the snapshot first), a launch script
    (`--stop_token eos`), and a `stop_token_id` other than the eos with `missing_eos_penalty`, which
    penalizes every response that stopped there (use `stop_token: eos`, that token as the eos).
"""

from __future__ import annotations

from trl_doctor import Edit, Fix, Unavailable, fail, manual, passed, rule, skip, warn

from trl_doctor.facts.inputs.chat import terminator
from trl_doctor.facts.inputs.models import config_json, generation_json
from trl_doctor.facts.launch.settings import config_value
from trl_doctor.facts.trl.behaviour import completion_mask, ppo_style, ppo_v1
from trl_doctor.facts.trl.installed import TRAINER_CLASS
from trl_doctor.facts.inputs.tokens import as_id_list, eos_token, token_names
from trl_doctor.facts.trainer_run import FORCE_AFTER, MAX_COMPLETION, trainer_run


# -- the words both judgments say ---------------------------------------------------------------------------

NO_EOS = "the tokenizer has no eos token: nothing can end a completion"
STOP_SET = "stop set (HF generate and vLLM: tokenizer eos + generation config eos ids)"


def _unrendered(error: str) -> str:
    return f"the chat template cannot be rendered ({error}); the turn terminator is unknown"


def _details(term: dict, eos, eos_id, config_json: dict, generation_json: dict | None, stop_names: list,
             use_vllm: bool) -> dict:
    """What every finding of the non-PPO path carries. `term`: {"token", "id", "why"}; `stop_names`: (token, id) of
    each id in the stop set."""
    return {"terminator": f"{term['token']!r} (id {term['id']}): {term['why']}",
            "tokenizer eos": f"{eos!r} (id {eos_id})",
            "config.json eos_token_id": config_json.get("eos_token_id"),
            "generation_config.json eos_token_id": None if generation_json is None else generation_json.get("eos_token_id"),
            STOP_SET: [f"{name!r} ({i})" for name, i in stop_names],
            "generation path": "vLLM" if use_vllm else "transformers generate"}


def _stop_ids_from(gen_eos: list, has_generation_config: bool) -> str:
    """Where generation takes its eos ids: generation_config.json, else config.json."""
    return (f"generation_config.json eos_token_id {gen_eos}" if has_generation_config else
            f"config.json eos_token_id {gen_eos} (no generation_config.json)")


def _never_stops(term: dict, use_vllm: bool, where: str, eos, eos_id) -> str:
    """The terminator is in no stop set (`where`: stop_ids_from's words)."""
    path = "vLLM" if use_vllm else "generation"
    return (f"{term['token']!r} (id {term['id']}) ends the assistant's turn but {path} will not stop at it: {where} and "
            f"the tokenizer's eos {eos!r} ({eos_id}) do not include it, so completions run to max_completion_length")


def _in_stop_set(term: dict, how: str = "") -> str:
    return f"completions end at {term['token']!r} (id {term['id']}), which is in the stop set{how}"


@rule(
    id="TD004",
    slug="eos-termination",
    title="Generation stops at the model's end-of-turn token",
    needs=("tokenizer", "model_config", "trainer_run"),
    fixable="sometimes",
    contexts=("full", "static"),
)
def check(ctx):
    v1 = ppo_v1(ctx)
    if v1:  # the caller's generate keywords decide where responses end, not the config
        yield skip(f"{v1} generates with the caller's own keywords (`ppo_trainer.generate(query, **generation_kwargs)`, "
                   "or the framework's own generate): its config has no stop_token, and where responses end is "
                   "the caller's eos_token_id, which the trainer never sees")
        return
    if ppo_style(ctx):  # PPO, and RLOO before trl 0.22: responses end at the config's stop token
        yield from _ppo(ctx)
        return
    eos, eos_id = eos_token(ctx)
    gen_json, cfg_json = generation_json(ctx), config_json(ctx)
    # without generation_config.json, transformers and vLLM fall back to config.json's eos
    gen_eos = as_id_list((gen_json if gen_json is not None else cfg_json).get("eos_token_id"))
    term = terminator(ctx)
    if term["template_error"]:
        yield warn(_unrendered(term["template_error"]), **{"tokenizer": str(ctx.config.tokenizer.path)})
        return
    stop_set = sorted(set(gen_eos) | ({eos_id} if eos_id is not None else set()))
    names = token_names(ctx, stop_set)
    use_vllm = bool(config_value(ctx, "use_vllm", False))
    details = _details(term, eos, eos_id, cfg_json, gen_json, [(names[i], i) for i in stop_set], use_vllm)
    if term["id"] is None:
        yield fail(NO_EOS, **details)
        return
    static_ok = term["id"] in stop_set
    try:
        mask = completion_mask(ctx)
    except Unavailable as why:  # the trainer's code is not read here (--static): the stop set alone decides
        details["completion mask ends at"] = str(why)
        details["termination probe"] = "not run (--static): the stop set decides"
        if static_ok:
            yield passed(_in_stop_set(term), **details)
        else:
            yield fail(_never_stops(term, use_vllm, _stop_ids_from(gen_eos, gen_json is not None), eos, eos_id),
                       **details)
        return
    mask_all = mask is not None and mask.kind == "all"
    mask_ids = set(stop_set) if mask_all else {eos_id}
    details["completion mask ends at"] = (
        (f"every stop id {sorted(mask_ids)}" if mask_all else f"the tokenizer's eos only ({eos_id})")
        + (f": {mask.evidence}" if mask is not None else " (no mask code recognised in the installed trainer)"))
    gen_path = ctx.model_file("generation_config.json")
    fix = None if static_ok else _add_eos_fix(ctx, gen_path, gen_json, gen_eos, term, retarget_eos=not mask_all)
    if static_ok and term["id"] not in mask_ids:
        report, message, mask_fix = _mask_mismatch(ctx, term, gen_eos, gen_json, mask)
        yield report(message, mask_fix, **details)
        return
    secondary = sorted(set(stop_set) - mask_ids - {term["id"]})
    if secondary:
        details["other stop ids"] = (f"{[names[i] for i in secondary]} {secondary} also end generation but not the "
                                     "completion mask; harmless while the model ends its turns with the terminator")

    probe = _probe(ctx, term)
    details.update(probe.get("details", {}))
    where = _stop_ids_from(gen_eos, gen_json is not None)
    if probe.get("stopped") is False:
        yield fail(
            f"generation does not stop at {term['token']!r} (id {term['id']}): the probe made the model emit it as the "
            f"{FORCE_AFTER + 1}th token and generation still ran all {probe['steps']} steps of the probe's limit; "
            f"{where} lacks it, so every completion will run to max_completion_length ({_limit(ctx)})",
            fix, **details,
        )
        return
    if not static_ok and (use_vllm or probe.get("stopped") is None):
        yield fail(_never_stops(term, use_vllm, where, eos, eos_id), fix, **details)
        return
    if not static_ok:
        yield warn(
            f"the installed trainer's generation stops at {term['token']!r} (id {term['id']}), but {where} lacks it: "
            "vLLM and other tools that read the checkpoint will not stop there",
            fix, **details,
        )
        return
    how = f"; the probe saw generation stop after {probe['steps']} steps" if probe.get("stopped") else ""
    yield passed(_in_stop_set(term, how), **details)


def _limit(ctx):
    try:
        return config_value(ctx, "max_completion_length")
    except Unavailable:  # a value TRL's parser refuses: quoted as written, the verdict does not hang on it
        return ctx.config.raw.get("max_completion_length")


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
    if train.get("termination_probe_skipped"):
        return {"details": {"termination probe": f"not run: {train['termination_probe_skipped']}"}}
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


def _add_eos_fix(ctx, gen_path, gen_json, gen_eos, term, retarget_eos=False):
    """Add the terminator to generation_config.json's eos ids. Where the installed trainer ends the completion mask at
    the tokenizer's eos only, that alone would make generation stop where the mask does not end (docs/coverage.md: B8): the
    tokenizer's eos is then set to the terminator as well."""
    ids = list(gen_eos) + [term["id"]]
    edits = [Edit(str(gen_path), set=(("eos_token_id", ids),))]
    action = "add" if gen_json is not None else "create generation_config.json with"
    what = f"{action} {term['token']!r} (id {term['id']}) to generation_config.json eos_token_id: {ids}"
    if retarget_eos:
        edits.extend(_eos_edits(ctx, term))
        what += (f", and set the tokenizer's eos_token to {term['token']!r} in tokenizer_config.json (the installed "
                 "trainer ends the completion mask at the tokenizer's eos only)")
    cfg = ctx.config
    cached = [a for a in (cfg.model, cfg.tokenizer if retarget_eos else None) if a is not None and a.in_cache]
    if cached:  # never rewrite the Hugging Face cache: say how, by hand
        where = cached[0]
        return manual(f"{what}: {where.path} is in the Hugging Face cache, which --fix never rewrites: copy the snapshot "
                      f"to a folder of your own (`cp -rL {where.path} <dest>`), point `model_name_or_path` at it and "
                      "rerun --fix")
    return Fix(what, tuple(edits))


def _eos_edits(ctx, term):
    """tokenizer_config.json (and special_tokens_map.json when present) with the terminator as eos_token."""
    path = ctx.config.tokenizer.path
    edits = [Edit(str(path / "tokenizer_config.json"), set=(("eos_token", term["token"]),))]
    if (path / "special_tokens_map.json").is_file():
        edits.append(Edit(str(path / "special_tokens_map.json"), set=(("eos_token", term["token"]),)))
    return edits


def _mask_mismatch(ctx, term, gen_eos, gen_json, mask):
    """Generation stops at the terminator (a generation_config.json eos id) but the trainer's completion mask ends at
    the tokenizer's eos only (docs/coverage.md: B8: Phi-3.5's `<|end|>`, trl PR #7039): (fail or warn, the message, the fix)."""
    tok = ctx.tokenizer
    trl_version = ctx.version("trl") or "?"
    where = "generation_config.json" if gen_json is not None else "config.json"
    what = f"set the tokenizer's eos_token to {term['token']!r} (id {term['id']}) in tokenizer_config.json"
    cfg = ctx.config
    if cfg.tokenizer.in_cache:
        fix = manual(f"{what}: {cfg.tokenizer.path} is in the Hugging Face cache, which --fix never rewrites: copy the "
                     f"snapshot to a folder of your own (`cp -rL {cfg.tokenizer.path} <dest>`), point the config at it "
                     "and rerun --fix")
    else:
        fix = Fix(what + " (the token the trainer's completion mask ends at)", tuple(_eos_edits(ctx, term)))
    evidence = f" ({mask.evidence})" if mask is not None else ""
    drops = bool(config_value(ctx, "mask_truncated_completions", False))
    cls = TRAINER_CLASS[ctx.trainer]
    if config_value(ctx, "use_vllm", False):
        effect = (f"every completion vLLM ends at {term['token']!r} counts as truncated (completions/clipped_ratio near 1)"
                  + (", and mask_truncated_completions drops them all from the loss" if drops else ""))
    else:
        effect = (f"the mask of a completion that ends at {term['token']!r} runs on into the padding generate adds after "
                  "it (the model is trained to emit padding after its turn), and the longest completion of each batch "
                  "counts as truncated" + (" and is dropped by mask_truncated_completions" if drops else ""))
    report = fail if drops else warn
    return (report,
            f"completions end at {term['token']!r} (id {term['id']}), where generation stops ({where} eos_token_id "
            f"{gen_eos}), but trl {trl_version}'s {cls} ends completions at the tokenizer's eos {tok.eos_token!r} "
            f"(id {tok.eos_token_id}) only{evidence}: {effect}",
            fix)


def _stop_settings(ctx) -> dict:
    """stop_token, stop_token_id, missing_eos_penalty and response_length as the trainer gets them (None: no value and
    no default the installed TRL declares)."""
    keys = ("stop_token", "stop_token_id", "missing_eos_penalty", "response_length")
    return {k: config_value(ctx, k) for k in keys}


def _stop_fix(ctx, who: str):
    if ctx.config.format == "script":  # a launch command's own script: its flags are the user's to change
        return manual(f"pass `--stop_token eos` to the script (or set stop_token='eos' in its {who}Config)")
    return Fix("set `stop_token: eos` in the config", (Edit(str(ctx.config.path), set=(("stop_token", "eos"),)),))


def _ppo(ctx):
    """PPO-style trainers (PPOTrainer; RLOOTrainer before trl 0.22) generate to response_length and then truncate each
    response after the config's stop token (`truncate_response(stop_token_id, ...)`); generation_config's eos ids do
    not end their responses."""
    tok = ctx.tokenizer
    who = ctx.trainer.upper()
    got = _stop_settings(ctx)
    details = {"stop_token": got["stop_token"], "stop_token_id": got["stop_token_id"],
               "response_length": got["response_length"] if got["response_length"] is not None else "TRL's default",
               "tokenizer eos": f"{tok.eos_token!r} ({tok.eos_token_id})",
               "how responses end": f"{TRAINER_CLASS[ctx.trainer]} (trl {ctx.version('trl')}) generates response_length "
                                    "tokens and truncates each response after the config's stop token; generation_config's "
                                    "eos ids play no part"}
    if got["stop_token"] is None and got["stop_token_id"] is None:
        yield fail(
            f"{who}'s `stop_token` and `stop_token_id` are unset: responses are neither stopped nor truncated at eos "
            f"{tok.eos_token!r} (id {tok.eos_token_id}), so every response runs to response_length and is scored whole",
            _stop_fix(ctx, who), **details,
        )
        return
    stop_id, penalty = got["stop_token_id"], got["missing_eos_penalty"]
    details["missing_eos_penalty"] = penalty
    if stop_id is not None and stop_id != tok.eos_token_id:
        name = tok.convert_ids_to_tokens(stop_id) if isinstance(stop_id, int) and 0 <= stop_id < len(tok) else "?"
        fix = manual(f"use `stop_token: eos` with a tokenizer whose eos_token is {name!r} (set eos_token in "
                     "tokenizer_config.json) instead of `stop_token_id`")
        if penalty is not None:
            yield fail(
                f"missing_eos_penalty {penalty} with stop_token_id {stop_id} ({name!r}), which is not the tokenizer's eos "
                f"{tok.eos_token!r} ({tok.eos_token_id}): {who} truncates responses at the stop token, then penalizes every "
                f"response that lacks the eos {tok.eos_token!r}, so every response that stopped properly loses {penalty} "
                "(trl#3750)",
                fix, **details,
            )
            return
        yield warn(f"stop_token_id {stop_id} ({name!r}) is not the tokenizer's eos {tok.eos_token!r} ({tok.eos_token_id}): "
                   f"{who} truncates responses at the stop token, but its eos checks (missing_eos_penalty, "
                   f"val/num_eos_tokens) look for {tok.eos_token!r}, which the truncated responses do not contain",
                   fix, **details)
        return
    yield passed(f"{who} truncates responses at {tok.eos_token!r} (id {tok.eos_token_id}), the tokenizer's eos", **details)
