"""The doctor's verdicts against real launches on a GPU (issue 63): for each launch, `trl-doctor check` of the
command, then the command itself, both recorded in one JSON list (docs/gpu-verdicts.json).

    python benchmarks/gpu_verdicts.py [--size real|tiny] [--only NAME,...] [--out DIR] [--budget SECONDS]
                                      [--legacy-python PY] [--legacy-pythonpath DIR]

Each launch is a command users run (`trl grpo --config recipe.yaml`, a TRL quickstart-style script, TRL's PPO and
AsyncGRPO examples) on a Qwen2.5 model built here at its real shape (0.5B, 1.5B) with random bf16 weights and Qwen's
real 151k-token tokenizer (corpus/build.py), at the release the failure was reported on: `modern` is this
environment's TRL, `legacy` trl 0.15.2 with transformers 4.48.3 (--legacy-python, or --legacy-pythonpath put first
on the path of this Python). For each launch:
- the doctor: `python -m trl_doctor check --format json -- COMMAND` in the launch's folder, as a user runs it; each
  rule's status, the memory estimate (gpu-capacity), its wall time, and its own peak GPU memory and resident memory
  (NVML per process, psutil; the process tree of the check);
- the launch: COMMAND itself in the same folder, with benchmarks/gpu_verdicts/hook first on its PYTHONPATH: it stops
  the trainer after its first 2 optimizer steps and records, in every process of the launch, the logs, the
  uncaught exception, torch's peak memory and the logits each forward returned against the `logits_to_keep` asked;
  NVML's peak used memory of the GPU while it ran, less what was used before;
- `agree`: the doctor fails a rule exactly when the launch fails or shows the launch's silent symptom (every
  completion truncated; logits over the whole sequence), and the rule it fails is the one the failure mode names.
Nothing of a launch is left outside its folder under --work. Without CUDA (`--size tiny`, the default there) the
same launches run on a CPU with a tiny model of the same vocabulary: the plumbing's rehearsal, not the figures."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
HOOK = Path(__file__).resolve().parent / "gpu_verdicts" / "hook"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # python -P leaves it off
from _shapes import QWEN25  # noqa: E402  (benchmarks/_shapes.py)

GiB = 2**30
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


# ---------------------------------------------------------------------------------------------------- the models
@dataclass(frozen=True)
class Model:
    shape: str  # a key of QWEN25
    instruct: bool = True  # Qwen2.5-*-Instruct's tokenizer and generation config, else the base model's
    pad: bool = True  # False: the tokenizer saved without a pad token
    talker: bool = False  # weights that write <|im_end|> about every other token (the head untied)


MODELS = {
    "qwen2.5-0.5b-instruct": Model("0.5b"),
    "qwen2.5-1.5b-instruct": Model("1.5b"),
    "qwen2.5-7b-instruct": Model("7b"),
    "qwen2.5-0.5b-nopad": Model("0.5b", pad=False),
    "qwen2.5-0.5b-talker-base": Model("0.5b", instruct=False, talker=True),
    "qwen2.5-0.5b-talker-instruct": Model("0.5b", talker=True),
}


def build_model(name: str, into: Path, size: str, device: str) -> None:
    """One model of MODELS into `into / name`, with this process's transformers (each environment builds its own:
    transformers 4.48 cannot read every file transformers 5 writes)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("corpus_build", ROOT / "corpus" / "build.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    m = MODELS[name]
    shape = dict(QWEN25[m.shape] if size == "real" else TINY, vocab_size=151936)
    shape["max_window_layers"] = shape["num_hidden_layers"]
    if m.talker:
        shape["tie_word_embeddings"] = False
    out = corpus.build_qwen25(name, m.instruct, corpus.qwen_tokenizer_object(), models=into, shape=shape,
                              device=device)
    if m.talker:
        _make_talker(out, torch)
    if not m.pad:
        cfg = json.loads((out / "tokenizer_config.json").read_text())
        cfg["pad_token"] = None
        (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
        gen = json.loads((out / "generation_config.json").read_text())
        gen.pop("pad_token_id", None)
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


def _make_talker(out: Path, torch) -> None:
    """Weights whose every next token is <|im_end|> with probability about 1/2: one dimension of the residual stream
    is a large constant for every token, the final norm keeps it near sqrt(hidden), and only <|im_end|>'s row of the
    (untied) head reads it. A model taught to end its turn, as an instruct model is; whether generation stops there
    is the generation config's business."""
    from safetensors.torch import load_file, save_file

    files = sorted(out.glob("*.safetensors"))
    assert len(files) == 1, files
    weights = load_file(files[0])
    hidden = weights["model.embed_tokens.weight"].shape[1]
    im_end = 151645
    weights["model.embed_tokens.weight"][:, 0] = 10.0
    head = weights["lm_head.weight"]
    head[:, 0] = 0.0
    head[im_end, 0] = 12.0 / hidden ** 0.5  # logit ~12 = ln(151936): about even odds against the rest together
    save_file(weights, files[0], metadata={"format": "pt"})


# -------------------------------------------------------------------------------------------------- the launches
RECIPE_BASE = {  # what `trl grpo --config` recipes in TRL's docs keep; the sizes are each launch's own
    "datasets": [{"path": "json", "data_files": "{data}", "split": "train"}],
    "reward_funcs": ["rewards.length_reward"],
    "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 256,
    "learning_rate": 1.0e-6, "bf16": True, "dtype": "bfloat16", "logging_steps": 1, "report_to": "none",
    "output_dir": "out",
}

REWARDS = '''def length_reward(prompts, completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [-abs(len(t) - 20) / 20.0 for t in texts]
'''

# TRL 0.15's GRPO quickstart (docs/source/grpo_trainer.md at v0.15.2), its model, data and sizes from argv's recipe
QUICKSTART = '''import json, sys
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer
from rewards import length_reward

recipe = json.load(open(sys.argv[1]))
dataset = load_dataset("json", data_files=recipe.pop("data"), split="train")
peft = recipe.pop("lora", None)
if peft:
    from peft import LoraConfig
    peft = LoraConfig(**peft)
model = recipe.pop("model")
training_args = GRPOConfig(**recipe)
trainer = GRPOTrainer(model=model, reward_funcs=length_reward, args=training_args, train_dataset=dataset,
                      peft_config=peft)
trainer.train()
'''

# TRL 0.15's PPO example (examples/scripts/ppo/ppo.py at v0.15.2) as a user who has no value model writes it
PPO = '''import json, sys
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from trl import PPOConfig, PPOTrainer

recipe = json.load(open(sys.argv[1]))
tokenizer = AutoTokenizer.from_pretrained(recipe["sft_model_path"], padding_side="left")
policy = AutoModelForCausalLM.from_pretrained(recipe["sft_model_path"], torch_dtype="bfloat16")
ref_policy = AutoModelForCausalLM.from_pretrained(recipe["sft_model_path"], torch_dtype="bfloat16")
reward_model = AutoModelForSequenceClassification.from_pretrained(recipe["sft_model_path"], num_labels=1,
                                                                  torch_dtype="bfloat16")
dataset = load_dataset("json", data_files=recipe.pop("data"), split="train")
dataset = dataset.map(lambda e: {"input_ids": tokenizer(e["prompt"], padding=False)["input_ids"]}, batched=True,
                      remove_columns=dataset.column_names)
trainer = PPOTrainer(args=PPOConfig(**recipe), processing_class=tokenizer, model=policy, ref_model=ref_policy,
                     reward_model=reward_model, value_model=None, train_dataset=dataset)
trainer.train()
'''


@dataclass
class Launch:
    name: str
    mode: str  # the failure catalog's entry (../shared/reference/failure-modes.md), or "healthy"
    env: str  # "modern" (this environment) or "legacy" (trl 0.15.2 + transformers 4.48.3)
    model: str  # a key of MODELS
    command: list[str]
    files: dict[str, object]  # written into the launch's folder: text, or a dict written as YAML/JSON
    rule: str | None  # the rule whose fail names the cause; None: a healthy launch
    silent: Callable[[list[dict]], str | None] | None = None  # the symptom a launch shows without an error
    gpu_only: bool = False  # its verdict needs a GPU (skipped on a CPU rehearsal)
    alone: bool = False  # it fills the GPU: run last, with no other launch beside it
    source: str = ""


def _recipe(**over) -> dict:
    return {**RECIPE_BASE, **over}


def _clipped(records: list[dict]) -> str | None:
    logs = [x for r in records for x in r["logs"] if "completions/clipped_ratio" in x]
    if logs and all(x["completions/clipped_ratio"] >= 1.0 for x in logs):
        return (f"every completion truncated: completions/clipped_ratio 1.0 at each of {len(logs)} logged steps "
                f"(mean length {logs[-1].get('completions/mean_length')})")
    return None


def _full_logits(records: list[dict]) -> str | None:
    over = [x for r in records for x in r["logits"] if x["returned"] > x["asked"]]
    if over:
        x = over[0]
        return (f"the model returned logits for {x['returned']} positions where TRL asked for {x['asked']} "
                f"(of {x['input']}): the whole sequence x the vocabulary")
    return None


LAUNCHES = [
    Launch("grpo-healthy-lora-0.5b", "healthy", "modern", "qwen2.5-0.5b-instruct",
           ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": _recipe(model_name_or_path="{model}", use_peft=True, lora_r=16, lora_alpha=32)},
           None, source="TRL's `trl grpo` CLI (trl/scripts/grpo.py) with a LoRA recipe as its docs write one"),
    Launch("grpo-base-never-stops-0.5b", "B8/C7: a base model's generation never stops at the template's turn end",
           "modern", "qwen2.5-0.5b-talker-base", ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": _recipe(model_name_or_path="{model}")},
           "eos-termination", silent=_clipped,
           source="trl#2892 and the Qwen2.5 base models: ChatML turns end in <|im_end|>, generation stops at "
                  "<|endoftext|> only"),
    Launch("grpo-instruct-stops-0.5b", "healthy", "modern", "qwen2.5-0.5b-talker-instruct",
           ["trl", "grpo", "--config", "recipe.yaml"], {"recipe.yaml": _recipe(model_name_or_path="{model}")},
           None, silent=_clipped, source="the healthy twin of grpo-base-never-stops-0.5b: the instruct config"),
    Launch("grpo-flash-attn-absent-0.5b", "A7 flash-attn-missing-or-unsupported", "modern", "qwen2.5-0.5b-instruct",
           ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": _recipe(model_name_or_path="{model}", attn_implementation="flash_attention_2")},
           "precision-and-attention", gpu_only=True, source="EasyR1#384, LlamaFactory#3508: flash_attention_2 without flash_attn"),
    Launch("grpo-generations-do-not-divide-0.5b", "C1 num-generations-divisibility", "modern",
           "qwen2.5-0.5b-instruct", ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": _recipe(model_name_or_path="{model}", num_generations=3)},
           "batch-geometry", source="TRL's GRPOConfig check: the generation batch must divide by num_generations"),
    Launch("grpo-no-pad-trl0.15-0.5b", "B1 pad-token-missing", "legacy", "qwen2.5-0.5b-nopad",
           ["python", "train.py", "recipe.json"],
           {"train.py": QUICKSTART, "recipe.json": {"model": "{model}", "data": "{data}", "output_dir": "out",
                                                    "num_generations": 4, "per_device_train_batch_size": 8,
                                                    "max_completion_length": 256, "bf16": True, "logging_steps": 1,
                                                    "report_to": "none", "model_init_kwargs": {"torch_dtype": "bfloat16"}}},
           "pad-token", source="trl#3287: GRPO on TRL <= 0.16 with a tokenizer that has no pad token"),
    Launch("grpo-logits-contract-trl0.15-tf4.48-0.5b", "A3 logits-to-keep-kwarg-mismatch", "legacy",
           "qwen2.5-0.5b-instruct", ["python", "train.py", "recipe.json"],
           {"train.py": QUICKSTART, "recipe.json": {"model": "{model}", "data": "{data}", "output_dir": "out",
                                                    "num_generations": 4, "per_device_train_batch_size": 8,
                                                    "max_completion_length": 256, "bf16": True, "logging_steps": 1,
                                                    "report_to": "none", "model_init_kwargs": {"torch_dtype": "bfloat16"}}},
           "logits-contract", silent=_full_logits,
           source="trl#2770: TRL 0.15 passes logits_to_keep, transformers 4.48's Qwen2 swallows it"),
    Launch("grpo-lora-checkpointing-trl0.15-0.5b", "H1 peft-gradient-checkpointing-no-grad", "legacy",
           "qwen2.5-0.5b-instruct", ["python", "train.py", "recipe.json"],
           {"train.py": QUICKSTART, "recipe.json": {"model": "{model}", "data": "{data}", "output_dir": "out",
                                                    "num_generations": 4, "per_device_train_batch_size": 8,
                                                    "max_completion_length": 128, "bf16": True, "logging_steps": 1,
                                                    "report_to": "none", "gradient_checkpointing": True,
                                                    "model_init_kwargs": {"torch_dtype": "bfloat16"},
                                                    "lora": {"r": 16, "lora_alpha": 32, "task_type": "CAUSAL_LM"}}},
           "smoke-step", source="trl#3089, trl#3150: LoRA with gradient checkpointing on TRL 0.15.2"),
    Launch("ppo-no-value-model-trl0.15-0.5b", "F1 ppo-value-model-none", "legacy", "qwen2.5-0.5b-instruct",
           ["python", "ppo.py", "recipe.json"],
           {"ppo.py": PPO, "recipe.json": {"sft_model_path": "{model}", "reward_model_path": "{model}",
                                           "data": "{prompts}", "output_dir": "out", "per_device_train_batch_size": 4,
                                           "response_length": 64, "bf16": True, "report_to": "none",
                                           "stop_token": "eos", "total_episodes": 16}},
           "value-model", source="trl#2312, trl#3292: PPOTrainer with value_model None (TRL's example otherwise)"),
    Launch("async-grpo-example", "A2/G1: AsyncGRPO's set-up (vLLM, kernels)", "modern", "qwen2.5-0.5b-instruct",
           ["python", str(ROOT / "fixtures" / "launch" / "async_grpo_example.py"), "{model}"], {},
           "async-grpo-setup", gpu_only=True, source="TRL's examples/scripts/async_grpo.py (fixtures/launch/async_grpo_example.py)"),
    Launch("grpo-healthy-full-1.5b", "healthy", "modern", "qwen2.5-1.5b-instruct",
           ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": _recipe(model_name_or_path="{model}", beta=0.04, gradient_checkpointing=True)},
           None, source="`trl grpo`, full fine-tune with a reference model (beta 0.04) and gradient checkpointing"),
    Launch("grpo-full-7b-fp32-does-not-fit", "C10 model-loaded-in-fp32-by-default", "modern", "qwen2.5-7b-instruct",
           ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": {**_recipe(model_name_or_path="{model}"), "dtype": "float32", "bf16": False}},
           "gpu-capacity", gpu_only=True, alone=True,
           source="trl#6684: weights loaded in fp32 (AsyncGRPO hard-coded it before trl#6717), AdamW states beside "
                  "them: a 7B full fine-tune needs about 120 GiB"),
    Launch("grpo-full-7b-fp32-first-save-no-disk", "issue 60: the output disk cannot hold the first checkpoint",
           "modern", "qwen2.5-7b-instruct", ["trl", "grpo", "--config", "recipe.yaml"],
           {"recipe.yaml": {**_recipe(model_name_or_path="{model}"), "dtype": "float32", "bf16": False,
                            "save_strategy": "steps", "save_steps": 1}},
           "run-phases", gpu_only=True, alone=True,
           source="the 7B fp32 full fine-tune of trl#6684 on a GPU it fits (H200): its checkpoint (fp32 weights and "
                  "AdamW states, ~85 GiB) on a disk with less free; saved after step 1 to reach the first save"),
]


# ---------------------------------------------------------------------------------------------------- measuring
class Sampler:
    """NVML's used memory of GPU 0 (whole, and per process) and psutil's resident memory of a process tree, every
    20 ms while a command runs."""

    def __init__(self, root_pid: int):
        self.root, self.stop = root_pid, threading.Event()
        self.gpu_total = self.gpu_tree = self.rss = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        nvml = _nvml()
        while not self.stop.wait(0.02):
            try:
                root = psutil.Process(self.root)
                tree = [root] + root.children(recursive=True)
            except psutil.Error:
                continue
            pids = {p.pid for p in tree}
            rss = 0
            for p in tree:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            self.rss = max(self.rss, rss)
            if nvml:
                pynvml, handle = nvml
                self.gpu_total = max(self.gpu_total, pynvml.nvmlDeviceGetMemoryInfo(handle).used)
                try:
                    mine = sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                               if p.pid in pids)
                    self.gpu_tree = max(self.gpu_tree, mine)
                except pynvml.NVMLError:
                    pass


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None


def gpu_used() -> int | None:
    nvml = _nvml()
    return nvml[0].nvmlDeviceGetMemoryInfo(nvml[1]).used if nvml else None


def timed(command: list[str], cwd: Path, env: dict, timeout: float) -> dict:
    """Run `command`, sampling; its status, output tail, seconds and peaks."""
    before = gpu_used()
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    sampler = Sampler(proc.pid)
    sampler.thread.start()
    try:
        out, err = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        status = "timeout"
    sampler.stop.set()
    sampler.thread.join()
    return {"status": status, "seconds": round(time.perf_counter() - start, 1), "stdout": out, "stderr": err,
            "gpu_used_peak_gib": round((sampler.gpu_total - before) / GiB, 3) if before is not None else None,
            "gpu_tree_peak_gib": round(sampler.gpu_tree / GiB, 3) if before is not None else None,
            "rss_peak_gib": round(sampler.rss / GiB, 3)}


# ----------------------------------------------------------------------------------------------------- the run
def environment(kind: str, args) -> tuple[str, dict]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    python = sys.executable
    if kind == "legacy":
        python = args.legacy_python or python
        if args.legacy_pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.legacy_pythonpath, env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env["PATH"]])
    return python, env


