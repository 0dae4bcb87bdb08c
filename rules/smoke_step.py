"""TD006 smoke-step: one tiny, real training step of the installed TRL trainer before the long job.

What goes wrong
    Many failures only show once the trainer runs: a reward function that raises or returns the wrong
    number of scores, a dataset column the trainer does not find, a chat template that breaks on the
    data, a dtype the device cannot do, a pad token the trainer cannot pad with. On a GPU job they show up
    after the model has loaded, often an hour in.

How it is detected
    The installed TRL's own trainer (GRPOTrainer or RLOOTrainer) is built with the config's own settings,
    reward functions, tokenizer (with `added_tokens`) and the first rows of the config's dataset,
    overriding only what makes it tiny: one optimizer step, two generations of one prompt, 8-token
    completions, no saving, no reporting, output in a temporary folder. On the CPU the model is the
    miniature twin (same architecture class, tokenizer and special ids, 2 layers, tiny width), so the
    step runs the real code path of the architecture in seconds. The step runs in a child process with a
    time limit (--smoke-timeout): a hang, a crash or an out-of-memory becomes a `fail` with the error.

    Checked after the step: it finished one optimizer step, the loss and grad norm are finite, the
    trainable parameters changed and frozen ones did not, and every reward function returned one finite
    number (or None) per completion.

Versions
    Works with the trainer classes the installed TRL has. The PPO step is not implemented yet (skip).

What the fix does
    No automatic fix: the report quotes the error, trimmed to the user's own frames where there are any.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

from trl_doctor import fail, passed, rule, skip, warn

ROWS = 4  # prompts handed to the child: enough for one generation batch and a spare


@rule(
    id="TD006",
    slug="smoke-step",
    title="One real training step of the installed trainer succeeds",
    trainers=("grpo", "rloo", "ppo"),
    prepare=lambda ctx: prepare(ctx),
)
def check(ctx):
    if not ctx.options.smoke:
        yield skip("disabled with --no-smoke")
        return
    # resolved here rather than declared in `needs`, so --no-smoke costs no dataset or model loading
    for need in ("trainer_config", "tokenizer", "model_config", "dataset"):
        ctx.need(need)
    if ctx.trainer == "ppo":
        yield skip("the PPO smoke step is not implemented yet")
        return
    from trl_doctor._trl import trainer_class

    if trainer_class(ctx.trainer) is None:
        yield fail(f"trl {ctx.version('trl')} has no {ctx.trainer.upper()} trainer")
        return
    if not ctx.config.reward_funcs and not ctx.config.get("reward_model_name_or_path"):
        yield fail("the config names no `reward_funcs` and no `reward_model_name_or_path`: the trainer has nothing to score completions with")
        return

    spec, device = _spec(ctx)
    spec_path = ctx.workdir / "smoke-spec.json"
    result_path = ctx.workdir / "smoke-result.json"
    spec_path.write_text(json.dumps(spec, default=str))
    proc = ctx.scratch.pop("smoke_proc", None) or _spawn(ctx)
    log_path = ctx.scratch["smoke_log"]
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
    wall = round(time.perf_counter() - started, 2)
    tail = _tail(log_path)
    details = {"device": device, "model": spec["model_label"], "wall_s": wall}

    if code is None:
        yield fail(f"the smoke step did not finish within --smoke-timeout {ctx.options.smoke_timeout:g}s", **details, log_tail=tail)
        return
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    if result is None:
        yield fail(f"the smoke step's process died with exit status {code} (signal or crash) before reporting", **details, log_tail=tail)
        return
    if not result.get("ok"):
        stage = result.get("stage") or "?"
        raised = [(name, s["raised"]) for name, s in result.get("rewards", {}).items() if "raised" in s]
        if raised:
            name, r = raised[0]
            yield fail(f"reward function {name} raised {r['error']} at {_short(r['where'], ctx)}: `{r['line']}`", **details,
                       traceback=result.get("traceback", ""))
            return
        yield fail(f"the {stage} stage failed: {result.get('error_type')}: {result.get('error')}", **details,
                   traceback=result.get("traceback", ""))
        return
    yield from _judge(result, details, ctx)


def _spawn(ctx) -> subprocess.Popen:
    """Start the child now: it imports torch, transformers and TRL while the other rules run."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "WANDB_DISABLED": "true", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONWARNINGS": "ignore"})
    if _cpu_only(ctx):
        env["CUDA_VISIBLE_DEVICES"] = ""
    log_path = ctx.workdir / "smoke.log"
    ctx.scratch["smoke_log"] = log_path
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


