"""FareedKhan-dev's "Train DeepSeek R1 ... from scratch" GRPO stage (code.ipynb), reproduced for the corpus (not copied).

Source: FareedKhan-dev/train-deepseek-r1 @ 67487bd74ddd59e13831bbd318b511dfd5825b65 (2025-03-21), code.ipynb, the
cells of the GRPO stage (R1 Zero) run top to bottom; requirements.txt pins nothing (trl, transformers latest).

Kept: the tokenizer (trust_remote_code, padding_side="right", pad = eos when unset) built but never given to the
trainer; the model loaded with trust_remote_code and torch_dtype bfloat16 and moved to the device by hand; the R1
system prompt and make_conversation (system + user from `problem`), NuminaMath-TIR's train and test splits with
`messages` removed; the five reward functions as written (accuracy with math_verify reading `solution`, format,
reasoning steps, cosine scaled, repetition penalty) chosen by GRPOScriptArguments' default ["accuracy", "format"];
the script's own ModelConfig dataclass (flash_attention_2 and bfloat16 there, never used); the TrainingArguments
as written, turned into the trainer's config with GRPOConfig(**training_args.to_dict()); the LoggingCallback; the
trainer given the model object, the train and the test split, and no processing_class.
Changed for the corpus: the model id (Qwen/Qwen2.5-0.5B-Instruct) is the local Qwen2.5-Instruct stand-in and the
dataset local json files with NuminaMath-TIR's columns; TrainingArguments' `evaluation_strategy="steps"` and
`warmup_ratio=0.1` are written as transformers 5 takes them (`eval_strategy`, a float `warmup_steps`) and its
`overwrite_output_dir=True` is left out (transformers 5 removed it; as published the notebook stops there); the
notebook's inference checks before and after training, the model card save and the SFT stage are left out.
"""

import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Optional

import torch
from datasets import load_dataset
from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify
from transformers import (AutoModelForCausalLM, AutoTokenizer, TrainerCallback, TrainerControl, TrainerState,
                          TrainingArguments)
from trl import GRPOConfig, GRPOTrainer

MODEL_NAME = "../models/qwen2.5-instruct"  # Qwen/Qwen2.5-0.5B-Instruct
OUTPUT_DIR = "data/Qwen-GRPO-training"
os.makedirs(OUTPUT_DIR, exist_ok=True)

tokenizer = AutoTokenizer.from_pretrained(MODEL_NAME, trust_remote_code=True, padding_side="right")
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token

model = AutoModelForCausalLM.from_pretrained(MODEL_NAME, trust_remote_code=True, torch_dtype=torch.bfloat16)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model.to(device)

SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think><answer> answer here </answer>"
)


def make_conversation(example):
    return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": example["problem"]}]}


def load_math_dataset():
    train, test = load_dataset("json", data_files={"train": "../data/numina_tir/train.jsonl",
                                                   "test": "../data/numina_tir/test.jsonl"}, split=["train", "test"])
    dataset = {"train": train, "test": test}
    for split in dataset:
        dataset[split] = dataset[split].map(make_conversation)
        if "messages" in dataset[split].column_names:
            dataset[split] = dataset[split].remove_columns("messages")
    return dataset


dataset = load_math_dataset()


def accuracy_reward(completions, **kwargs):
    """1.0 when math_verify finds the completion equal to the gold `solution`, 0.5 when the gold cannot be parsed."""
    contents = [completion[0]["content"] for completion in completions]
    rewards = []
    for content, sol in zip(contents, kwargs.get("solution")):
        gold = parse(sol, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        if gold:
            answer = parse(content, extraction_config=[LatexExtractionConfig(
                normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                         equations=True, boxed="all", units=True),
                boxed_match_priority=0, try_extract_without_anchor=False)], extraction_mode="first_match")
            rewards.append(float(verify(answer, gold)))
        else:
            rewards.append(0.5)
            print("Warning: Failed to parse gold solution:", sol)
    return rewards


def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think>\s*<answer>.*?</answer>$"
    contents = [completion[0]["content"] for completion in completions]
    return [1.0 if re.match(pattern, c, re.DOTALL | re.MULTILINE) else 0.0 for c in contents]


def reasoning_steps_reward(completions, **kwargs):
    pattern = r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)"
    contents = [completion[0]["content"] for completion in completions]
    return [min(1.0, len(re.findall(pattern, c, re.MULTILINE)) / 3) for c in contents]


