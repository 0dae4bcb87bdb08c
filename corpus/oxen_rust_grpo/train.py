"""Oxen.ai's "Cargo is all you need" Rust coder GRPO notebook, reproduced for the corpus (not copied).

Source: Oxen-AI/GRPO-With-Cargo-Feedback @ 11d0f570898f5764d9a366898ccb3da4c745a378 (2025-03-08), train.py: a
Marimo notebook whose "Train" form runs one cell that builds the model, wraps it with LoRA and calls GRPOTrainer.
Written in March 2025 (trl 0.15 / 0.16).

Kept: the form's defaults as if "Train" were pressed (Qwen2.5-Coder-1.5B-Instruct, 4 generations, Use PEFT and Use
GPU checked, save / commit every 100), the dataset shaping (system + user messages from `rust_prompt`,
`rust_test_list` copied to `test_list`), the six reward functions (cargo build / clippy / test on a fresh cargo
project per completion, and four format checks) each wrapped by the experiment's logging decorator that reads the
`task_id` / `rust_prompt` columns, the model load (bf16, device_map "auto", then `.to("cuda")`), the LoRA wrap
done by hand with get_peft_model *and* the same LoraConfig handed to GRPOTrainer as peft_config,
enable_input_require_grads, the GRPOConfig, and the callback that appends the logs to a jsonl file.
Changed for the corpus: the model is the local Qwen2.5-Instruct stand-in, the Oxen.ai parquet
(ox/Rust cargo_test_passed_train.parquet) is a local jsonl with its columns; the Oxen remote repository (branch per
experiment, workspace commits every 100 steps) and the Marimo progress bar are left out; warmup_ratio=0.1 is
written as transformers 5 takes it (warmup_steps=0.1) and max_prompt_length=256 is left out (trl 1.x's GRPOConfig
has no such field: prompts are no longer truncated).
"""

import functools
import json
import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from uuid import uuid4

import torch
from datasets import load_dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

# the notebook form's defaults
MODEL_NAME = "../models/qwen2.5-instruct"  # Qwen/Qwen2.5-Coder-1.5B-Instruct
TRAIN_FILE = "../data/rust_cargo_tasks.jsonl"  # cargo_test_passed_train.parquet from the ox/Rust repository
SAVE_EVERY = 100
COMMIT_EVERY = 100
NUM_GENERATIONS = 4
USE_PEFT = True
USE_GPU = True

SYSTEM_PROMPT = """You are a pragmatic Rust programmer who enjoys test driven development. Given the following question, write a Rust function to complete the task. Make the code simple and easy to understand. The code should pass `cargo build` and `cargo clippy`. Try to limit library usage to the standard library std. Be careful with your types, and try to limit yourself to the basic built in types and standard library functions. When writing the function you can think through how to solve the problem and perform reasoning in the comments above the function.

Then write unit tests for the function you defined. Write multiple unit tests for the function. The tests should be a simple line delimited list of assert! or assert_eq! statements. When writing the unit tests you can have comments specifying what you are testing in plain english. The tests should use super::*.

Make sure to only respond with a single  ```rust``` block. The unit tests must be defined inside the mod tests {} module. Make sure to import any standard library modules that you need. Do not add a main function.
"""

CODE_BLOCK = r"```rust\n(.*?)\n```"
TEST_BLOCK = r"(#\[cfg\(test\)\]\s*mod\s+tests\s*\{.*?\})"
MAIN_RS = """
#![allow(dead_code)]
// {code}

// Need basic main function for the code to compile
fn main() {
  println!("Hello World");
}
"""
CARGO_TOML = """
[package]
name = "rust-program"
version = "0.1.0"
edition = "2021"

[dependencies]
"""


def _first_group(text, pattern):
    found = re.search(pattern, text, re.DOTALL)
    return found.group(1) if found else None


def extract_rust_code(response):
    return _first_group(response, CODE_BLOCK) or response


def extract_test_code(response):
    return _first_group(response, TEST_BLOCK)


def run_cargo(rust_code, tool):
    """A throwaway cargo project with the code in main.rs; whether `cargo <tool> --quiet` passed."""
    project = Path("outputs") / "tests" / f"temp_rust_project_{uuid4()}"
    (project / "src").mkdir(parents=True, exist_ok=True)
    (project / "src" / "main.rs").write_text(MAIN_RS.replace("// {code}", extract_rust_code(rust_code)))
    (project / "Cargo.toml").write_text(CARGO_TOML)
    try:
        done = subprocess.run(["cargo", tool, "--quiet"], cwd=project, capture_output=True, text=True, timeout=60)
        passed = done.returncode == 0
    except Exception as exc:  # cargo missing, timeout
        print(exc)
        passed = False
    shutil.rmtree(project)
    return passed


def one_code_block(response):
    return 0.5 if extract_rust_code(response) and "fn " in response else 0.0


def one_test_block(response):
    return 0.5 if extract_test_code(response) else 0.0


def asserts_in_tests(response):
    tests = extract_test_code(response)
    if not tests:
        return 0.0
    asserts = {line.strip() for line in tests.split("\n")
               if line.strip().startswith("assert!(") or line.strip().startswith("assert_eq!(")}
    return 1.0 if len(asserts) >= 4 else 0.25 * len(asserts)