def versions(python: str, env: dict) -> dict:
    code = ("import json, torch, transformers, trl, trl_doctor; print(json.dumps({'torch': torch.__version__, "
            "'transformers': transformers.__version__, 'trl': trl.__version__, 'trl-doctor': trl_doctor.__version__, "
            "'cuda': torch.cuda.is_available()}))")
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr[-400:]}


def write_files(folder: Path, files: dict, values: dict, cuda: bool) -> None:
    def fill(x):
        if isinstance(x, str):
            for k, v in values.items():
                x = x.replace("{" + k + "}", v)
            return x
        if isinstance(x, dict):  # a CPU rehearsal cannot train in bf16: transformers refuses it there
            return {k: fill(v) if cuda or k != "bf16" else False for k, v in x.items()}
        if isinstance(x, list):
            return [fill(v) for v in x]
        return x

    (folder / "rewards.py").write_text(REWARDS)
    for name, content in files.items():
        content = fill(content)
        if isinstance(content, str):
            text = content
        elif name.endswith(".json"):
            text = json.dumps(content, indent=1)
        else:
            text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in content.items())
        (folder / name).write_text(text)


def doctor_verdict(report: dict) -> dict:
    rules = {r["rule"]: r["status"] for r in report.get("results", [])}
    fails = {r["rule"]: r["message"] for r in report.get("results", []) if r["status"] == "fail"}
    warns = {r["rule"]: r["message"] for r in report.get("results", []) if r["status"] == "warn"}
    estimate = None
    for r in report.get("results", []):
        said = r.get("details", {}).get("memory estimate per GPU") if r["rule"] == "gpu-capacity" else None
        if said:
            estimate = float(re.search(r"([\d.]+) GiB", said).group(1))
    return {"rules": rules, "fail": fails, "warn": warns, "estimate_gib": estimate}


