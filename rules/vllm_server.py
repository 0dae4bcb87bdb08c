"""TD018 vllm-server: in server mode, the vLLM server is up, serves the trained model, has room for it.

What it does
    Server mode (AsyncGRPO's always; colocate passes, 0.14-0.15 skip): `GET /health`, `/v1/models`,
    `/server_info` (1.11+) or `/get_world_size/`, 2 s each, sent only to this machine (loopback,
    wildcard, own address or name; nothing looked up) or a host of `--allow-host HOST[:PORT]`. A
    server elsewhere: skip, saying what the client will ask, the start command and the --allow-host
    to probe it; --static contacts nothing. Down: fail (off the launch machine: skip; allowed remote
    refusing: warn). Another served model: fail (same folder name: warn); a `max_model_len` below
    longest prompt + completion, no `/server_info` (no dev mode) or no weight-transfer engine: fail;
    raw logprobs under importance sampling: warn. AsyncGRPO's LoRA: as TRL's select_adapter_sync.

Why is this bad?
    Server mode generates through a `trl vllm-serve` at `vllm_server_base_url` that nothing starts.
    Down, every process logs "Server is not up yet. Retrying in 2.0 seconds..." for
    `vllm_server_timeout` (240 s), GPUs taken, then dies with "ConnectionError: The vLLM server
    can't be reached" (open-r1#568, #543). Another model's server trains until the weight sync
    fails; a short `--max-model-len` rejects long prompts (trl#3569) or TRL raises IndexError
    (#3180). Server mode is TRL 0.16-0.29's default. TRL 0.16-1.10 serve their own app (`/health/`,
    `/get_world_size/`, `POST /generate/`); 1.11+ `vllm serve` (`/health`, `/v1/models`,
    `/server_info` in dev mode): a client of one kind fails against the other.

Example
    vllm_server_base_url: http://127.0.0.1:9   # use_vllm, server mode; nothing listens there
    -> fail: no vLLM server answers at http://127.0.0.1:9 (...): ... start it with `trl vllm-serve`

Fix safety
    Manual (the doctor starts no process): the start command (`CUDA_VISIBLE_DEVICES=<spare GPUs> trl
    vllm-serve --model <the trained model> --tensor-parallel-size <vllm_tensor_parallel_size or 1>
    --max-model-len <longest prompt + max_completion_length>`), or `vllm_mode: colocate`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trl_doctor import ASYNC_GRPO, Finding, fail, manual, passed, rule, skip, warn
from trl_doctor.facts.launch.launcher import launch
from trl_doctor.facts.launch.settings import config_value, settings, vllm_placement
from trl_doctor.facts.vllm.server import allow_words, client, model_names, probe, reach, same_model, server_target
from trl_doctor.facts.trl.async_grpo import adapter_serve, adapter_sync


@rule(
    id="TD018",
    slug="vllm-server",
    title="The vLLM server of server mode is up, serves the trained model and has room for the longest prompt",
    trainers=("grpo", "rloo", ASYNC_GRPO),
    fixable="never",
    static_skip="it asks the vLLM server",
)
def check(ctx):
    s = settings(ctx)
    its = client(ctx.trainer)
    if not its.always_server and not config_value(ctx, "use_vllm", False):
        yield skip("use_vllm is off: generation runs in the trainer, no vLLM server is involved")
        return
    mode, why = ("server", its.always_server) if its.always_server else _mode(ctx)
    if mode == "colocate":
        yield passed(why, **{"vLLM mode": "colocate"})
        return
    if mode != "server":
        yield skip(why)
        return
    target = server_target(ctx)
    endpoints = its.endpoints
    where = reach(ctx, target)
    local = where.here
    need, need_words = _need(ctx, s)
    details = {
        "vLLM mode": why,
        "server": f"{target.base_url} (from {target.source})",
        "server host": "this machine" if local else (
            f"another machine, probed as allowed ({where.allowed})" if where.allowed else "another machine"),
        "client": f"{endpoints.where}: health {endpoints.health}"
                  + (", reads /v1/models" if endpoints.reads_models else "")
                  + (", posts /generate/" if endpoints.posts_generate else ""),
        "max-model-len needed": need_words,
    }
    start = _start_command(ctx, its, need)
    colocate = "vllm_mode" in s.fields
    fix = manual(f"start the server first: `{start}`" + (" (on the server machine)" if not local else "")
                 + (", or set `vllm_mode: colocate` to run vLLM inside the training processes" if colocate else ""))
    if not where.may_probe:
        details["probe"] = "not contacted: another machine, and no --allow-host names it"
        yield skip(f"the vLLM server at {target.base_url} is on another machine, which trl-doctor does not contact "
                   f"unless asked: not probed. The job's client ({endpoints.where}) will ask it for "
                   f"{endpoints.health}" + (" and /v1/models" if endpoints.reads_models else "")
                   + f"; it must serve {ctx.config.model.ref}" + (f" with --max-model-len {need} or more" if need else "")
                   + f" (`{start}` on that machine). {allow_words(target).capitalize()}", **details)
        return
    got = probe(target, endpoints)
    details["probe"] = f"{got.elapsed:.2f} s"
    h = got.health
    timeout = config_value(ctx, "vllm_server_timeout", 240)
    if h.status is None:
        details["health"] = f"GET {got.health_path}: {h.error}"
        consequence = (f"the job would retry for vllm_server_timeout ({timeout} s), after taking its GPUs and loading "
                       f"the model, then stop with \"{its.unreached}\"")
        if not local:
            text = (f"the vLLM server at {target.base_url} is on another machine and {h.error} from here: ")
            if h.kind == "refused":
                yield warn(text + "its host answered but nothing listens on that port; unless the launch machine "
                           f"reaches another server there, {consequence}", fix, **details)
            else:
                yield skip(text + "this check may run away from the launch machine (a laptop, a login node); run it "
                           f"where the job launches to probe the server. If the server is not up, {consequence}",
                           **details)
            return
        if not launch(ctx).judged_here:  # a local server runs on the launch machine: this one is not it
            yield skip(f"no vLLM server answers at {target.base_url} ({h.error}), but this is not the launch machine "
                       f"({'--target ' + launch(ctx).target if launch(ctx).target else 'no GPU here'}): the server "
                       f"runs there; start it with `{start}` before the job, or {consequence}", **details)
            return
        yield fail(f"no vLLM server answers at {target.base_url} ({h.error}): {consequence}; start it with `{start}`"
                   + (" or set `vllm_mode: colocate`" if colocate else ""), fix, **details)
        return
    if h.status >= 400:
        details["health"] = f"GET {got.health_path}: HTTP {h.status}"
        if not local and h.status in (502, 503, 504):
            yield warn(f"the vLLM server at {target.base_url} answers HTTP {h.status} (a proxy or a server still "
                       "loading): the job waits for it for vllm_server_timeout " f"({timeout} s)", fix, **details)
            return
        yield fail(f"{target.base_url} answers but is not a healthy vLLM server: GET {got.health_path} gives HTTP "
                   f"{h.status}; the trainer waits for vllm_server_timeout ({timeout} s) and then stops with "
                   f"{its.unreached.split(':')[0]}; start the server with `{start}`", fix, **details)
        return
    details["health"] = f"GET {got.health_path}: HTTP {h.status}"
    # it runs: what it serves, or how, is what to change
    fix = manual(f"restart the server as the job needs it: `{start}`" + (" (on the server machine)" if not local else ""))
    found, served = _served(ctx, got, its, target, need, need_words, fix, start)
    details.update(served)
    yield from (replace(f, details=dict(details)) for f in found)


def _server_info(ctx, got, its, target, fix, start, details: dict) -> list[Finding]:
    """What TRL 1.11+'s client reads from `/server_info` (trl/generation/vllm_client.py, grpo_trainer.py): vLLM serves
    it only in dev mode; a server without a weight-transfer engine cannot take the trainer's weights; importance
    sampling needs the processed logprobs."""
    info = got.server_info
    if info is None or info.status is None:
        return []
    if info.status == 404:
        return [fail(f"the vLLM server at {target.base_url} "
                     f"{its.no_server_info.format(where=its.endpoints.where)}: `{start}`", fix)]
    data = info.data if info.status == 200 and isinstance(info.data, dict) else None
    if data is None:
        return []
    out = []
    if "weight_transfer_config" in data and data["weight_transfer_config"] is None:
        out.append(fail(f"the vLLM server at {target.base_url} has no weight-transfer engine (/server_info: "
                        "weight_transfer_config is null): TRL raises \"RuntimeError: The vLLM server ... has no "
                        "weight-transfer engine. Restart it with `--weight-transfer-config '{\"backend\": \"nccl\"}'`\" "
                        f"before the first step (`trl vllm-serve` passes it): `{start}`", fix))
    if its.adapter_sync and config_value(ctx, "use_peft", False):
        out += _adapter_sync(ctx, data, target, fix, details)
    mode = (data.get("model_config") or {}).get("logprobs_mode") if isinstance(data.get("model_config"), dict) else None
    judged = its.logprobs_always or config_value(ctx, "vllm_importance_sampling_correction", True)
    if mode and mode != "processed_logprobs" and judged:
        out.append(warn(f"the vLLM server at {target.base_url} runs with --logprobs-mode {mode}: {its.logprobs}: "
                        f"`{start}`", fix))
    return out


def _adapter_sync(ctx, data: dict, target, fix, details: dict) -> list[Finding]:
    """A LoRA trained by AsyncGRPOTrainer against this server, as TRL's own select_adapter_sync decides at
    construction on the same /server_info answer (its words, its verdict; `details` gets the verdict)."""
    live = ctx.live
    decided = adapter_sync(data, getattr(live, "model", None), getattr(live, "args", None))
    if decided is None:
        details["adapter sync"] = "merged full weights (the installed TRL has no adapter-only sync)"
        return []
    if decided.unknown:
        details["adapter sync"] = f"not judged: {decided.unknown}"
        return []
    details["adapter sync"] = (f"{'the adapter alone' if decided.adapter_only else 'merged full weights'} "
                               f"(TRL's select_adapter_sync, {decided.where.where})")
    out = []
    for level, words in decided.said:
        if level == "raise":
            out.append(fail(f"the vLLM server at {target.base_url} cannot take the LoRA AsyncGRPOTrainer syncs to "
                            f"it: TRL raises at construction (ValueError, {decided.where.where}): \"{words}\"", fix))
        else:
            out.append(warn(f"the vLLM server at {target.base_url}: TRL warns at construction "
                            f"({decided.where.where}): \"{words}\"", fix))
    return out


def _mode(ctx) -> tuple[str, str]:
    """("server" / "colocate" / "in-process" / "unknown", the reason in words)."""
    trl = ctx.version("trl")
    mode, source = vllm_placement(ctx)
    if source == "vllm_device":
        return "in-process", (f"trl {trl} runs vLLM in-process on a spare GPU (`vllm_device`), no server "
                              "(gpu-capacity and version-skew judge that mode)")
    if source == "no vllm_mode":
        return "server", f"server (trl {trl} has no vllm_mode: server mode only)"
    if mode is None:
        return "unknown", "the installed TRL names no vllm_mode and the config sets none"
    source = "the config's vllm_mode" if source == "config" else f"trl {trl}'s default vllm_mode"
    if mode == "server":
        return "server", f"server ({source})"
    return str(mode), (f"vllm_mode is {mode!r} ({source}): vLLM runs inside the training processes, no server "
                       "to start or reach")


def _need(ctx, s) -> tuple[int | None, str]:
    """(longest prompt + completion, in words); (None, why) when the prompts cannot be measured."""
    completion = s.max_completion_length
    try:
        from trl_doctor.facts.inputs.chat import prompt_lengths

        longest = prompt_lengths(ctx)["max"]
    except Exception as exc:  # no dataset, no tokenizer, a template that raises: other rules report them
        return None, f"unknown (the prompts could not be measured: {type(exc).__name__})"
    if longest is None or completion is None:
        return None, "unknown (no prompt measured, or no max_completion_length)"
    limit = config_value(ctx, "max_prompt_length") if "max_prompt_length" in s.fields else None
    eff = min(longest, limit) if limit else longest
    cut = f" after max_prompt_length {limit}" if limit and longest > limit else ""
    return eff + completion, f"{eff + completion} (longest prompt {eff} tokens{cut} + max_completion_length {completion})"


def _start_command(ctx, its, need: int | None) -> str:
    tp = config_value(ctx, "vllm_tensor_parallel_size", 1) or 1
    model = ctx.config.model
    where = model.ref if model.in_cache or not model.path.is_dir() else str(model.path)
    cmd = its.serve.format(model=where, tp=tp)
    lora = (adapter_serve(getattr(ctx.live, "model", None), getattr(ctx.live, "args", None))
            if its.adapter_sync and config_value(ctx, "use_peft", False) else None)
    if lora is not None:  # the adapter alone goes to the server at each sync (~1% of the bytes)
        cmd = f"{lora[0]} {cmd} {lora[1]}"
    cmd = "CUDA_VISIBLE_DEVICES=<spare GPUs> " + cmd
    if need:
        cmd += f" --max-model-len {need}"
    target_port = server_target(ctx).port
    if target_port != 8000:
        cmd += f" --port {target_port}"
    return cmd


def _served(ctx, got, its, target, need, need_words, fix, start) -> tuple[list[Finding], dict[str, Any]]:
    """What the running server serves: (the findings, without details; the details: what it answered)."""
    details: dict[str, Any] = {}
    endpoints = its.endpoints
    if not got.served:
        models = got.models
        details["/v1/models"] = (f"HTTP {models.status}" if models and models.status is not None
                                 else (models.error if models else "not asked"))
        if got.world_size is not None:
            details["world size"] = got.world_size
        if endpoints.reads_models and models is not None and models.status == 404:
            return [fail(f"the server at {target.base_url} is up but has no /v1/models, which the installed TRL's "
                         f"client ({endpoints.where}) reads at start-up: it is a `trl vllm-serve` of TRL 1.10 or older "
                         f"(TRL's own server); restart it with the installed TRL: `{start}`", fix)], details
        return [passed(f"the vLLM server at {target.base_url} is up ({got.health_path} answers); it does not report "
                       "its model or max_model_len (TRL's own server, 0.16-1.10), so they are not checked")], details
    entry = got.served[0]
    served_path = str(entry.get("root") or entry.get("id") or "")
    served_len = entry.get("max_model_len")
    details["served model"] = f"{entry.get('id')} (root {entry.get('root')})"
    details["served max_model_len"] = served_len
    trained = model_names(ctx.config.model.ref) | {str(ctx.config.model.path)}
    names = [str(v) for v in (entry.get("root"), entry.get("id")) if v]
    match = max((same_model(trained, n) or "" for n in names), key=lambda m: {"same": 2, "same name": 1}.get(m, 0))
    problems = []
    if not match:
        problems.append(fail(f"the vLLM server at {target.base_url} serves {served_path}, not the trained model "
                             f"{ctx.config.model.ref}: completions would come from another model (until the first "
                             f"weight sync fails on its names or shapes); restart it with `{start}`", fix))
    elif match == "same name":
        problems.append(warn(f"the vLLM server serves {served_path} and the trained model is {ctx.config.model.ref}: "
                             "the same name under another folder; make sure it is the same checkpoint", fix))
    if isinstance(served_len, int) and need is not None and served_len < need:
        rejected = (its.too_long or
                    f"vLLM rejects or cuts those requests (\"The decoder prompt ... is longer than the maximum model "
                    f"length of {served_len}\")")
        problems.append(fail(f"the vLLM server's max_model_len {served_len} is below the longest prompt + "
                             f"max_completion_length = {need_words}: {rejected}; restart it with --max-model-len "
                             f"{need}: `{start}`", fix))
    problems += _server_info(ctx, got, its, target, fix, start, details)
    if its.endpoints.posts_generate:
        problems.append(fail(f"the server at {target.base_url} is vLLM's own OpenAI server, but the installed TRL's "
                             f"client ({endpoints.where}) posts /generate/, which only TRL's `trl vllm-serve` serves; "
                             f"start it with `{start}`", fix))
    if problems:
        return problems, details
    room = f", max_model_len {served_len} ≥ {need} needed" if isinstance(served_len, int) and need else (
        f", max_model_len {served_len}" if served_len else "")
    return [passed(f"the vLLM server at {target.base_url} is up and serves {served_path}{room}")], details
