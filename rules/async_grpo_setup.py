"""TD023 async-grpo-setup: AsyncGRPOTrainer's rollout process, kernels and weight sync can start.

What it does
    For a script building trl.experimental.async_grpo's AsyncGRPOTrainer (trl >= 1.10), stopped
    after TRL's own set-up ran (capture/async_grpo.py): TRL's refusals there; the packages its
    rollout worker needs; pickles rewards, tools and environment factory as that worker does;
    the attention kernel against the launch's GPUs; the weight sync against processes, FSDP.

Why is this bad?
    - TRL refuses a LoRA on lm_head, recurrent or attention-sink models, liger: its ValueError.
    - Its rollout worker is built at construction: ImportError without vllm or aiohttp.
    - The worker pickles `reward_funcs`, `tools`, `environment_factory` for a spawned child when
      training starts (after the server is reached, the first weights sent): a lambda or a
      closure stops the job there ("... so they must be picklable"); spawn runs the main module
      again in the child, so a trainer built outside `if __name__ == "__main__":` is built twice.
    - Attention is FlashAttention-3 from the Hub (`kernels-community/flash-attn3`, via the
      `kernels` package): ImportError without it; compute capability 8.x/9.0 only (no V100, T4).
    - FSDP with more than one process: rank 0 sends to vLLM while the other ranks queue the next
      all-gather; the first sync hangs (trl#7103, open; trl#6797: above two ranks). Fail above
      two, warn at two or with a LoRA (a server with --enable-lora takes adapter files).
    - DeepSpeed: TRL's AsyncGRPO supports FSDP2 only (a warn).

Example
    reward_funcs=lambda completions, **kw: [...]
    -> fail: reward_funcs[0] (main.<locals>.<lambda>) cannot be pickled for AsyncGRPO's rollout ...

Fix safety
    Manual: what TRL says; pip install vllm aiohttp kernels; a module-level function; the main
    guard; Ampere or newer GPUs; one trainer process (or trl#7131's sync); an FSDP2 config.
"""

from __future__ import annotations

from typing import Any

from trl_doctor import ASYNC_GRPO, fail, Location, manual, passed, rule, warn
from trl_doctor.facts.launch.launcher import compute_capability, launch, package_version, process_count, sharding
from trl_doctor.facts.trl.async_grpo import (Built, attention_kernel, fsdp2_only, weight_sync_interleaved,
                                             construction_requirements)

TRL_WORDS = ("AsyncRolloutWorker forwards reward_funcs / tools / environment_factory to a spawned child process, so "
             "they must be picklable")
FA3_CAPABILITIES = "compute capability 8.x or 9.0 (Ampere, Ada, Hopper)"


@rule(
    id="TD023",
    slug="async-grpo-setup",
    title="AsyncGRPO's rollout process, attention kernels and weight sync can start on the launch",
    trainers=(ASYNC_GRPO,),
    fixable="never",
    static_skip="it judges what a launch command's script built",
)
def check(ctx):
    details: dict[str, Any] = {}
    findings = [*_refused(ctx, details), *_packages(ctx, details), *_spawned_child(ctx, details),
                *_attention(ctx, details), *_sharding(ctx, details), *_weight_sync(ctx, details)]
    for make, message, fix, location in findings:  # made once every part has added its details
        yield make(message, fix, location, **details)
    if not findings:
        said = f"{details.get('attention', 'the attention kernel')}; {details.get('weight sync', '')}".rstrip("; ")
        yield passed(f"the rewards, tools and environment factory pickle for the rollout process; {said}", **details)


def _found(make, message: str, fix=None, location=None) -> tuple:
    """A part's finding, made with every part's details (check)."""
    return make, message, fix, location


def _built(ctx) -> Built:
    return ctx.live.async_grpo if ctx.live is not None and ctx.live.async_grpo is not None else Built()


def _packages(ctx, details):
    """The packages AsyncGRPOTrainer's __init__ stops without (vllm, aiohttp), where the installed TRL requires them:
    its weight-transfer client for a full-weight sync, then its rollout worker (read from their source)."""
    built = _built(ctx)
    if built.rollout_worker_given:
        details["rollout worker"] = "the script gives its own rollout_worker"
    the_launch = launch(ctx)
    full_sync = not built.weight_transfer_given and not (ctx.live is not None and ctx.live.peft_config_given)
    for package, words, evidence in construction_requirements(full_weight_sync=full_sync,
                                                              rollout_worker=not built.rollout_worker_given):
        have = package_version(package)
        details[f"{package} (AsyncGRPO's)"] = "installed" if have else "not installed"
        if have is None and the_launch.software_here:
            yield _found(fail, f"{package} is not installed, and AsyncGRPOTrainer stops at construction: "
                         f"\"ImportError: {words}\" ({evidence.where})", manual(f"pip install {package}"))
        elif have is None:
            details[f"{package} (AsyncGRPO's)"] = f"not installed here ({the_launch.not_judged})"


def _sharding(ctx, details):
    """DeepSpeed where TRL's AsyncGRPO supports FSDP2 only."""
    shard = sharding(ctx)
    if shard.backend != "deepspeed" or launch(ctx).processes <= 1:
        return
    evidence = fsdp2_only()
    said = f" ({evidence.where}: \"AsyncGRPO is FSDP2-only\")" if evidence else ""
    yield _found(warn, f"DeepSpeed ({shard.configured_by}) with AsyncGRPOTrainer, which supports FSDP2 only for "
                 f"distributed training (TRL's AsyncGRPO docs: \"only FSDP2 is supported (DeepSpeed ZeRO is not)\")"
                 f"{said}", manual("launch with an FSDP2 accelerate config (fsdp_version: 2), as TRL's "
                                   "examples/accelerate_configs/fsdp2.yaml"))