def launch_outcome(records: list[dict], run: dict, launch: Launch) -> tuple[str | None, dict]:
    """The failure the launch met (None: it trained and showed no symptom), and what it did."""
    # a launcher's own exception (accelerate's CalledProcessError for its child's exit) comes after its child's
    errors = sorted((r["exception"] for r in records if r.get("exception")),
                    key=lambda e: e["type"] in ("CalledProcessError", "SystemExit"))
    steps = max([r["steps"] for r in records] or [0])
    did = {"exit": run["status"], "steps": steps, "seconds": run["seconds"],
           "first_logs": [x for r in records for x in r["logs"]][:2]}
    if errors:
        e = errors[0]
        did["error"] = f"{e['type']}: {e['message']} (at {e['at']})"
        return did["error"], did
    if run["status"] != 0:
        did["error"] = f"exit {run['status']}: " + (run["stderr"].strip().splitlines() or [""])[-1][:400]
        return did["error"], did
    if steps == 0:
        did["error"] = "no optimizer step was taken"
        return did["error"], did
    symptom = launch.silent(records) if launch.silent else None
    if symptom:
        did["symptom"] = symptom
    return symptom, did


def prepare(launch: Launch, args, work: Path, models: dict, cuda: bool) -> tuple[Path, list[str], str, dict]:
    """The launch's folder, its files and its command, as a user has them; the Python and environment it runs in."""
    python, env = environment(launch.env, args)
    folder = work / launch.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    values = {"model": str(models[(launch.env, launch.model)]),
              "data": str(ROOT / "fixtures" / "data" / "chat_many.jsonl"),
              "prompts": str(ROOT / "fixtures" / "data" / "prompts.jsonl")}
    write_files(folder, launch.files, values, cuda)
    command = [values["model"] if c == "{model}" else python if c == "python" else c for c in launch.command]
    return folder, command, python, env


