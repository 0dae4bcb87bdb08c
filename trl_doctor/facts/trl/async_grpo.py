"""What the installed TRL's AsyncGRPOTrainer (trl.experimental.async_grpo, trl >= 1.10) is and does, read from its
source without importing it, and why each rule written for GRPOTrainer does or does not judge it.

AsyncGRPOTrainer is no GRPOTrainer: it subclasses TRL's `_BaseTrainer`, takes a model id only, generates on a `vllm
serve` it never starts (`vllm_server_base_url`), scores rewards in a spawned child process (its reward functions,
tools and environment factory are pickled there), streams its weights to the server over NCCL with vLLM's
weight-transfer API, and trains with FlashAttention-3 kernels fetched by the `kernels` package. The capture recognizes
it by its class (no import of it up front); `rules/async_grpo_setup.py` judges what is known before launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trl_doctor.facts.inputs.text import line_of as _line, line_text as _line_text
from trl_doctor.facts.trl.installed import module_text as _text

MODULE = "trl.experimental.async_grpo"
TRAINER_FILE = "experimental/async_grpo/async_grpo_trainer.py"
CLASS = "AsyncGRPOTrainer"
# what AsyncRolloutWorker.start() pickles for its spawned child (trl 1.16 async_rollout_worker.py: "reward_funcs,
# tools, and environment_factory (and anything they close over) must be picklable")
PICKLED = ("reward_funcs", "tools", "environment_factory")


@dataclass(frozen=True)
class Built:
    """What an AsyncGRPOTrainer's __init__ built, as the capture read it (capture/async_grpo.py)."""

    unpicklable: tuple = ()  # capture.async_grpo.Unpicklable: what pickle refuses of its rewards, tools, environments
    refused: tuple[str, str] | None = None  # TRL's own refusal in its __init__: (its words, trl/<file>:<line>)
    weight_transfer_given: bool = False  # the script gave its own weight_transfer (it owns the sync)
    rollout_worker_given: bool = False  # the script gave its own rollout_worker (it owns generation and scoring)
    # (file, line) of the main module's top-level statement that built the trainer, outside any
    # `if __name__ == "__main__":` block: the rollout worker's spawned child runs it again (capture/async_grpo.py)
    unguarded: tuple[str, int] | None = None


def is_async_grpo(cls: type | None) -> bool:
    """Whether `cls` is TRL's AsyncGRPOTrainer or a subclass of it (by its classes' names and modules: nothing
    imported)."""
    return cls is not None and any(c.__name__ == CLASS and c.__module__.startswith(MODULE) for c in cls.__mro__)


@dataclass(frozen=True)
class Evidence:
    where: str  # trl/<file>:<line>
    code: str  # the line, stripped

    def __str__(self) -> str:
        return f"{self.where}: `{self.code}`"


def _evidence(rel: str, text: str, pos: int) -> Evidence:
    return Evidence(f"trl/{rel}:{_line(text, pos)}", _line_text(text, pos))


def _find(pattern: str, files: tuple[str, ...]) -> tuple[re.Match, Evidence] | None:
    for rel in files:
        text = _text(rel)
        m = re.search(pattern, text) if text else None
        if m is not None:
            assert text is not None  # searched
            return m, _evidence(rel, text, m.start())
    return None


_KERNEL_FILES = ("experimental/async_grpo/packing.py", TRAINER_FILE)


_KERNEL_RE = re.compile(r"""(?:get_kernel\(|attn_implementation=)\s*["']([\w.-]+/[\w.-]+)["']""")


def attention_kernel() -> tuple[str, Evidence] | None:
    """The Hub kernel the installed AsyncGRPOTrainer trains its attention with on NVIDIA GPUs, and where it says so:
    `get_kernel("kernels-community/flash-attn3", ...)` (trl 1.16's tree attention, packing.py; ROCm gets
    `kernels-community/aiter-flash-attn` there) or `attn_implementation="kernels-community/flash-attn3"` (trl
    1.10-1.15). None when neither is found."""
    for rel in _KERNEL_FILES:
        text = _text(rel)
        for m in _KERNEL_RE.finditer(text or ""):
            if "aiter" not in m.group(1):  # AMD's (torch.version.hip)
                assert text is not None  # a match was found in it
                return m.group(1), _evidence(rel, text, m.start())
    return None


