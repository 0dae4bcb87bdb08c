"""The trainer-run child process: builds the installed TRL's real trainer for a tiny version of the config,
runs the probes other rules ask for on it (the logits contract), then, unless the smoke step is off, one
optimizer step (with the end-of-turn token forced early, so the step also shows whether generation stops).
Run as `python -m trl_doctor.rules._smoke_child SPEC RESULT`.

It runs apart from the doctor so that a hang, a segfault or an out-of-memory becomes a finding with the
captured error, never a dead doctor. With `--wait` it is started early: it imports torch, transformers
and TRL while the doctor runs the other rules, then reads "SPEC RESULT" from stdin (EOF: nothing to do). The result is written as JSON; an exception is reported in it
with the traceback trimmed to the frames that matter.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback


def warm(trainer: str) -> float:
    """Import what the step needs; returns the seconds it took."""
    started = time.perf_counter()
    import torch  # noqa: F401
    import datasets  # noqa: F401
    import transformers  # noqa: F401
    from trl_doctor import _trl

    _trl.trainer_class(trainer)
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    if argv[0] == "--wait":
        import_s = warm(argv[1])
        line = sys.stdin.readline().split()
        if not line:
            return 0
        spec_path, result_path = line
    else:
        spec_path, result_path = argv
        import_s = None
    started = time.perf_counter()
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    out: dict = {"ok": False}
    try:
        out.update(run(spec, started))
        if import_s is not None:
            out["import_s"] = round(import_s, 2)
        out["ok"] = True
        code = 0
    except BaseException as exc:  # everything must reach the parent as data
        out["error_type"] = type(exc).__name__
        out["error"] = " ".join(str(exc).split())[:2000]
        out["traceback"] = _trim(traceback.format_exception(type(exc), exc, exc.__traceback__), spec.get("user_dir"))
        out["stage"] = spec.get("_stage")
        out["rewards"] = spec.get("_calls", {})
        out["probes"] = spec.get("_probes", {})  # probes that finished before the failure
        code = 1
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=2, default=str)
    return code


def _trim(frames: list[str], user_dir: str | None) -> str:
    """Keep the user's own frames (their reward code) and the last few of the library's."""
    frames = [f for f in frames if "_smoke_child.py" not in f]
    keep = [f for f in frames if user_dir and user_dir in f]
    tail = frames[-4:]
    return "".join(keep + [f for f in tail if f not in keep]).rstrip()


def run(spec: dict, started: float) -> dict:
    spec["_stage"] = "import"
    import resource

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from trl_doctor import _trl
    from trl_doctor.rules._rewards import resolve_reward

    trainer_cls = _trl.trainer_class(spec["trainer"])
    config_cls = _trl.config_class(spec["trainer"])
    import_s = time.perf_counter() - started

    spec["_stage"] = "config"
    import dataclasses

    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    kwargs = {k: v for k, v in spec["config"].items() if k in fields}
    kwargs.update({k: v for k, v in spec["overrides"].items() if k in fields})
    args = config_cls(**kwargs)

    spec["_stage"] = "reward functions"
    calls: dict[str, dict] = spec.setdefault("_calls", {})
    funcs = [_recorded(resolve_reward(name, spec["user_dir"]), name, calls) for name in spec["reward_funcs"]]
    reward_models = spec.get("reward_models") or []

    spec["_stage"] = "trainer init"
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"], local_files_only=True)
    dataset = Dataset.from_list(spec["rows"])
    model_kwargs = {}
    trainer = trainer_cls(
        model=spec["model_path"],
        reward_funcs=funcs + reward_models,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **model_kwargs,
    )
    model = trainer.model
    probes = spec.setdefault("_probes", {})
    spec["_stage"] = "logits probe"
    probes["logits"] = probe_logits(trainer, model, tokenizer)
    if not spec.get("train", True):
        return {"trainer": trainer_cls.__name__, "import_s": round(import_s, 2), "probes": probes, "train": None}

    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}

    spec["_stage"] = "train"
    forcing = force_token(model, spec.get("force_token_id"), spec.get("force_after", 3), spec.get("suppress_ids", []))
    t0 = time.perf_counter()
    trainer.train()
    step_s = time.perf_counter() - t0
    forcing.remove()

    spec["_stage"] = "inspect"
    params = dict(model.named_parameters())
    updated = [n for n, before in trainable.items() if not torch.equal(before, params[n].detach().to(before.device))]
    frozen_changed = [n for n, before in frozen.items() if not torch.equal(before, params[n].detach().to(before.device))]
    logs = {}
    for entry in trainer.state.log_history:
        logs.update(entry)
    host_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "forced_token_id": spec.get("force_token_id"),
        "generate_steps": forcing.generated,
        "forced_after": spec.get("force_after", 3),
        "step_s": round(step_s, 2),
        "loss": logs.get("loss", logs.get("train_loss")),
        "grad_norm": logs.get("grad_norm"),
        "reward_std": logs.get("reward_std"),
        "frac_reward_zero_std": logs.get("frac_reward_zero_std"),
        "completion_mean_length": logs.get("completions/mean_length", logs.get("completion_length")),  # trl<0.17 name
        "completion_max_length": logs.get("completions/max_length"),
        "completion_mean_terminated_length": logs.get("completions/mean_terminated_length"),
        "clipped_ratio": logs.get("completions/clipped_ratio"),
        "trainable_tensors": len(trainable),
        "updated_tensors": len(updated),
        "frozen_changed": frozen_changed[:10],
        "rewards": calls,
        "peak_host_mb": round(host_peak_mb, 1),
        "global_steps": trainer.state.global_step,
        "logs": {k: v for k, v in logs.items() if isinstance(v, (int, float))},
    }
    if torch.cuda.is_available() and spec.get("device") == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return {"trainer": trainer_cls.__name__, "import_s": round(import_s, 2), "probes": probes, "train": result}


LOGPS_METHODS = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")


def probe_logits(trainer, model, tokenizer) -> dict:
    """Call the trainer's own per-token log-prob function on the model exactly as training does, and record
    what the model was called with and how many sequence positions got vocabulary-sized logits."""
    import inspect

    import torch

    method_name = next((m for m in LOGPS_METHODS if hasattr(trainer, m)), None)
    if method_name is None:
        return {"skipped": f"{type(trainer).__name__} has none of {', '.join(LOGPS_METHODS)}"}
    vocab = model.get_output_embeddings().weight.shape[0]
    batch, prompt_len, keep = 2, 6, 4
    gen = torch.Generator().manual_seed(0)
    special = set(tokenizer.all_special_ids)
    pool = torch.tensor([i for i in range(min(vocab, len(tokenizer))) if i not in special])
    input_ids = pool[torch.randint(len(pool), (batch, prompt_len + keep), generator=gen)]
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    attention_mask = torch.ones_like(input_ids)
    seen = {"call_kwargs": None, "vocab_positions": []}

    def pre_hook(module, args, kwargs):
        if seen["call_kwargs"] is None:
            seen["call_kwargs"] = sorted(k for k, v in kwargs.items() if v is not None)

    def out_hook(module, args, output):
        tensors = [output] if isinstance(output, torch.Tensor) else [getattr(output, "logits", None)]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[-1] == vocab:
                seen["vocab_positions"].append(int(t.shape[1]))

    handles = [model.register_forward_pre_hook(pre_hook, with_kwargs=True)]
    handles += [m.register_forward_hook(out_hook) for m in model.modules()]
    method = getattr(trainer, method_name)
    try:
        with torch.no_grad():
            out = method(model, input_ids, attention_mask, keep)
    finally:
        for h in handles:
            h.remove()
    logps = out[0] if isinstance(out, tuple) else out
    params = inspect.signature(type(model).forward).parameters
    return {
        "method": f"{type(trainer).__name__}.{method_name}",
        "model_forward": f"{type(model).__name__}.forward",
        "forward_params": sorted(p for p in params if p in ("logits_to_keep", "num_logits_to_keep", "labels", "fused_lm_head")),
        "forward_has_var_kwargs": any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()),
        "call_kwargs": seen["call_kwargs"],
        "batch": batch,
        "sequence": prompt_len + keep,
        "logits_to_keep": keep,
        "vocab": vocab,
        "vocab_positions": seen["vocab_positions"],
        "logps_shape": list(logps.shape) if hasattr(logps, "shape") else None,
        "logps_finite": bool(torch.isfinite(logps).all()) if hasattr(logps, "shape") else None,
    }


class _Forcing:
    """The hooks of the termination probe, and the decoding steps each generate call took."""

    def __init__(self):
        self.handles = []
        self.generated: list[int] = []
        self.flush = lambda: None

    def remove(self):
        self.flush()
        self.flush = lambda: None
        for h in self.handles:
            h.remove()


def force_token(model, token_id, after: int, suppress_ids: list[int]):
    """Make generation emit `token_id` as the (after+1)-th completion token and no stop id before it: the
    termination probe. Only single-position logits (decoding steps) are touched, so the training forward
    passes see the model's own logits."""
    import torch

    if token_id is None:
        return _Forcing()
    head = model.get_output_embeddings()
    state = {"steps": 0}

    def start(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.shape[1] > 1:
            # a prefill (or a scoring pass): the next single-position logits start a completion
            if state["steps"]:
                forcing.generated.append(state["steps"])
            state["steps"] = 0

    def hook(module, args, output):
        if torch.is_grad_enabled() or not isinstance(output, torch.Tensor) or output.dim() != 3 or output.shape[1] != 1:
            return None  # training and scoring passes see the model's own logits
        out = output.clone()
        for sid in suppress_ids:
            out[:, -1, sid] = float("-inf")
        for row in range(out.shape[0]):
            # rows end at different lengths, so length-sensitive rewards still differ within a group
            if state["steps"] >= after + row % 3:
                out[row, -1, :] = float("-inf")
                out[row, -1, token_id] = 0.0
        state["steps"] += 1
        return out

    forcing = _Forcing()
    forcing.handles = [model.register_forward_pre_hook(start, with_kwargs=True), head.register_forward_hook(hook)]
    forcing.flush = lambda: forcing.generated.append(state["steps"]) if state["steps"] else None
    return forcing


def _recorded(func, name, calls):
    """Wrap a reward function to record what it returns, keeping the name and signature TRL inspects."""
    import functools

    stats = calls.setdefault(name, {"calls": 0, "completions": 0, "scores": 0, "nonfinite": 0, "none": 0, "min": None, "max": None, "sum": 0.0})

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            values = func(*args, **kwargs)
        except Exception as exc:
            tb = traceback.extract_tb(exc.__traceback__)
            where = tb[-1] if tb else None
            stats["raised"] = {
                "error": f"{type(exc).__name__}: {exc}",
                "where": f"{where.filename}:{where.lineno}" if where else "?",
                "line": (where.line or "") if where else "",
            }
            raise
        stats["calls"] += 1
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        stats["completions"] += len(completions) if completions is not None else 0
        for v in list(values) if values is not None else []:
            if v is None:
                stats["none"] += 1
                continue
            try:
                f = float(v)
            except (TypeError, ValueError):
                stats["nonfinite"] += 1
                continue
            stats["scores"] += 1
            if not math.isfinite(f):
                stats["nonfinite"] += 1
                continue
            stats["sum"] += f
            stats["min"] = f if stats["min"] is None else min(stats["min"], f)
            stats["max"] = f if stats["max"] is None else max(stats["max"], f)
        return values

    return wrapper


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