def more_than_one_line(response):
    if not (one_code_block(response) and one_test_block(response)):
        return 0.0
    lines = [ln.strip() for ln in extract_rust_code(response).split("\n")]
    return 1.0 if sum(1 for ln in lines if not ln.startswith("//") and len(ln) >= 2) >= 3 else 0.0


class Experiment:
    """The notebook's OxenExperiment without the remote repository: a run folder and a per-reward jsonl log."""

    def __init__(self, model_name, output_dir, experiment_type="GRPO"):
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self.name = f"{experiment_type}_0_{stamp}_{model_name.split('/')[-1]}"
        self.dir = Path(output_dir) / self.name
        os.makedirs(self.dir, exist_ok=True)

    def log(self, filename):
        path = self.dir / filename

        def decorator(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                started = time.time()
                try:
                    result = func(*args, **kwargs)
                    for i, score in enumerate(result):
                        entry = {"timestamp": datetime.now().isoformat(), "function": func.__name__, "score": score,
                                 "task_id": kwargs["task_id"][i], "rust_prompt": kwargs["rust_prompt"][i],
                                 "completion": kwargs["completions"][i][0]["content"],
                                 "func_execution_time": time.time() - started}
                        with open(path, "a") as f:
                            f.write(json.dumps(entry) + "\n")
                except Exception as exc:
                    print(f"Could not run func {func.__name__}: {exc}")
                return result

            return wrapper

        return decorator


class LogCallback(TrainerCallback):
    """The notebook's OxenTrainerCallback without the workspace commits: logs appended to logs.jsonl."""

    def __init__(self, experiment, commit_every):
        self.log_file = os.path.join(experiment.dir, "logs.jsonl")
        self.commit_every = commit_every

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs["timestamp"] = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        with open(self.log_file, "a") as f:
            f.write(json.dumps(logs) + "\n")


def create_dataset(path, system_prompt):
    data = load_dataset("json", data_files={"train": path})["train"]
    return data.map(lambda x: {"prompt": [{"role": "system", "content": system_prompt},
                                          {"role": "user", "content": x["rust_prompt"]}],
                               "test_list": x["rust_test_list"]})


experiment = Experiment(MODEL_NAME, "outputs")
train_dataset = create_dataset(TRAIN_FILE, SYSTEM_PROMPT)


@experiment.log("non_empty_rewards.jsonl")
def non_empty_reward_func(prompts, completions, **kwargs) -> list[float]:
    return [more_than_one_line(c[0]["content"]) for c in completions]


@experiment.log("tests_have_asserts_rewards.jsonl")
def tests_have_asserts_reward_func(prompts, completions, **kwargs) -> list[float]:
    return [asserts_in_tests(c[0]["content"]) for c in completions]


@experiment.log("test_block_count_rewards.jsonl")
def test_block_count_reward_func(prompts, completions, **kwargs) -> list[float]:
    return [one_test_block(c[0]["content"]) for c in completions]


@experiment.log("cargo_build_rewards.jsonl")
def cargo_build_reward_func(prompts, completions, **kwargs) -> list[float]:
    return [1.0 if run_cargo(extract_rust_code(c[0]["content"]), "build") else 0.0 for c in completions]


@experiment.log("cargo_clippy_rewards.jsonl")
def cargo_clippy_reward_func(prompts, completions, **kwargs) -> list[float]:
    return [1.0 if run_cargo(extract_rust_code(c[0]["content"]), "clippy") else 0.0 for c in completions]


@experiment.log("cargo_test_rewards.jsonl")
def cargo_test_reward_func(prompts, completions, **kwargs) -> list[float]:
    scores = []
    for c in completions:
        code = extract_rust_code(c[0]["content"])
        scores.append(2.0 if extract_test_code(code) and run_cargo(code, "test") else 0.0)
    return scores


device, device_map = ("cuda", "auto") if USE_GPU else ("cpu", None)
tokenizer = AutoTokenizer.from_pretrained(MODEL_NAME)
model = AutoModelForCausalLM.from_pretrained(MODEL_NAME, torch_dtype=torch.bfloat16, device_map=device_map).to(device)

peft_config = None
if USE_PEFT:
    peft_config = LoraConfig(r=16, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM",
                             lora_dropout=0.05)
    model = get_peft_model(model, peft_config)
model.enable_input_require_grads()

trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
total = sum(p.numel() for p in model.parameters())
print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total}")

training_args = GRPOConfig(
    output_dir=str(experiment.dir),
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.1,
    warmup_steps=0.1,  # the notebook's warmup_ratio=0.1; transformers 5 takes the ratio as a float warmup_steps
    lr_scheduler_type="cosine",
    logging_steps=1,
    bf16=True,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=4,
    num_generations=NUM_GENERATIONS,
    max_completion_length=786,
    num_train_epochs=1,
    save_steps=SAVE_EVERY,
    save_total_limit=1,
    max_grad_norm=0.1,
    log_on_each_node=False,
    optim="adamw_torch",
)
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[cargo_build_reward_func, cargo_clippy_reward_func, cargo_test_reward_func, non_empty_reward_func,
                  test_block_count_reward_func, tests_have_asserts_reward_func],
    args=training_args,
    train_dataset=train_dataset,
    peft_config=peft_config,  # None when Use PEFT is unchecked; here the model is already a PeftModel
    callbacks=[LogCallback(experiment, commit_every=COMMIT_EVERY)],
)
trainer.train()
