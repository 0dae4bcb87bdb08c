"""The real-model sample against a bare `generate` (issue 22 item 4: it ran ~4x slower than bare generate on an H100).

    python benchmarks/bench_sample.py [--shape tiny|0.5b|7b] [--prompts 2] [--generations 8] [--tokens 128] [--repeat 3]

A Qwen2.5-shaped model with random weights is saved (`from_config`, `save_pretrained`; bf16 on cuda, fp32 on the
cpu) and loaded the way the doctor loads it (trl_doctor/facts/trainer_run/execute.py `load_real_model`). Then, on the same
model, batch and settings, interleaved `--repeat` times:
- doctor: `worker._generate`, the sample's one batched generate over all prompts × generations, with the settings
  the doctor passes (the trainer's sampling settings: do_sample, temperature 1, top_p 1, top_k 0, ...);
- bare: `model.generate(input_ids, attention_mask, do_sample=True, max_new_tokens=...)` on the same left-padded
  batch, as a user would call it.
Printed: ms per decoding step (the call's time / the tokens it generated per row) for both, first (the doctor's
first call is on the freshly loaded model, as its sample always is; the bare one follows it) and warm (the median
of the rest), and the ratio;
the target is doctor / bare <= 1.2. Also printed: the forward hooks and logits processors the doctor's call runs
with (a watcher that synchronises with the host every step would show there).
Default shape: 0.5b on cuda, tiny on the cpu. A measurement, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))  # python -P leaves it off
from _shapes import QWEN25  # noqa: E402  (benchmarks/_shapes.py)

SHAPES = {k: QWEN25[k] for k in ('tiny', '0.5b', '7b')}


def save_model(shape: str, device: str, folder: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(folder, safe_serialization=True)


def plan_for(folder: str, prompts: int, generations: int, tokens: int) -> dict:
    """The sample plan as trainer_run/plan.py builds it: prompts of different lengths (left padding), the trainer's
    sampling settings (GRPOConfig's defaults)."""
    import random

    rng = random.Random(0)
    prompt_ids = [[rng.randrange(3, 30000) for _ in range(rng.randrange(24, 64))] for _ in range(prompts)]
    generation = {"max_new_tokens": tokens, "do_sample": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                  "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0,
                  "cache_implementation": None}
    return {"model_path": folder, "model_kwargs": {}, "prompt_ids": prompt_ids, "num_generations": generations,
            "generation": generation, "eos_token_id": 2, "seed": 0}


def bare_inputs(plan: dict, device: str):
    """The same left-padded batch the doctor builds, for the bare call."""
    import torch

    rows = [ids for ids in plan["prompt_ids"] for _ in range(plan["num_generations"])]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask, width


def timed(fn, device: str) -> tuple[float, int]:
    """(seconds, decoding steps) of one call."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    steps = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import torch

    from trl_doctor.facts.trainer_run import execute as worker

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    shape = args.shape or ("0.5b" if device == "cuda" else "tiny")
    tokens = args.tokens or (128 if device == "cuda" else 32)
    with tempfile.TemporaryDirectory() as folder:
        save_model(shape, device, folder)
        plan = plan_for(folder, args.prompts, args.generations, tokens)
        model = worker.load_real_model(plan, device)
        ids, mask, width = bare_inputs(plan, device)

        def doctor() -> int:
            rows, _ = worker._generate(model, None, plan, device)
            return max(len(r) for r in rows)

        def bare() -> int:
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=tokens,
                                     pad_token_id=0)
            return out.shape[1] - width

        hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
        runs = {"doctor": [], "bare": []}
        for _ in range(max(2, args.repeat)):
            for name, fn in (("doctor", doctor), ("bare", bare)):
                runs[name].append(timed(fn, device))
    dtype = "bf16" if device == "cuda" else "fp32"
    batch = args.prompts * args.generations
    print(f"sample vs bare generate: Qwen2.5-{shape} shape ({dtype}, random weights) on {device}, "
          f"{args.prompts} prompts x {args.generations} generations = {batch} rows, up to {tokens} new tokens")
    print(f"doctor's call: {hooks} forward hooks on the model; one generate over all {batch} rows")
    print(f"{'':<8} {'first ms/step':>13} {'warm ms/step':>13} {'steps':>6}")
    per_step = {}
    for name, rs in runs.items():
        cold = rs[0][0] / max(1, rs[0][1]) * 1000
        warm = statistics.median(s / max(1, n) * 1000 for s, n in rs[1:])
        per_step[name] = (cold, warm)
        print(f"{name:<8} {cold:>13.2f} {warm:>13.2f} {rs[-1][1]:>6}")
    print(f"ratio doctor/bare: first {per_step['doctor'][0] / per_step['bare'][0]:.2f}, "
          f"warm {per_step['doctor'][1] / per_step['bare'][1]:.2f} (target <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
