"""TD003 logits-contract: the model answers the trainer's call the way the trainer expects.

What it does
    A probe builds the installed TRL's trainer on the twin and calls its per-token log-prob method
    on 2 x (6 prompt + 4 completion) tokens, recording the keywords the model got and every
    vocabulary-sized output. Logits for more positions than asked warn, with their memory at the
    config's sizes, and fail where the estimate (which counts them) says the job then does not fit
    the launch GPUs (NVML or --target); log-probs not [batch, completion] fail. Remote code
    (`auto_map`, a `model_type` transformers lacks) runs only under --trust-remote-code.

Why is this bad?
    TRL 0.15-0.17 call `model(input_ids, attention_mask, logits_to_keep=k + 1).logits`; transformers
    up to 4.48 named it `num_logits_to_keep`, swallowed the unknown keyword and returned logits for
    the whole sequence (trl#2770; renamed in 4.49). Nothing fails: the logits cost
    (prompt+completion)/(k+1) times the memory and the job may run out of it or far slower.
    TRL 1.x asks for `fused_lm_head=True` and reads `outputs.log_probs`. Remote code (A4) needs
    `trust_remote_code=True`, and its forward may lack `logits_to_keep` (a TypeError), swallow it,
    or have no output embeddings ("'NoneType' object has no attribute 'weight'").

Example
    model_name_or_path: qwen2-chat      # with trl 0.15.2 + transformers 4.48.3
    -> warn: _get_per_token_logps asked for logits of the last 5 positions but got all 10 (...):
       the logits take ... instead of ...; the job still trains (fail on a --target it overflows)

Fix safety
    No fix in the files: the message names the installed versions and the upgrade (transformers >=
    4.49; for remote code, a forward that honours the keywords, or a native architecture). For
    untrusted remote code, a manual step: read it, then set
    `model_init_kwargs.trust_remote_code: true` (never written for the user).
"""

from __future__ import annotations

from trl_doctor import fail, manual, passed, rule, skip, warn

from trl_doctor.facts.memory.fit import memory_verdict
from trl_doctor.facts.memory.plan import prompt_tokens
from trl_doctor.facts.inputs.models import remote_code
from trl_doctor.facts.trainer_run import trainer_run
from trl_doctor.facts.trl.trainer_config import trainer_config