def prepare(ctx) -> None:
    if ctx.options.smoke and ctx.trainer != "ppo":
        ctx.scratch["smoke_proc"] = _spawn(ctx)


def _spec(ctx):
    info = ctx.trainer_config_info
    raw = ctx.config.raw
    device = ctx.device
    twin_dir = ctx.twin_dir
    from trl_doctor._twin import parameter_count

    n_params = parameter_count(ctx.twin)
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
        "max_completion_length": 8,
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
    config = {k: raw[k] for k in info.passed_keys if k in raw}
    rows = ctx.dataset.select(range(min(ROWS, len(ctx.dataset)))).to_list()
    reward_models = [str(ctx.config.base_dir / raw["reward_model_name_or_path"])] if raw.get("reward_model_name_or_path") else []
    spec = {
        "trainer": ctx.trainer,
        "device": device,
        "model_path": str(twin_dir),
        "model_label": f"miniature twin of {ctx.model_config.__class__.__name__.replace('Config', '')} ({n_params / 1e6:.2f}M parameters)",
        "config": config,
        "overrides": overrides,
        "rows": rows,
        "reward_funcs": list(ctx.config.reward_funcs),
        "reward_models": reward_models,
        "user_dir": str(ctx.config.base_dir),
    }
    return spec, device


def _judge(result, details, ctx):
    details = dict(details)
    details.update({
        "trainer": result["trainer"],
        "step_s": result["step_s"],
        "import_s": result["import_s"],
        "loss": result["loss"],
        "grad_norm": result["grad_norm"],
        "completion mean length": result["completion_mean_length"],
        "clipped ratio": result["clipped_ratio"],
        "updated tensors": f"{result['updated_tensors']}/{result['trainable_tensors']}",
        "peak host MB": result["peak_host_mb"],
    })
    if "peak_gpu_mb" in result:
        details["peak GPU MB"] = result["peak_gpu_mb"]
    for name, s in result["rewards"].items():
        mean = s["sum"] / max(1, s["scores"] - s["nonfinite"]) if s["scores"] else None
        details[f"reward {name}"] = (f"{s['calls']} calls, {s['completions']} completions, mean {mean:.3f}, min {s['min']}, max {s['max']}"
                                     if mean is not None else f"{s['calls']} calls, no numeric scores")
    problems = []
    if result["global_steps"] < 1:
        problems.append("the trainer finished without taking an optimizer step")
    for key in ("loss", "grad_norm"):
        v = result[key]
        if v is None or not math.isfinite(v):
            problems.append(f"{key} is {v}")
    if result["updated_tensors"] == 0:
        problems.append(f"no trainable parameter changed ({result['trainable_tensors']} trainable tensors)")
    if result["frozen_changed"]:
        problems.append(f"frozen parameters changed: {', '.join(result['frozen_changed'])}")
    for name, s in result["rewards"].items():
        if s["calls"] == 0:
            problems.append(f"reward function {name} was never called")
        elif s["nonfinite"]:
            problems.append(f"reward function {name} returned {s['nonfinite']} non-finite or non-numeric scores")
        elif s["scores"] + s["none"] != s["completions"]:
            problems.append(f"reward function {name} returned {s['scores'] + s['none']} scores for {s['completions']} completions")
    if problems:
        yield fail("the smoke step ran but " + "; ".join(problems), **details)
        return
    yield passed(
        f"{result['trainer']} took 1 step on the {details['device']} in {result['step_s']:.1f}s: loss {result['loss']:.4g}, "
        f"grad norm {result['grad_norm']:.4g}, {details['updated tensors']} tensors updated",
        **details,
    )


def _short(path: str, ctx) -> str:
    base = str(ctx.config.base_dir)
    return os.path.relpath(path, base) if path.startswith(base) else path


def _tail(path, lines=15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