def weight_sync_interleaved() -> Evidence | None:
    """Where the installed AsyncGRPOTrainer sends its weights to vLLM from rank 0 while the streaming iterator's FSDP2
    `full_tensor()` all-gathers run on every rank, one parameter at a time (`send_weights(self._streaming_iter())`,
    the other ranks `for _ in self._streaming_iter(): pass`): the two NCCL groups interleave and the first sync hangs
    with more than one trainer rank (trl#7103, open; the fix, trl#7131, gathers every shard before the send). None when
    the source gathers first (or has no such send)."""
    found = _find(r"send_weights\(\s*self\._streaming_iter\(\)\s*\)", (TRAINER_FILE,))
    return found[1] if found else None


_REQUIRES_RE = re.compile(r"""if not is_(\w+)_available\(\):\s*raise ImportError\(\s*["']([^"']+)["']""")


# What AsyncGRPOTrainer.__init__ builds that refuses to start without a package, in the order it builds them (trl
# 1.16: the NCCL weight-transfer client at async_grpo_trainer.py:1353, then the rollout worker at :1367)
_WEIGHT_TRANSFER = "experimental/async_grpo/weight_transfer.py"  # WeightTransferClient
_ROLLOUT_WORKER = "experimental/async_grpo/async_rollout_worker.py"  # AsyncRolloutWorker


def construction_requirements(*, full_weight_sync: bool, rollout_worker: bool) -> list[tuple[str, str, Evidence]]:
    """(package, TRL's words, where) for each package AsyncGRPOTrainer.__init__ stops without, at the first place the
    installed TRL requires it (`if not is_vllm_available(): raise ImportError(...)`): the WeightTransferClient it builds
    for a full-weight NCCL sync (no weight_transfer given and no PEFT adapter, which goes to the server as files),
    then its AsyncRolloutWorker (vllm, aiohttp) unless the script gives its own. Read on an H100 on 2026-11-26: TRL's
    example without vLLM stops at WeightTransferClient's ImportError, before the rollout worker's."""
    built = [rel for rel, wanted in ((_WEIGHT_TRANSFER, full_weight_sync), (_ROLLOUT_WORKER, rollout_worker)) if wanted]
    out, seen = [], set()
    for rel in built:
        text = _text(rel) or ""
        for m in _REQUIRES_RE.finditer(text):
            if m.group(1) not in seen:
                seen.add(m.group(1))
                out.append((m.group(1), m.group(2), _evidence(rel, text, m.start())))
    return out


def fsdp2_only() -> Evidence | None:
    """Where the installed AsyncGRPOTrainer says it is FSDP2-only (trl 1.16: "AsyncGRPO is FSDP2-only"; TRL's docs:
    "For distributed training, only FSDP2 is supported (DeepSpeed ZeRO is not)")."""
    found = _find(r"FSDP2-only", (TRAINER_FILE,))
    return found[1] if found else None


CLIENT_FILE = "experimental/async_grpo/vllm_client.py"
# how TRL's own AsyncGRPO example starts its server (examples/scripts/async_grpo.py at f2cd57710, its docstring): dev
# mode for /server_info, /pause and /init_weight_transfer_engine; NCCL weight transfer; the sampled distribution's
# log-probabilities, which the trainer's ratio is taken against
_ADAPTER_SYNC_RE = re.compile(r"^def select_adapter_sync\(", re.M)


@dataclass(frozen=True)
class AdapterSync:
    """What TRL's own `select_adapter_sync` said of the script's LoRA against one `/server_info` answer."""

    said: tuple[tuple[str, str], ...] = ()  # (level, TRL's words): "raise" for its ValueError, "warn" per warning
    adapter_only: bool | None = None  # its verdict: syncs push the adapter alone (True) or merged weights (False)
    where: Evidence | None = None  # the function in the installed TRL
    unknown: str | None = None  # why it was not asked (then `said` is empty)