@rule(
    id="TD003",
    slug="logits-contract",
    title="The model returns only the logits the trainer asks for",
    trainers=("grpo", "rloo"),
    needs=("trainer_run",),
    static_skip="it runs the model",
)
def check(ctx):
    remote = remote_code(ctx)
    if remote is not None:
        untrusted = _untrusted(ctx, remote)
        if untrusted is not None:
            yield untrusted
        runs_remote = remote["trusted_by"] or not remote["native"]  # else the job, like the doctor, takes transformers' class
        if runs_remote and not ctx.options.trust_remote_code:
            # the doctor's own flag: without it no code from the model folder runs here, so there is no probe
            yield skip(f"config.json's auto_map names the model's own code ({_code_files(remote)}): the logits probe "
                       "runs it only with trl-doctor's --trust-remote-code", **_remote_details(remote))
            return
    run = trainer_run(ctx)
    probes = run.probes
    if "logits" not in probes:
        yield skip(f"the trainer could not be built for the probe ({run.outcome}; the smoke-step rule shows why)",
                   **run.details)
        return
    probe = probes["logits"]
    if "skipped" in probe:
        yield skip(probe["skipped"])
        return
    versions = f"trl {ctx.version('trl')}, transformers {ctx.version('transformers')}"
    if "error" in probe:
        yield _probe_error(probe, versions, remote)
        return
    keep, seq, batch, vocab = probe["logits_to_keep"], probe["sequence"], probe["batch"], probe["vocab"]
    widest = max(probe["vocab_positions"], default=0)
    details = {
        "trainer method": probe["method"],
        "model forward": probe["model_forward"],
        "keywords passed": probe["call_kwargs"],
        "forward declares": probe["forward_params"],
        "forward takes **kwargs": probe["forward_has_var_kwargs"],
        "probe batch": f"{batch} x {seq} tokens, {keep} completion tokens",
        "logits positions produced": probe["vocab_positions"] or "none (fused LM head: no [batch, seq, vocab] tensor)",
        "log-probs shape": probe["logps_shape"],
        "versions": versions,
    }
    if widest > keep + 1:
        memory = _memory(ctx, vocab)
        details.update(memory)
        swallowed = [k for k in probe["call_kwargs"] or [] if k not in probe["forward_params"] and k not in ("input_ids", "attention_mask")]
        why = (f"{probe['model_forward']} has no {', '.join(swallowed)} parameter and swallowed it in **kwargs"
               if swallowed and probe["forward_has_var_kwargs"] else f"{probe['model_forward']} ignored the request")
        verdict, fits = _fits(ctx)
        details["does the job fit"] = fits
        yield verdict(
            f"{probe['method']} asked for logits of the last {keep + 1} positions but got all {widest} ({why}; {versions}): "
            f"at this config's sizes the logits take {memory['logits at config sizes (mismatch)']} instead of "
            f"{memory['logits at config sizes (expected)']}; {fits}. " + (
                f"The model's own code ({_code_files(remote)}) must pass {', '.join(swallowed) or 'logits_to_keep'} on "
                "(slice the hidden states to the last positions before the LM head), or load a native architecture "
                "without trust_remote_code" if remote is not None else
                "Upgrade transformers to >= 4.49 (or a release your TRL supports)"),
            **details,
        )
        return
    if probe["logps_shape"] != [batch, keep]:
        yield fail(f"{probe['method']} returned log-probs of shape {probe['logps_shape']}, the trainer expects "
                   f"[{batch}, {keep}] ({versions})", **details)
        return
    if probe["logps_finite"] is False:
        yield fail(f"{probe['method']} returned non-finite log-probs on the twin ({versions})", **details)
        return
    how = (f"logits for {widest} of {seq} positions" if widest else "log-probs through the fused LM head, no full logits")
    lacks = ""
    if remote is not None and not {"logits_to_keep", "num_logits_to_keep"} & set(probe["forward_params"]):
        lacks = (f"; its forward declares no logits_to_keep{' (it would swallow it in **kwargs)' if probe['forward_has_var_kwargs'] else ''}, "
                 "which this trainer does not ask the forward for")
    yield passed(f"{probe['model_forward']} answers {probe['method']} with {how} ({versions}){lacks}", **details)


def _fits(ctx):
    """(fail or warn, words): whole-sequence logits cost memory but train; they fail the job only where the memory
    estimate, which counts them (facts.memory.plan.logits_path), says it does not fit the launch machine's GPUs."""
    verdict = memory_verdict(ctx)
    if verdict is None:
        return warn, ("the job still trains, and no launch GPU is known here to say whether it fits (pass --target, "
                      "e.g. --target 1xA100-80GB, to judge it)")
    status, message, _ = verdict
    if status == "fail":
        return fail, f"with them the job does not fit the launch machine: {message}"
    return warn, f"the job still trains: with them the estimate {message}"


def _code_files(remote: dict) -> str:
    files = sorted({ref.split(".")[0].split("--")[-1] + ".py" for ref in remote["auto_map"].values()})
    return ", ".join(files)


def _remote_details(remote: dict) -> dict:
    return {"auto_map": remote["auto_map"], "model_type": remote["model_type"],
            "trust_remote_code in the trainer config": remote["trusted_by"] or "not set"}


