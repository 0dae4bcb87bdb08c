"""The trainer run shared by the probes and the smoke step: one child process builds the installed TRL's
real trainer on the miniature twin, runs the logits probe, then (unless --no-smoke) one optimizer step
with the termination probe's end-of-turn forcing. Rules read one cached result; nothing runs twice.

The child is started by the rules' `prepare` hook before any check runs, so its imports overlap the
static rules; the spec is sent when the first rule asks for the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

ROWS = 4  # prompts handed to the child: enough for one generation batch and a spare
FORCE_AFTER = 3  # the termination probe forces the end-of-turn token as the 4th completion token
MAX_COMPLETION = 8

TRAINERS = ("grpo", "rloo")  # the trainers this run knows how to build


def start(ctx) -> None:
    """prepare hook: start the child early (idempotent)."""
    if ctx.trainer in TRAINERS and "trainer_run_proc" not in ctx.scratch and "trainer_run" not in ctx.scratch:
        ctx.scratch["trainer_run_proc"] = _spawn(ctx)


def _spawn(ctx) -> subprocess.Popen:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "WANDB_DISABLED": "true", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONWARNINGS": "ignore"})
    if _cpu_only(ctx):
        env["CUDA_VISIBLE_DEVICES"] = ""
    log_path = ctx.workdir / "trainer-run.log"
    ctx.scratch["trainer_run_log"] = log_path
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trl_doctor.rules._smoke_child", "--wait", ctx.trainer],
            cwd=str(ctx.workdir), env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
        )

    def stop() -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    ctx.on_close(stop)
    return proc


def _cpu_only(ctx) -> bool:
    """Decided without importing torch: --device cpu, or NVML sees no GPU."""
    if ctx.options.device == "cpu":
        return True
    if ctx.options.device == "cuda":
        return False
    from trl_doctor._env import gpus

    return not gpus()[0]


def trainer_run(ctx) -> dict[str, Any]:
    """The run's outcome: {"outcome": ok|timeout|crashed|failed, "result" or "error"..., "details": {...}}.
    Raises Unavailable when the trainer cannot be built for a reason another rule reports."""
    if "trainer_run" not in ctx.scratch:
        ctx.scratch["trainer_run"] = _run(ctx)
    return ctx.scratch["trainer_run"]


def _run(ctx) -> dict[str, Any]:
    from trl_doctor import Unavailable
    from trl_doctor._trl import trainer_class

    if ctx.trainer not in TRAINERS:
        raise Unavailable(f"the {ctx.trainer.upper()} trainer run is not implemented yet")
    cls = trainer_class(ctx.trainer)
    if cls is None:
        raise Unavailable(f"trl {ctx.version('trl')} has no {ctx.trainer.upper()} trainer")
    import inspect

    if "reward_funcs" not in inspect.signature(cls.__init__).parameters:
        # RLOOTrainer before trl 0.22 is the PPO-style trainer (policy, ref_policy, reward_model)
        raise Unavailable(f"trl {ctx.version('trl')}'s {cls.__name__} has the old PPO-style API (before trl 0.22), "
                          "which the trainer run does not build yet")
    for need in ("trainer_config", "tokenizer", "model_config", "dataset"):
        ctx.need(need)
    if not ctx.config.reward_funcs and not ctx.config.get("reward_model_name_or_path"):
        raise Unavailable("the config names no `reward_funcs` and no `reward_model_name_or_path`")

    spec = _spec(ctx)
    spec_path = ctx.workdir / "trainer-run-spec.json"
    result_path = ctx.workdir / "trainer-run-result.json"
    spec_path.write_text(json.dumps(spec, default=str))
    proc = ctx.scratch.pop("trainer_run_proc", None) or _spawn(ctx)
    started = time.perf_counter()
    try:
        proc.stdin.write(f"{spec_path} {result_path}\n".encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the child already died while importing: its log says why
    try:
        code = proc.wait(timeout=ctx.options.smoke_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    details = {"device": spec["device"], "model": spec["model_label"], "wall_s": round(time.perf_counter() - started, 2)}
    tail = _tail(ctx.scratch["trainer_run_log"])
    if code is None:
        return {"outcome": "timeout", "details": details, "log_tail": tail, "limit": ctx.options.smoke_timeout}
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    if result is None:
        return {"outcome": "crashed", "details": details, "log_tail": tail, "code": code}
    if not result.get("ok"):
        return {"outcome": "failed", "details": details, "error": result}
    return {"outcome": "ok", "details": details, "result": result, "spec": spec}


def _spec(ctx) -> dict[str, Any]:
    from trl_doctor._twin import parameter_count

    from ._chat import completion_terminator

    info = ctx.trainer_config_info
    raw = ctx.config.raw
    device = ctx.device
    tok = ctx.tokenizer
    rows = ctx.dataset.select(range(min(ROWS, len(ctx.dataset)))).to_list()
    stop = completion_terminator(tok, rows)
    gen = ctx.generation_config
    gen_eos = gen.eos_token_id if gen is not None else None
    suppress = {tok.eos_token_id, stop["id"], *(gen_eos if isinstance(gen_eos, list) else [gen_eos])} - {None}
    overrides = {
        "output_dir": str(ctx.workdir / "smoke-output"),
        "max_steps": 1,
        "num_train_epochs": 1,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "num_generations": 2,
        "generation_batch_size": None,
        "steps_per_generation": None,
        "num_iterations": 1,
        "max_completion_length": MAX_COMPLETION,
        "logging_steps": 1,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "push_to_hub": False,
        "log_completions": False,
        "use_vllm": False,
        "dataloader_num_workers": 0,
        "bf16": False,
        "fp16": False,
        "use_cpu": device == "cpu",
        "disable_tqdm": True,
        "model_init_kwargs": None,
    }
    reward_models = [str(ctx.config.base_dir / raw["reward_model_name_or_path"])] if raw.get("reward_model_name_or_path") else []
    return {
        "trainer": ctx.trainer,
        "device": device,
        "model_path": str(ctx.twin_dir),
        "model_label": f"miniature twin of {ctx.model_config.__class__.__name__.replace('Config', '')} "
                       f"({parameter_count(ctx.twin) / 1e6:.2f}M parameters)",
        "config": {k: raw[k] for k in info.passed_keys if k in raw},
        "overrides": overrides,
        "rows": rows,
        "reward_funcs": list(ctx.config.reward_funcs),
        "reward_models": reward_models,
        "user_dir": str(ctx.config.base_dir),
        "train": bool(ctx.options.smoke),
        "force_token_id": stop["id"],
        "force_token": stop["token"],
        "force_reason": stop["why"],
        "force_after": FORCE_AFTER,
        "suppress_ids": sorted(suppress),
    }


def _tail(path, lines=15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