def adapter_sync(server_info: dict, model, args) -> AdapterSync | None:
    """How the installed AsyncGRPOTrainer syncs the script's LoRA with the server that answered `/server_info`:
    TRL's own `select_adapter_sync` (trl 1.16, async_grpo_trainer.py: "a pure function of what the server reported
    and what is about to be trained, so it can be tested with the dict `/server_info` returns rather than with a
    server"), called on that answer with the PEFT model and the config the script built, from the module the script
    itself imported (nothing of async_grpo is imported here). Its warnings (it falls back to merging the adapter into
    the base weights and pushing them all every sync: no `--enable-lora`, data parallel, or an adapter vLLM cannot
    serve: DoRA, modules_to_save, biases, lm_head...) and its ValueError (a `--max-lora-rank` or `--max-loras` too
    small: the job stops at construction) are its words. None where the installed TRL has no such function (it then
    always pushes merged weights)."""
    from trl_doctor.facts.trainer_run.heard import hearing

    text = _text(TRAINER_FILE) or ""
    m = _ADAPTER_SYNC_RE.search(text)
    if m is None:
        return None
    where = _evidence(TRAINER_FILE, text, m.start())
    decide = getattr(_script_module(), "select_adapter_sync", None)
    if decide is None or model is None or args is None or not hasattr(model, "peft_config"):
        return AdapterSync(where=where, unknown="the script's PEFT model or TRL's module is not in this process")
    with hearing() as heard:  # TRL's warnings, as the smoke step hears them
        try:
            adapter_only, refused = bool(decide(dict(server_info), model, args)), None
        except ValueError as exc:
            adapter_only, refused = False, " ".join(str(exc).split())
        except Exception as exc:  # an answer it cannot read (a key missing), accelerate's logging state: not its verdict
            return AdapterSync(where=where, unknown=f"TRL's select_adapter_sync raised {type(exc).__name__}: {exc}")
    said = tuple(("warn", h["message"]) for h in heard if h["library"] == "trl")
    return AdapterSync(said + ((("raise", refused),) if refused else ()), adapter_only, where)


def _script_module():
    """TRL's async_grpo_trainer module as the script imported it (None where it did not: nothing is imported here)."""
    import sys

    return sys.modules.get(f"{MODULE}.async_grpo_trainer")


def adapter_serve(model, args) -> tuple[str, str] | None:
    """(environment, flags) a `vllm serve` needs to take the script's LoRA as an adapter, as TRL's own words for the
    server name them (select_adapter_sync's warning and ValueErrors: `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`,
    `--enable-lora --max-lora-rank <round_lora_rank(rank)>`, `--max-loras <max_staleness + 2>`), read with TRL's own
    functions from the module the script imported; None where the installed TRL syncs no adapter alone, or this
    adapter cannot be one (TRL syncs merged weights whatever the server's flags)."""
    module = _script_module()
    validate, round_rank = (getattr(module, name, None) for name in ("validate_lora_for_vllm_sync", "round_lora_rank"))
    if validate is None or round_rank is None or not hasattr(model, "peft_config"):
        return None
    try:
        config = validate(model)
        rank = round_rank(max([config.r, *config.rank_pattern.values()]))
        staleness = int(getattr(args, "max_staleness", 0) or 0)
    except Exception:  # ValueError: an adapter vLLM cannot serve; anything else: not TRL's verdict to restate
        return None
    return "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1", f"--enable-lora --max-lora-rank {rank} --max-loras {staleness + 2}"


SERVE = ("VLLM_SERVER_DEV_MODE=1 vllm serve {model} --logprobs-mode processed_logprobs "
         "--weight-transfer-config '{{\"backend\":\"nccl\"}}'")

# What AsyncGRPO's own vLLM client meets (facts/vllm/server.py: Client; trl 1.16 experimental/async_grpo)
ALWAYS_SERVER = ("AsyncGRPOTrainer generates on the `vllm serve` at vllm_server_base_url, always (AsyncGRPOConfig has "
                 "no use_vllm)")
UNREACHED = "TimeoutError: Timed out after ... waiting for vLLM server at ..."
NO_SERVER_INFO = ("has no /server_info: it runs without VLLM_SERVER_DEV_MODE=1, which AsyncGRPOTrainer requires for "
                  "/server_info, /pause and /init_weight_transfer_engine ({where}): its first weight sync fails")
# its rollout worker posts each prompt with max_tokens=max_completion_length (async_rollout_worker.py
# `_generate_one_turn`); vLLM answers a request longer than its max_model_len with HTTP 400, which the worker's `_post`
# retries 3 times (aiohttp.ClientError) and then raises: its generation loop re-raises the task's exception (`raise
# task.exception()`) and the worker process stops, and the trainer with it
TOO_LONG = ("vLLM answers those requests with HTTP 400, AsyncGRPO's rollout worker retries each 3 times and then "
            "stops (its generation loop re-raises the error), and the job stops with it")
