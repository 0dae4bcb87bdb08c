"""simple-rlve's minimal RLVR pipeline, reproduced for the corpus (not copied).

Source: harshbhatt7585/simple-rlve @ 6c05b98a07b417bd7959d5d969cb38a3dd859fd2, train.py (the repository's first
commit; requirements.txt there: trl>=0.28.0, transformers>=4.48.0, peft>=0.12.0), run as `python train.py` with its
`--use_cpu` flag ("Force CPU training").

Kept: the arithmetic environment that makes the dataset in memory (plain-string prompts asking for
<reasoning>/<answer> XML, `question` and `answer` columns), the reward as a callable class instance with its own
`__name__` that takes `answer`, `question` and `trainer_state` and appends every episode to a JSONL file in
output_dir, the JSONL metrics callback, the LoRA on every projection, and the GRPOConfig as the script builds it:
per-device batch 1 x 4 accumulation steps with 4 generations, max_completion_length 96, logging every step, a
checkpoint every 20 steps (2 kept), report_to "none", use_cpu, bf16/fp16 from torch.cuda, and
`model_init_kwargs={"torch_dtype": dtype}` with `dtype` a torch.dtype object (torch.float32 on a CPU), the trainer
given the model by name. Changed for the corpus: the default model (TinyLlama/TinyLlama-1.1B-Chat-v1.0) is passed
as `--model_name`, the local Qwen2.5-Instruct stand-in (its projections carry the same names); the dataset is made
by the same seeded generator, 256 episodes as the default.
"""

from __future__ import annotations

import argparse
import json
import logging
import operator
import random
import re
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

LOGGER = logging.getLogger("rlvr")
ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>", re.IGNORECASE | re.DOTALL)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Minimal RLVR training with a 1B model.")
    parser.add_argument("--model_name", type=str, default="TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    parser.add_argument("--output_dir", type=str, default="rlvr_outputs/tinyllama_rlvr")
    parser.add_argument("--num_episodes", type=int, default=256)
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--per_device_train_batch_size", type=int, default=1)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--max_prompt_length", type=int, default=128)  # unused on trl >= 0.28, as the source says
    parser.add_argument("--max_completion_length", type=int, default=96)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--save_steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--use_cpu", action="store_true", help="Force CPU training.")
    parser.add_argument("--disable_lora", action="store_true")
    parser.add_argument("--episodes_log_name", type=str, default="episode_rewards.jsonl")
    parser.add_argument("--metrics_log_name", type=str, default="training_metrics.jsonl")
    return parser.parse_args()


class ArithmeticEnv:
    """Two operations over three small integers, one seeded generator, as the source's environment."""

    OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}

    def __init__(self, seed: int = 42, low: int = 0, high: int = 20) -> None:
        self.rng, self.low, self.high = random.Random(seed), low, high

    def row(self) -> dict[str, str]:
        a, b, c = (self.rng.randint(self.low, self.high) for _ in range(3))
        op1, op2 = self.rng.choice(list(self.OPS)), self.rng.choice(list(self.OPS))
        question = f"({a} {op1} {b}) {op2} {c}"
        prompt = ("Solve the arithmetic problem.\nReturn exactly this XML format:\n"
                  "<reasoning>short step-by-step reasoning</reasoning>\n<answer>final integer</answer>\n"
                  f"Problem: {question}")
        return {"prompt": prompt, "question": question, "answer": str(self.OPS[op2](self.OPS[op1](a, b), c))}

    def dataset(self, n: int) -> Dataset:
        return Dataset.from_list([self.row() for _ in range(n)])


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return str(value[0].get("content", ""))
    return str(value)


class EpisodeRewardLogger:
    """The reward: correct answer +1 (else -0.25), the XML format +0.25; every episode appended to a JSONL file."""

    def __init__(self, log_path: Path) -> None:
        self.log_path, self.episode_id, self.__name__ = log_path, 0, "episode_reward"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")

    def __call__(self, prompts: list[Any], completions: list[Any], answer: list[str], question: list[str],
                 trainer_state=None, **_: Any) -> list[float]:
        rewards = []
        step = int(trainer_state.global_step) if trainer_state is not None else -1
        for prompt, completion, expected, q in zip(prompts, completions, answer, question, strict=True):
            text = as_text(completion)
            match = ANSWER.search(text)
            predicted = match.group(1).strip() if match else None
            shaped = all(tag in text for tag in ("<reasoning>", "</reasoning>", "<answer>", "</answer>"))
            reward = (1.0 if predicted == expected else -0.25) + (0.25 if shaped else 0.0)
            rewards.append(reward)
            with self.log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"episode_id": self.episode_id, "global_step": step, "question": q,
                                    "predicted_answer": predicted, "total_reward": reward,
                                    "prompt": as_text(prompt), "completion": text}) + "\n")
            self.episode_id += 1
        return rewards


class MetricsJSONLCallback(TrainerCallback):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_local_process_zero and logs:
            row = {k: v for k, v in logs.items() if isinstance(v, (int, float, str))}
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"global_step": int(state.global_step), **row}) + "\n")


def lora(disable: bool):
    if disable:
        return None
    from peft import LoraConfig

    return LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(message)s")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    train_dataset = ArithmeticEnv(seed=args.seed).dataset(args.num_episodes)
    tokenizer = AutoTokenizer.from_pretrained(args.model_name, use_fast=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    use_cpu = args.use_cpu or not torch.cuda.is_available()
    has_cuda = not use_cpu and torch.cuda.is_available()
    use_bf16 = bool(has_cuda and torch.cuda.is_bf16_supported())
    use_fp16 = bool(has_cuda and not use_bf16)
    dtype = torch.bfloat16 if use_bf16 else torch.float16 if use_fp16 else torch.float32

    grpo_args = GRPOConfig(
        output_dir=str(output_dir), run_name="minimal_rlvr_1b",
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        max_steps=args.max_steps, logging_steps=1, save_strategy="steps", save_steps=args.save_steps,
        save_total_limit=2, report_to="none", remove_unused_columns=False, use_cpu=use_cpu, bf16=use_bf16,
        fp16=use_fp16, num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        model_init_kwargs={"torch_dtype": dtype}, log_completions=False,
    )
    trainer = GRPOTrainer(
        model=args.model_name, reward_funcs=EpisodeRewardLogger(output_dir / args.episodes_log_name),
        args=grpo_args, train_dataset=train_dataset, processing_class=tokenizer,
        callbacks=[MetricsJSONLCallback(output_dir / args.metrics_log_name)], peft_config=lora(args.disable_lora),
    )
    trainer.train()
    final_dir = output_dir / "final_model"
    trainer.save_model(final_dir)
    tokenizer.save_pretrained(final_dir)


if __name__ == "__main__":
    main()
