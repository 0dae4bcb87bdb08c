"""The memory estimate against one real training step on a GPU (issue 22 item 5: target within ±15%).

    python benchmarks/bench_gpu_memory.py [--dry-run] [--shapes 0.5b,1.5b,7b] [--out FILE.md] [--timeout S]

For each case (Qwen2.5 shapes × full fine-tune / LoRA × reference model on (beta 0.04) / off × gradient
checkpointing on / off, bf16 weights; plus the issue's reference point, the 0.5B full fine-tune with fp32 weights)
it writes the config a user would write (batch 8, 4 generations, 512-token prompts: the length the estimate assumes
when TRL does not truncate, 256-token completions, bf16, no vLLM) and prints:
- estimate: the doctor's estimate for that config (trl_doctor.facts.memory.plan.plan_from_context + estimate), in GiB;
- allocated: torch.cuda.max_memory_allocated of one real GRPOTrainer step (generation + training) on random
  weights saved with `from_config` under torch.device("cuda") and loaded by TRL as the config says; compared with
  the estimate less its CUDA context (the allocator does not see the context);
- NVML: the GPU's used memory at its highest during the step (sampled every 10 ms) less the used memory before the
  process started: what the job takes from the GPU, context and allocator cache included; compared with the whole
  estimate;
- error %: (estimate - measured) / measured for both.
Each case runs in a fresh process. A case whose estimate exceeds the GPU's free memory is not run (its row says so).
`--dry-run` prints the estimates only and needs no GPU; without CUDA and without --dry-run it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "fixtures" / "models" / "qwen2-chat"  # built by fixtures/build.py: 320 ids, eos 2, pad 0
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))  # python -P leaves it off
from _shapes import QWEN25  # noqa: E402  (benchmarks/_shapes.py)

SHAPES = {k: QWEN25[k] for k in ('0.5b', '1.5b', '7b')}
PROMPT_TOKENS, COMPLETION_TOKENS, BATCH, GENERATIONS = 512, 256, 8, 4
GiB = 2**30


@dataclass(frozen=True)
class Case:
    shape: str
    lora: bool
    reference: bool
    checkpointing: bool
    dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        return (f"{self.shape} {'LoRA' if self.lora else 'full'} ref={'on' if self.reference else 'off'} "
                f"ckpt={'on' if self.checkpointing else 'off'}" + ("" if self.dtype == "bfloat16" else f" {self.dtype}"))

    def config(self, model_dir: str, data: str) -> dict:
        """The trainer keys a user would write for this case (what the estimate reads and the step runs)."""
        keys = {"model_name_or_path": model_dir, "tokenizer_name_or_path": str(TOKENIZER), "dataset_path": data,
                "reward_funcs": ["trl.rewards.think_format_reward"], "model_init_kwargs": {"dtype": self.dtype},
                "bf16": True, "per_device_train_batch_size": BATCH, "num_generations": GENERATIONS,
                "max_completion_length": COMPLETION_TOKENS, "gradient_checkpointing": self.checkpointing,
                "beta": 0.04 if self.reference else 0.0, "use_vllm": False}
        if self.lora:
            keys.update(use_peft=True, lora_r=16)
        return keys


def all_cases(shapes: list[str]) -> list[Case]:
    cases = [Case(s, lora, ref, ckpt) for s in shapes for lora in (False, True) for ref in (False, True)
             for ckpt in (False, True)]
    if "0.5b" in shapes:  # the reference point: TRL 1.x's default fp32 load, measured at 7.45 GiB
        cases.append(Case("0.5b", False, False, False, "float32"))
    return cases


def write_model(shape: str, folder: Path, device: str) -> None:
    """A random-weight Qwen2.5-shaped checkpoint (config.json alone with device 'meta': enough for the estimate)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         dtype="bfloat16")
    if device == "meta":
        config.save_pretrained(folder)
        return
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    torch.cuda.empty_cache()


def write_data(folder: Path) -> str:
    """Prompts of PROMPT_TOKENS tokens with the fixture tokenizer, as a jsonl dataset."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    words = "count the apples in the basket, "
    text = words * (PROMPT_TOKENS // max(1, len(tok(words)["input_ids"])) + 2)
    ids = tok(text)["input_ids"][:PROMPT_TOKENS]
    prompt = tok.decode(ids)
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for _ in range(64)))
    return str(path)


def estimate_of(case: Case, model_dir: str, data: str, work: Path) -> dict:
    """The doctor's estimate for the case's config: total and CUDA context, in bytes, and the peak phase."""
    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config
    from trl_doctor.facts.memory.plan import estimate, plan_from_context

    cfg = work / f"{case.name.replace(' ', '_').replace('=', '')}.yaml"
    cfg.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in case.config(model_dir, data).items()))
    with Context(load_config(cfg), Options(smoke=False)) as ctx:
        plan = plan_from_context(ctx)
    est = estimate(plan)
    return {"total": est.total_bytes, "context": plan.overhead_bytes, "phase": est.peak_phase, "summary": est.summary(),
            "batch": plan.batch_size, "seq": plan.seq_len}


class NvmlPeak:
    """The GPU's used memory at its highest, sampled every 10 ms in a thread."""

    def __init__(self):
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        self.peak = self.used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.used())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, self.used())


