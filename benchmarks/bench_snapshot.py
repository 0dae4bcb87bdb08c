"""What the smoke step's parameter snapshot adds to memory (issue 22 item 1), before and after: the old snapshot
cloned every parameter on its device; the new one keeps two integers per tensor (trl_doctor/facts/trainer_run/fingerprint.py).

    python benchmarks/bench_snapshot.py [--shape 0.5b|1.5b|7b] [--device cpu|cuda] [--dtype float32|bfloat16]

A Qwen2.5-shaped model is built with random weights (`from_config`, no download), once as a full fine-tune (every
tensor trainable) and once with LoRA adapters (PEFT, r=16 on q/v: the base frozen). For each method the figure is
the extra peak memory over the model itself while the snapshot is taken and compared after a fake update:
- on cuda, torch.cuda.max_memory_allocated after reset_peak_memory_stats;
- on the cpu, the process's peak resident set (VmHWM, reset through /proc/self/clear_refs) over its resident set
  before, so every allocation counts (torch's CPU allocations are invisible to tracemalloc).
Each method runs in a fresh subprocess so that one's freed memory cannot hide in the other's figure.
A measurement, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))  # python -P leaves it off
from _shapes import QWEN25  # noqa: E402  (benchmarks/_shapes.py)

SHAPES = {k: QWEN25[k] for k in ('0.5b', '1.5b', '7b')}


def build(shape: str, device: str, dtype: str, lora: bool):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
    return model


def _rss() -> tuple[int, int]:
    """(current, peak) resident set in bytes."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _reset_peak(device: str) -> int:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    return _rss()[0]


def _peak(device: str) -> int:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _rss()[1]


def clone_snapshot(model):
    """The snapshot before issue 22: a clone of every parameter on its device, compared with torch.equal."""
    import torch

    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    _fake_update(model)
    params = dict(model.named_parameters())
    updated = [n for n, b in trainable.items() if not torch.equal(b, params[n].detach())]
    changed = [n for n, b in frozen.items() if not torch.equal(b, params[n].detach())]
    return len(updated), len(changed)


def fingerprint_snapshot(model):
    from trl_doctor.facts.trainer_run.fingerprint import changed, fingerprints

    trainable = fingerprints((n, p) for n, p in model.named_parameters() if p.requires_grad)
    frozen = fingerprints((n, p) for n, p in model.named_parameters() if not p.requires_grad)
    _fake_update(model)
    return len(changed(trainable, model)), len(changed(frozen, model))


def _fake_update(model) -> None:
    """What the optimizer step does to the trained tensors, in place: every trained element moves."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1e-2)


def one(shape: str, device: str, dtype: str, lora: bool, method: str) -> dict:
    import torch

    model = build(shape, device, dtype, lora)
    base = _reset_peak(device)
    t0 = time.perf_counter()
    updated, frozen_changed = (clone_snapshot if method == "clone" else fingerprint_snapshot)(model)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    return {"extra_peak_mib": round((_peak(device) - base) / 2**20, 1), "seconds": round(seconds, 2),
            "updated": updated, "frozen_changed": frozen_changed, "parameters": params,
            "model_mib": round(sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="0.5b", choices=sorted(SHAPES))
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--one", nargs=2, metavar=("SETUP", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.one:
        print(json.dumps(one(args.shape, device, args.dtype, args.one[0] == "lora", args.one[1])))
        return 0
    print(f"snapshot memory: Qwen2.5-{args.shape} shape, {args.dtype}, on {device} (extra peak over the model itself)")
    print(f"{'setup':<6} {'method':<12} {'model MiB':>10} {'extra peak MiB':>15} {'seconds':>8} {'updated':>8} "
          f"{'frozen changed':>15}")
    for setup in ("full", "lora"):
        for method in ("clone", "fingerprint"):
            cmd = [sys.executable, __file__, "--shape", args.shape, "--device", device, "--dtype", args.dtype,
                   "--one", setup, method]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                print(f"{setup:<6} {method:<12} failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{setup:<6} {method:<12} {r['model_mib']:>10} {r['extra_peak_mib']:>15} {r['seconds']:>8} "
                  f"{r['updated']:>8} {r['frozen_changed']:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
