"""The smoke step's child process: builds the installed TRL's real trainer for a tiny version of the
config and runs one optimizer step. Run as `python -m trl_doctor.rules._smoke_child SPEC RESULT`.

It runs apart from the doctor so that a hang, a segfault or an out-of-memory becomes a finding with the
captured error, never a dead doctor. With `--wait` it is started early: it imports torch, transformers
and TRL while the doctor runs the other rules, then reads "SPEC RESULT" from stdin (EOF: nothing to do). The result is written as JSON; an exception is reported in it
with the traceback trimmed to the frames that matter.
"""

from __future__ import annotations

import json
import math
import os
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
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}

    spec["_stage"] = "train"
    t0 = time.perf_counter()
    trainer.train()
    step_s = time.perf_counter() - t0

    spec["_stage"] = "inspect"
    params = dict(model.named_parameters())
    updated = [n for n, before in trainable.items() if not torch.equal(before, params[n].detach().to(before.device))]
    frozen_changed = [n for n, before in frozen.items() if not torch.equal(before, params[n].detach().to(before.device))]
    logs = {}
    for entry in trainer.state.log_history:
        logs.update(entry)
    host_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "trainer": trainer_cls.__name__,
        "import_s": round(import_s, 2),
        "step_s": round(step_s, 2),
        "loss": logs.get("loss", logs.get("train_loss")),
        "grad_norm": logs.get("grad_norm"),
        "completion_mean_length": logs.get("completions/mean_length"),
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
    return result


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