LOGPROBS = ("AsyncGRPOTrainer takes the rollouts' log-probabilities from the server as the old policy's, and its own "
            "are the sampled distribution's (temperature applied); TRL's AsyncGRPO example starts the server with "
            "--logprobs-mode processed_logprobs")


def client_text() -> tuple[str, str] | None:
    """(trl/<file>, text) of the installed AsyncGRPO's own vLLM client (what it asks the server), or None."""
    text = _text(CLIENT_FILE)
    return (f"trl/{CLIENT_FILE}", text) if text else None


# Why each rule written for GRPOTrainer does not judge AsyncGRPOTrainer (the rules open to any trainer, and
# async-grpo-setup, do). Read from trl 1.16's trl/experimental/async_grpo.
NOT_JUDGED = {
    "vllm-tokenizer-drift": "AsyncGRPOTrainer generates on a `vllm serve` started apart from the job, with the model "
                            "it was started with: the server's tokenizer is not in the launch to compare",
    "logits-contract": "AsyncGRPOTrainer scores tokens with its own fused LM head (add_fused_lm_head), not with the "
                       "model's logits: the contract this rule probes is GRPOTrainer's",
    "eos-termination": "AsyncGRPOTrainer's completions stop on the vLLM server, at the eos ids its rollout worker "
                       "sends; this rule's probe runs GRPOTrainer's own generation",
    "value-model": "PPO's value model: AsyncGRPO has none",
    "smoke-step": "AsyncGRPOTrainer's step needs its `vllm serve` (weights streamed over NCCL) and FlashAttention-3 "
                  "kernels on a GPU, so no step is taken here; async-grpo-setup judges what is known before launch",
    "gpu-capacity": "its memory estimate is GRPOTrainer's (a reference model, colocated vLLM); AsyncGRPOTrainer trains "
                    "without a reference model beside a server of its own",
    "trainer-config": "the script built AsyncGRPOConfig itself, so TRL's own __post_init__ has already accepted its "
                      "keys",
    "batch-geometry": "AsyncGRPOTrainer has no generation-batch arithmetic to refuse: it trains on the rollouts its "
                      "queue holds, per_device_train_batch_size of them a micro-batch",
    "context-length": "AsyncGRPOTrainer's length limit is the vLLM server's --max-model-len, which the launch does "
                      "not say",
    "chat-template": "AsyncGRPOTrainer applies the chat template in its rollout worker's child process, a path this "
                     "rule does not read yet",
    "dataset-schema": "AsyncGRPOTrainer reads its rows in its rollout worker's child process (and an environment "
                      "may own the prompts), a path this rule does not read yet",
    "reward-functions": "AsyncGRPOTrainer calls its rewards in a spawned child process with its own arguments; "
                        "async-grpo-setup judges whether they can reach that process",
    "precision-and-attention": "AsyncGRPOTrainer sets its own attention (FlashAttention-3 from the Hub's kernels) "
                               "whatever the script asks: async-grpo-setup judges that kernel on the launch's GPUs",
    "distributed-setup": "AsyncGRPOTrainer loads its model itself with device_map=None and shards with FSDP2: "
                         "async-grpo-setup judges its processes",
    "vllm-weights": "AsyncGRPOTrainer streams its weights with its own WeightTransferClient (vLLM's weight-transfer "
                    "API), not GRPOTrainer's sync: async-grpo-setup judges the multi-rank sync",
    "generation-settings": "AsyncGRPOTrainer's sampling settings go from AsyncGRPOConfig to the server in its rollout "
                           "worker (temperature, top_p, top_k, min_p, repetition_penalty), a path this rule does not "
                           "read",
}


def not_judged(slug: str) -> str:
    """Why rule `slug` says `skip` for an AsyncGRPOTrainer."""
    why = NOT_JUDGED.get(slug)
    if why is None:
        return f"not judged for AsyncGRPOTrainer ({MODULE}): {slug} judges GRPO, RLOO and PPO trainers"
    return f"not judged for AsyncGRPOTrainer ({MODULE}): {why}"