def _untrusted(ctx, remote: dict):
    """The launch's view: a model whose code transformers does not ship loads only with trust_remote_code in the
    trainer config (TRL's from_pretrained gets it through model_init_kwargs). trl-doctor's own --trust-remote-code
    only lets this check run that code; it does nothing for the job."""
    if remote["trusted_by"] or remote["native"]:
        return None
    loader = remote["auto_map"].get("AutoModelForCausalLM") or remote["auto_map"].get("AutoConfig")
    return fail(
        f"config.json declares its own code (auto_map: {loader}) for model_type {remote['model_type']!r}, which "
        f"transformers {ctx.version('transformers')} does not ship, and the trainer config does not set "
        "trust_remote_code: TRL's from_pretrained stops with \"... contains custom code which must be executed to "
        "correctly load the model ... pass the argument `trust_remote_code=True`\" before training starts; set "
        "`model_init_kwargs: {trust_remote_code: true}` once you trust that code (trl-doctor's --trust-remote-code "
        "does not reach the job)",
        manual("read the model folder's " + _code_files(remote) + ", then set model_init_kwargs.trust_remote_code: "
               "true (or the top-level trust_remote_code: true that `trl grpo` passes on)"),
        **_remote_details(remote))


def _probe_error(probe: dict, versions: str, remote):
    """The trainer was built but its own log-prob call raised on the model: say what the model lacks."""
    error = f"{probe['error_type']}: {probe['error']}"
    details = {"trainer method": probe["method"], "model forward": probe["model_forward"], "error": error,
               "raised at": probe["where"], "forward declares": probe["forward_params"],
               "forward takes **kwargs": probe["forward_has_var_kwargs"],
               "output embeddings": probe["output_embeddings"] or "None (get_output_embeddings() returned None)",
               "versions": versions}
    owner = f"the model's own code ({_code_files(remote)})" if remote is not None else "the model class"
    model = probe["model_forward"].rsplit(".", 1)[0]
    if probe["output_embeddings"] is None and ("NoneType" in probe["error"] or "get_output_embeddings" in probe["error"]
                                               or "weight" in probe["error"]):
        return fail(f"{model}.get_output_embeddings() returns None, and {probe['method']} projects the hidden states "
                    f"through it ({versions}): the first training step stops with \"{error}\"; {owner} must define "
                    "get_output_embeddings() returning its LM head (transformers' default finds only an `lm_head` "
                    "attribute), or load a native architecture", **details)
    kw = [k for k in ("logits_to_keep", "num_logits_to_keep") if k in probe["error"]]
    if probe["error_type"] == "TypeError" and kw:
        return fail(f"{probe['model_forward']} takes no {kw[0]} (and no **kwargs), which {probe['method']} passes "
                    f"({versions}): the first training step stops with \"{error}\"; {owner} must accept {kw[0]} and "
                    "return logits for the last positions only, or load a native architecture", **details)
    return fail(f"{probe['method']} raised on {model} ({versions}): \"{error}\"; the first training step "
                f"stops the same way", **details)


def _memory(ctx, vocab: int) -> dict[str, str]:
    """Logits memory per forward at the config's per-device batch and lengths, expected vs what the mismatch costs."""
    # the config object's own fields, not config_value: a key the installed release no longer has (max_prompt_length
    # in trl 1.x) sizes nothing, whatever the file writes
    cfg = trainer_config(ctx)
    batch = getattr(cfg, "per_device_train_batch_size", 1) or 1
    completion = getattr(cfg, "max_completion_length", None) or 256
    prompt, how = prompt_tokens(ctx, getattr(cfg, "max_prompt_length", None) or None)
    assumed = f" ({how})" if how else ""
    width = 2 if (getattr(cfg, "bf16", False) or getattr(cfg, "fp16", False)) else 4
    full = batch * (prompt + completion) * vocab * width
    needed = batch * (completion + 1) * vocab * width
    return {
        "config sizes": f"batch {batch} x (prompt {prompt} + completion {completion}) x vocab {vocab} x {width} bytes{assumed}",
        "logits at config sizes (expected)": _gib(needed),
        "logits at config sizes (mismatch)": _gib(full),
        "waste factor": f"{full / needed:.1f}x",
    }


def _gib(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"