def _refused(ctx, details):
    """TRL's own refusal in AsyncGRPOTrainer.__init__ (it ran for real, up to transformers' constructor)."""
    if _built(ctx).refused is None:
        return
    words, where = _built(ctx).refused
    details["refused by TRL"] = f"{words} ({where})"
    script = ctx.live.where
    yield _found(fail, f"AsyncGRPOTrainer refuses what the script built: {words} ({where}); the job stops at its "
                 "construction", None, Location(script[0], line=script[1]) if script else None)


def _spawned_child(ctx, details):
    refused = _built(ctx).unpicklable
    details["rollout process"] = ("each of reward_funcs, tools and environment_factory pickles (AsyncRolloutWorker "
                                  "pickles them for its spawned child when training starts)" if not refused else
                                  "; ".join(f"{u.what}: {u.error}" for u in refused))
    unguarded = _built(ctx).unguarded
    if unguarded is not None and not _built(ctx).rollout_worker_given:
        details["main module"] = (f"{unguarded[0]}:{unguarded[1]} builds the trainer outside "
                                  "`if __name__ == \"__main__\":`")
        yield _found(fail, "the script builds AsyncGRPOTrainer at its top level, outside an `if __name__ == "
                     "\"__main__\":` block: its rollout worker starts a child process with multiprocessing's spawn, "
                     "which runs the main module again in the child (as __mp_main__) before anything else, so the "
                     "child loads the model and builds and trains a trainer of its own; the job stops when training "
                     "starts (\"RuntimeError: AsyncRolloutWorker child exited during init\", or \"... did not signal "
                     "ready\" after its timeout)",
                     manual("put the script's training code under `if __name__ == \"__main__\":` (TRL's "
                            "examples/scripts/async_grpo.py calls main() there)"),
                     Location(unguarded[0], line=unguarded[1]))
    for u in refused:
        where = Location(u.where[0], line=u.where[1]) if u.where else None
        yield _found(fail, f"{u.what} ({u.name}) cannot be pickled for AsyncGRPO's rollout process: {u.error}. The "
                     "job stops when training starts, after the model loads, the vLLM server is reached and the first "
                     f"weights are sent (\"TypeError: {TRL_WORDS}\")",
                     manual(f"define {u.name} at module level (or use functools.partial, or a callable class "
                            "instance); tools must be module-level functions (TRL registers them by __name__)"),
                     where)


def _attention(ctx, details):
    found = attention_kernel()
    if found is None:
        details["attention"] = f"no Hub kernel named in trl {ctx.version('trl')}'s AsyncGRPO source"
        return
    kernel, evidence = found
    the_launch = launch(ctx)
    details["attention kernel"] = f"{kernel} ({evidence})"
    have = package_version("kernels")
    details["kernels package"] = "installed" if have else "not installed"
    if have is None and the_launch.software_here:
        yield _found(fail, f"AsyncGRPOTrainer trains its attention with {kernel}, which the `kernels` package loads "
                     "at the first forward, and `kernels` is not installed: the first step stops with an ImportError",
                     manual("pip install kernels"))
    elif have is None:
        details["kernels package"] = f"not installed here ({the_launch.not_judged}): it must be on the launch machine"
    gpus = the_launch.gpus
    if not gpus:
        details["attention"] = f"{kernel}: the GPUs are not judged ({the_launch.gpus_missing}; --target names them)"
        return
    older = sorted({g.get("name", "?") for g in gpus if (0, 0) < compute_capability(g) < (8, 0)})
    if older:
        yield _found(fail, f"AsyncGRPOTrainer trains its attention with {kernel}, which runs on {FA3_CAPABILITIES}; "
                     f"{', '.join(older)} {'is' if len(older) == 1 else 'are'} older: the first forward fails",
                     manual("train AsyncGRPO on Ampere or newer GPUs (A100, L40S, H100), or use GRPOTrainer"))
        return
    named = sorted({g.get("name", "?") for g in gpus})
    details["attention"] = f"{kernel} on {', '.join(named)}"


def _weight_sync(ctx, details):
    the_launch, shard = launch(ctx), sharding(ctx)
    n = the_launch.processes
    details["weight sync"] = f"{process_count(n)} ({the_launch.processes_from}), {shard.words}"
    if n <= 1 or shard.backend != "fsdp":
        return
    if _built(ctx).weight_transfer_given:
        details["weight sync"] += ": the script gives its own weight_transfer"
        return
    evidence = weight_sync_interleaved()
    if evidence is None:
        details["weight sync"] += f": trl {ctx.version('trl')} gathers every shard before the send"
        return
    details["weight sync code"] = str(evidence)
    words = (f"{process_count(n)} under FSDP ({shard.configured_by}): trl {ctx.version('trl')}'s AsyncGRPOTrainer "
             "sends each parameter to vLLM from rank 0 while the other ranks run on into the next FSDP2 all-gather "
             f"({evidence.where}), and the first weight sync hangs until the NCCL watchdog stops the job "
             "(trl#7103, open; trl#6797)")
    fix = manual("train with one trainer process, or a TRL that gathers every shard before the send (trl#7131)")
    if ctx.live.peft_config_given:
        yield _found(warn, words + "; a LoRA adapter goes to a server started with --enable-lora as files instead, "
                     "without this sync: start the server so", fix)
        return
    if n == 2:  # trl#6797 saw two trainer ranks sync (its deadlock was above 2); trl#7103 hung with any more than one
        yield _found(warn, words.replace("and the first weight sync hangs", "and the first weight sync can hang") +
                     "; trl#6797 saw two ranks get through", fix)
        return
    yield _found(fail, words, fix)