def check_one(launch: Launch, args, work: Path, models: dict, cuda: bool) -> dict:
    """`trl-doctor check -- COMMAND` in the launch's folder: the doctor's verdict and its own cost."""
    folder, command, python, env = prepare(launch, args, work, models, cuda)
    check = timed([python, "-m", "trl_doctor", "check", "--format", "json", "-o", "check.json", "--no-progress",
                   "--", *command], folder, env, args.check_timeout)
    report = json.loads((folder / "check.json").read_text()) if (folder / "check.json").is_file() else {}
    doctor = {**doctor_verdict(report), "exit": check["status"], "seconds": check["seconds"],
              "gpu_peak_gib": check["gpu_tree_peak_gib"], "rss_peak_gib": check["rss_peak_gib"]}
    if not report:
        doctor["stderr"] = check["stderr"][-1500:]
    doctor["report"] = report  # the whole report (each rule's details: the step's and each phase's GPU peak)
    return doctor


def launch_one(launch: Launch, args, work: Path, models: dict, cuda: bool) -> dict:
    """COMMAND itself, its first steps, with the hook recording what it did."""
    folder, command, _, env = prepare(launch, args, work, models, cuda)
    record = folder / "records"
    record.mkdir()
    env = dict(env, GPU_VERDICTS_RECORD=str(record), GPU_VERDICTS_STEPS="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HOOK), env.get("PYTHONPATH")])))
    run = timed(command, folder, env, args.launch_timeout)
    records = [json.loads(p.read_text()) for p in sorted(record.glob("*.json"))]
    failure, did = launch_outcome(records, run, launch)
    if not records:
        did["stderr"] = run["stderr"][-1500:]
    peaks = [r["peak_allocated"] for r in records if r.get("peak_allocated")]
    did["failure"] = failure
    did["measured_peak_gib"] = run["gpu_tree_peak_gib"]  # NVML, the launch's own processes: context and cache too
    did["gpu_used_peak_gib"] = run["gpu_used_peak_gib"]  # the whole GPU's used memory less before (others too)
    reserved = [r["peak_reserved"] for r in records if r.get("peak_reserved")]
    did["torch_peak_reserved_gib"] = round(max(reserved) / GiB, 3) if reserved else None
    did["torch_peak_allocated_gib"] = round(max(peaks) / GiB, 3) if peaks else None
    shutil.rmtree(folder / "out", ignore_errors=True)
    return did


def judge(launch: Launch, doctor: dict, did: dict, cuda: bool) -> dict:
    entry = {"estimate_gib": doctor["estimate_gib"],
             "measured_peak_gib": did["measured_peak_gib"] if did["steps"] else None}
    if entry["estimate_gib"] and entry["measured_peak_gib"]:
        entry["estimate_error_pct"] = round(100 * (entry["estimate_gib"] - entry["measured_peak_gib"])
                                            / entry["measured_peak_gib"], 1)
    failure, fails = did["failure"], doctor["fail"]
    # a launch that fails must be failed, by the rule its failure mode names; a silent symptom (it trains, worse)
    # must be named by that rule, failed or warned; a launch that trains without a symptom must have no fail
    said = {**doctor["warn"], **fails} if launch.silent and "error" not in did else fails
    entry["agree"] = (launch.rule in said) if failure else not fails
    if launch.gpu_only and not cuda:
        entry["agree"] = None  # a CPU rehearsal cannot decide it
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["real", "tiny"], default=None)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="gpu-verdicts-out")
    parser.add_argument("--work", default=None)
    parser.add_argument("--budget", type=float, default=480.0, help="seconds; launches past it are not started")
    parser.add_argument("--check-timeout", type=float, default=240.0)
    parser.add_argument("--parallel-checks", type=int, default=4)
    parser.add_argument("--parallel-launches", type=int, default=4)
    parser.add_argument("--alone-by", type=float, default=600.0,
                        help="seconds; a launch that must run alone on the GPU is not started past it")
    parser.add_argument("--launch-timeout", type=float, default=180.0)
    parser.add_argument("--legacy-python", default=None)
    parser.add_argument("--legacy-pythonpath", default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    import torch

    cuda = torch.cuda.is_available()
    args.size = args.size or ("real" if cuda else "tiny")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-verdicts-"))
    launches = [x for x in LAUNCHES if not args.only or x.name in args.only.split(",")]
    from concurrent.futures import ThreadPoolExecutor

    kinds = sorted({x.env for x in launches})
    models: dict[tuple[str, str], Path] = {}

    def build(kind: str) -> str:
        names = sorted({x.model for x in launches if x.env == kind})
        python, env = environment(kind, args)
        t = time.perf_counter()
        built = subprocess.run([python, __file__, "--build", ",".join(names), "--into", str(work / f"models-{kind}"),
                                "--size", args.size, "--device", "cuda" if cuda else "cpu"], env=env,
                               capture_output=True, text=True)
        if built.returncode:
            raise SystemExit(f"building the {kind} models failed:\n{built.stderr[-3000:]}")
        models.update({(kind, n): work / f"models-{kind}" / n for n in names})
        return f"built {names} for {kind} in {time.perf_counter() - t:.0f}s"

    with ThreadPoolExecutor(4) as pool:  # both environments' versions and models at once
        found = {k: pool.submit(versions, *environment(k, args)) for k in kinds}
        for line in pool.map(build, kinds):
            print(line, flush=True)
        envs = {k: f.result() for k, f in found.items()}
    print(envs, flush=True)
    gpu = torch.cuda.get_device_name(0) if cuda else "none (CPU rehearsal)"
    # the checks first, a few at once (each judges the GPU as its launch will find it: no launch beside it); then
    # the launches a few at once, each one's peak read for its own processes (NVML per process). Those marked
    # `alone` (a launch that fills the GPU) are checked and launched last, one at a time, while the budget lasts:
    # beside other checks the GPU has less free memory than the launch finds (an H200 run: the 7B check judged
    # 108.4 GiB free of 139 while four checks ran)
    def check(launch: Launch) -> dict:
        return check_one(launch, args, work, models, cuda)

    together = [x for x in launches if not x.alone]
    with ThreadPoolExecutor(args.parallel_checks) as pool:
        checked = dict(zip([x.name for x in together], pool.map(check, together)))
    checked.update({x.name: check(x) for x in launches if x.alone})
    doctors = [checked[x.name] for x in launches]
    print(f"checks done at {time.perf_counter() - start:.0f}s", flush=True)
    entries = {}
    for launch, doctor in zip(launches, doctors):
        entries[launch.name] = {"name": launch.name, "gpu": gpu, "versions": envs[launch.env], "mode": launch.mode,
                                "source": launch.source, "env": launch.env,
                                "command": " ".join(launch.command).replace(str(ROOT) + "/", ""),
                                "model": launch.model,
                                "model_shape": MODELS[launch.model].shape if args.size == "real" else "tiny",
                                "rule": launch.rule, "doctor": doctor,
                                "launch": {"not_run": "not started: past the run's budget (--budget, --alone-by)"}}
    lock = threading.Lock()

    def save() -> None:
        with lock:  # the verdicts, and beside them the checks' whole reports (for the doctor's own cost)
            rows = [{**e, "doctor": {k: v for k, v in e["doctor"].items() if k != "report"}} for e in entries.values()]
            (out / "gpu-verdicts.json").write_text(json.dumps(rows, indent=1) + "\n")
            reports = {e["name"]: e["doctor"].get("report") for e in entries.values()}
            (out / "gpu-verdicts-reports.json").write_text(json.dumps(reports) + "\n")

    save()

    def launch_and_judge(launch: Launch, by: float) -> None:
        if time.perf_counter() - start > by:
            return
        entry = entries[launch.name]
        entry["launch"] = launch_one(launch, args, work, models, cuda)
        entry.update(judge(launch, entry["doctor"], entry["launch"], cuda))
        save()
        print(json.dumps({k: entry[k] for k in ("name", "agree", "estimate_gib", "measured_peak_gib")}),
              "| doctor fails", sorted(entry["doctor"]["fail"]), f"({entry['doctor']['seconds']}s)",
              "| launch", entry["launch"].get("error") or entry["launch"].get("symptom") or
              f"{entry['launch']['steps']} steps", f"({entry['launch']['seconds']}s)", flush=True)

    with ThreadPoolExecutor(args.parallel_launches) as pool:
        list(pool.map(lambda x: launch_and_judge(x, args.budget), [x for x in launches if not x.alone]))
    for launch in [x for x in launches if x.alone]:
        launch_and_judge(launch, args.alone_by)
    results = list(entries.values())
    print(f"done in {time.perf_counter() - start:.0f}s: {sum(1 for r in results if r.get('agree'))} of "
          f"{len(results)} agree")
    return 0


if __name__ == "__main__":
    if "--build" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--build")
        ap.add_argument("--into")
        ap.add_argument("--size")
        ap.add_argument("--device")
        a = ap.parse_args()
        for n in a.build.split(","):
            build_model(n, Path(a.into), a.size, a.device)
        sys.exit(0)
    sys.exit(main())