def length_reward(completions, **kwargs) -> list[float]:
    """The completions' lengths: plain-text prompts give plain-text completions, which trl.rewards'
    think_format_reward (conversational only) cannot read (the H100 run of 2026-11-26 stopped there on every case)."""
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]


def measure(case: Case, model_dir: str, data: str, out_dir: str, baseline: int) -> dict:
    """One real GRPOTrainer step of the case's config on cuda: the allocator's and NVML's peaks."""
    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    nvml = NvmlPeak()
    keys = case.config(model_dir, data)
    args = GRPOConfig(output_dir=out_dir, max_steps=1, logging_steps=1, save_strategy="no", report_to="none",
                      bf16=True, per_device_train_batch_size=BATCH, num_generations=GENERATIONS,
                      max_completion_length=COMPLETION_TOKENS, gradient_checkpointing=case.checkpointing,
                      beta=keys["beta"], use_vllm=False, model_init_kwargs={"dtype": case.dtype}, disable_tqdm=True)
    peft_config = None
    if case.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM")  # PEFT's default targets, as TRL's CLI
    trainer = GRPOTrainer(model=model_dir, reward_funcs=[length_reward], args=args,
                          train_dataset=load_dataset("json", data_files=data, split="train"),
                          processing_class=AutoTokenizer.from_pretrained(str(TOKENIZER)), peft_config=peft_config)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    return {"allocated": torch.cuda.max_memory_allocated(), "nvml": nvml.stop() - baseline, "seconds": round(seconds, 1),
            "completion_length": logs.get("completions/mean_length")}


def _pct(estimate: float, measured: float) -> str:
    return f"{(estimate - measured) / measured * 100:+.1f}%" if measured else "-"


def run_case(case: Case, model_dir: str, data: str, work: Path, timeout: float, free: int) -> dict:
    est = estimate_of(case, model_dir, data, work)
    row = {"case": case.name, "estimate": est}
    if est["total"] > free:
        return {**row, "skipped": f"estimate {est['total'] / GiB:.1f} GiB > {free / GiB:.1f} GiB free"}
    cmd = [sys.executable, __file__, "--one", json.dumps(asdict(case)), model_dir, data, str(work / "out")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "skipped": f"timed out after {timeout:g}s"}
    if proc.returncode:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["?"]
        return {**row, "skipped": f"failed: {tail[0][:200]}"}
    return {**row, **json.loads(proc.stdout.strip().splitlines()[-1])}


def table(rows: list[dict], dry_run: bool) -> str:
    head = "| case | batch × tokens | estimate GiB | peak phase |" + ("" if dry_run else
           " allocated GiB | error (estimate − context) | NVML GiB | error (estimate) | step s |")
    sep = "|---|---|---|---|" + ("" if dry_run else "---|---|---|---|---|")
    lines = [head, sep]
    for r in rows:
        e = r["estimate"]
        cells = [r["case"], f"{e['batch']} × {e['seq']}", f"{e['total'] / GiB:.2f}", e["phase"]]
        if not dry_run:
            if "skipped" in r:
                cells += [r["skipped"], "", "", "", ""]
            else:
                cells += [f"{r['allocated'] / GiB:.2f}", _pct(e["total"] - e["context"], r["allocated"]),
                          f"{r['nvml'] / GiB:.2f}", _pct(e["total"], r["nvml"]), str(r["seconds"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the estimates only (no GPU needed)")
    parser.add_argument("--shapes", default="0.5b,1.5b,7b")
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        case_json, model_dir, data, out_dir = args.one
        baseline = int(os.environ.get("BENCH_NVML_BASELINE", "0"))
        print(json.dumps(measure(Case(**json.loads(case_json)), model_dir, data, out_dir, baseline)))
        return 0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("bench_gpu_memory: needs a CUDA GPU to measure (torch sees none); --dry-run prints the estimates alone")
        return 0
    shapes = [s for s in args.shapes.split(",") if s]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = write_data(work)
        for shape in shapes:
            model_dir = work / f"qwen2.5-{shape}"
            write_model(shape, model_dir, "meta" if args.dry_run else "cuda")
            free = 0 if args.dry_run else _free_bytes()
            if not args.dry_run:
                os.environ["BENCH_NVML_BASELINE"] = str(NvmlPeak().stop())
            for case in (c for c in all_cases(shapes) if c.shape == shape):
                if args.dry_run:
                    rows.append({"case": case.name, "estimate": estimate_of(case, str(model_dir), data, work)})
                else:
                    rows.append(run_case(case, str(model_dir), data, work, args.timeout, free))
                    print(f"done: {case.name}", file=sys.stderr, flush=True)
                    if args.out:  # row by row: a run stopped at its time limit keeps what it measured
                        Path(args.out).write_text(table(rows, args.dry_run) + "\n")
            if not args.dry_run:
                import shutil

                shutil.rmtree(model_dir, ignore_errors=True)
    text = table(rows, args.dry_run)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def _free_bytes() -> int:
    import torch

    free, _ = torch.cuda.mem_get_info()
    return int(free)


if __name__ == "__main__":
    sys.exit(main())