def get_cosine_scaled_reward(min_value_wrong=-0.5, max_value_wrong=-0.1, min_value_correct=0.8,
                             max_value_correct=1.0, max_len=1000):
    def cosine_scaled_reward(completions, solution, accuracy_rewards, **kwargs):
        rewards = []
        for completion, sol, acc in zip(completions, solution, accuracy_rewards):
            cosine = math.cos(len(completion[0]["content"]) / max_len * math.pi)
            low, high = (min_value_correct, max_value_correct) if acc > 0.5 else (max_value_wrong, min_value_wrong)
            rewards.append(float(low + 0.5 * (high - low) * (1.0 + cosine)))
        return rewards
    return cosine_scaled_reward


def get_repetition_penalty_reward(ngram_size=3, max_penalty=-0.1):
    if max_penalty > 0:
        raise ValueError(f"max_penalty {max_penalty} should not be positive")

    def repetition_penalty_reward(completions, **kwargs):
        rewards = []
        for completion in (c[0]["content"] for c in completions):
            words = completion.lower().split()
            if completion == "" or len(words) < ngram_size:
                rewards.append(0.0)
                continue
            grams = list(zip(*[words[i:] for i in range(ngram_size)]))
            rewards.append((1 - len(set(grams)) / len(grams)) * max_penalty)
        return rewards
    return repetition_penalty_reward


@dataclass
class GRPOScriptArguments:
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format"])
    cosine_min_value_wrong: float = -0.5
    cosine_max_value_wrong: float = -0.1
    cosine_min_value_correct: float = 0.8
    cosine_max_value_correct: float = 1.0
    cosine_max_len: int = 1000
    repetition_n_grams: int = 3
    repetition_max_penalty: float = -0.1


training_args = TrainingArguments(
    output_dir=OUTPUT_DIR,  # the notebook's overwrite_output_dir=True is left out: transformers 5 removed it
    num_train_epochs=1,
    per_device_train_batch_size=8,
    per_device_eval_batch_size=16,
    gradient_accumulation_steps=2,
    learning_rate=5e-5,
    warmup_steps=0.1,  # the notebook's warmup_ratio=0.1; transformers 5 takes the ratio as a float warmup_steps
    weight_decay=0.01,
    logging_steps=10,
    eval_strategy="steps",  # the notebook's evaluation_strategy, which transformers 5 no longer has
    eval_steps=50,
    save_strategy="steps",
    save_steps=50,
    save_total_limit=2,
    dataloader_num_workers=2,
    seed=42,
    bf16=True,
    push_to_hub=False,
    gradient_checkpointing=True,
    report_to="none",
    remove_unused_columns=False,
)


@dataclass
class ModelConfig:  # the notebook's own: built, never used to load the model
    model_name_or_path: str = MODEL_NAME
    model_revision: Optional[str] = "main"
    torch_dtype: Optional[str] = "bfloat16"
    trust_remote_code: bool = True
    attn_implementation: Optional[str] = "flash_attention_2"


script_args = GRPOScriptArguments()
model_args = ModelConfig()


def get_reward_functions(script_args):
    registry = {
        "accuracy": accuracy_reward,
        "format": format_reward,
        "reasoning_steps": reasoning_steps_reward,
        "cosine": get_cosine_scaled_reward(script_args.cosine_min_value_wrong, script_args.cosine_max_value_wrong,
                                           script_args.cosine_min_value_correct, script_args.cosine_max_value_correct,
                                           script_args.cosine_max_len),
        "repetition_penalty": get_repetition_penalty_reward(script_args.repetition_n_grams,
                                                            script_args.repetition_max_penalty),
    }
    for name in script_args.reward_funcs:
        if name not in registry:
            raise ValueError(f"Reward function '{name}' not found in registry.")
    return [registry[name] for name in script_args.reward_funcs]


logger = logging.getLogger(__name__)


class LoggingCallback(TrainerCallback):
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if state.global_step % args.logging_steps == 0 and state.log_history:
            logger.info(f"Step {state.global_step}: Loss = {state.log_history[-1].get('loss', None)}")


reward_functions = get_reward_functions(script_args)
callbacks = [LoggingCallback()]

grpo_config = GRPOConfig(**training_args.to_dict())
grpo_trainer = GRPOTrainer(
    model=model,
    reward_funcs=reward_functions,
    args=grpo_config,
    train_dataset=dataset["train"],
    eval_dataset=dataset["test"],
    callbacks=callbacks,
)
train_result = grpo_trainer.train()
