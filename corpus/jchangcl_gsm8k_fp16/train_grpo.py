"""A Colab GRPO recipe for GSM8K, reproduced for the corpus (not copied).

Source: JChangCL/grpo-qwen25-gsm8k-finetune @ ab1049b31be51892a29238e6620f88692cfca8c7, train_grpo.py (pins in
requirements-colab.txt: trl==0.16.1, transformers==4.51.3, peft==0.15.2, accelerate==1.6.0), launched as its README's
Colab cell and its SLURM scripts do: `accelerate launch --config_file configs/accelerate_config.yaml train_grpo.py ...
--fp16 true --bf16 false --use_lora true --report_to wandb`.

What it passes that a config file cannot: `model_init_kwargs={"torch_dtype": torch.float16, "trust_remote_code":
True}` (a torch.dtype object, chosen from --bf16/--fp16), the model by name, a LoRA on Qwen2's seven projections,
plain-text prompts and four reward functions, one of them reading the `ground_truth` column.
Kept: the argument parser and its defaults, the prompt, the rewards, the GRPOConfig and GRPOTrainer calls.
Changed: openai/gsm8k is read from the corpus stand-in (`../data/gsm8k_disk`, a saved DatasetDict of the same
columns) instead of the hub.
"""

import argparse
import os
import re
from typing import Any

import torch
from datasets import load_from_disk
from peft import LoraConfig
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

SYSTEM_PROMPT = """You are a careful math reasoning assistant.
Return every response in exactly this XML format:
<reasoning>
step-by-step reasoning here
</reasoning>
<answer>
final numeric answer only
</answer>"""
FULL_FORMAT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL | re.IGNORECASE)
STRICT_FORMAT = re.compile(r"^\s*<reasoning>\s*.+?\s*</reasoning>\s*<answer>\s*.+?\s*</answer>\s*$",
                           re.DOTALL | re.IGNORECASE)
ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


def flag(value):
    if isinstance(value, bool):
        return value
    if value.lower() in {"true", "1", "yes", "y"}:
        return True
    if value.lower() in {"false", "0", "no", "n"}:
        return False
    raise argparse.ArgumentTypeError(f"Expected a boolean value, got {value!r}")


def text_of(completion: Any) -> str:
    """Completions arrive as strings (plain prompts) or as message lists (conversational prompts)."""
    if isinstance(completion, list) and completion and isinstance(completion[0], dict):
        return str(completion[0].get("content", ""))
    return completion if isinstance(completion, str) else str(completion)


def last_number(text: str) -> str:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", "").strip())
    if not numbers:
        return ""
    return numbers[-1][:-2] if numbers[-1].endswith(".0") else numbers[-1]


def tagged_answer(text: str) -> str:
    match = ANSWER_TAG.search(text)
    return last_number(match.group(1) if match else text)


def load_gsm8k(split: str, max_samples: int | None, seed: int):
    data = load_from_disk("../data/gsm8k_disk")[split]  # the source: load_dataset("openai/gsm8k", "main", split=split)
    if max_samples:
        data = data.shuffle(seed=seed).select(range(min(max_samples, len(data))))
    return data.map(lambda row: {"prompt": f"{SYSTEM_PROMPT}\n\nQuestion:\n{row['question']}\n\nResponse:",
                                 "ground_truth": last_number(row["answer"].split("####")[-1]),
                                 "question": row["question"]},
                    remove_columns=data.column_names)


def correctness_reward(completions, ground_truth, **kwargs):
    return [1.0 if (got := tagged_answer(text_of(c))) and got == want else 0.0
            for c, want in zip(completions, ground_truth)]


def soft_format_reward(completions, **kwargs):
    return [0.5 if FULL_FORMAT.search(text_of(c)) else 0.0 for c in completions]


def strict_format_reward(completions, **kwargs):
    return [0.5 if STRICT_FORMAT.match(text_of(c)) else 0.0 for c in completions]


def numeric_answer_reward(completions, **kwargs):
    return [0.25 if tagged_answer(text_of(c)) else 0.0 for c in completions]


def parse_args():
    p = argparse.ArgumentParser(description="GRPO fine-tuning on GSM8K")
    p.add_argument("--model_name_or_path", default="Qwen/Qwen2.5-1.5B-Instruct")
    p.add_argument("--output_dir", default="outputs/qwen2.5-1.5b-gsm8k-grpo")
    p.add_argument("--dataset_split", default="train")
    p.add_argument("--max_samples", type=int, default=256)
    p.add_argument("--max_steps", type=int, default=50)
    p.add_argument("--num_train_epochs", type=float, default=1.0)
    p.add_argument("--learning_rate", type=float, default=1e-6)
    p.add_argument("--per_device_train_batch_size", type=int, default=2)
    p.add_argument("--gradient_accumulation_steps", type=int, default=4)
    p.add_argument("--num_generations", type=int, default=2)
    p.add_argument("--max_prompt_length", type=int, default=512)
    p.add_argument("--max_completion_length", type=int, default=192)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--reward_weights", type=float, nargs=4, default=None)
    p.add_argument("--scale_rewards", type=flag, default=True)
    p.add_argument("--warmup_ratio", type=float, default=0.1)
    p.add_argument("--logging_steps", type=int, default=1)
    p.add_argument("--save_steps", type=int, default=25)
    p.add_argument("--report_to", default="wandb")
    p.add_argument("--run_name", default=None)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", type=flag, default=False)
    p.add_argument("--fp16", type=flag, default=True)
    p.add_argument("--use_lora", type=flag, default=True)
    p.add_argument("--lora_r", type=int, default=16)
    p.add_argument("--lora_alpha", type=int, default=32)
    p.add_argument("--lora_dropout", type=float, default=0.05)
    p.add_argument("--use_vllm", type=flag, default=False)
    p.add_argument("--vllm_server_host", default="0.0.0.0")
    p.add_argument("--vllm_server_port", type=int, default=8000)
    p.add_argument("--deepspeed", default=None)
    p.add_argument("--push_to_hub", type=flag, default=False)
    p.add_argument("--hub_model_id", default=None)
    return p.parse_args()


def main():
    args = parse_args()
    os.environ.setdefault("WANDB_PROJECT", "grpo-gsm8k-simulation")
    train_dataset = load_gsm8k(args.dataset_split, args.max_samples, args.seed)

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path, trust_remote_code=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    peft_config = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout, bias="none",
                             task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"]) if args.use_lora else None
    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32

    training_args = GRPOConfig(
        output_dir=args.output_dir, run_name=args.run_name,
        report_to=args.report_to if args.report_to.lower() != "none" else None,
        seed=args.seed, max_steps=args.max_steps, num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate, lr_scheduler_type="cosine", warmup_ratio=args.warmup_ratio,
        beta=args.beta, reward_weights=args.reward_weights, scale_rewards=args.scale_rewards,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, num_generations=args.num_generations,
        max_prompt_length=args.max_prompt_length, max_completion_length=args.max_completion_length,
        bf16=args.bf16, fp16=args.fp16, gradient_checkpointing=True, logging_steps=args.logging_steps,
        save_steps=args.save_steps, save_total_limit=2, log_completions=True, remove_unused_columns=False,
        use_vllm=args.use_vllm, vllm_server_host=args.vllm_server_host, vllm_server_port=args.vllm_server_port,
        deepspeed=args.deepspeed, push_to_hub=args.push_to_hub, hub_model_id=args.hub_model_id,
        model_init_kwargs={"torch_dtype": dtype, "trust_remote_code": True},
    )
    trainer = GRPOTrainer(
        model=args.model_name_or_path,
        reward_funcs=[correctness_reward, soft_format_reward, strict_format_reward, numeric_answer_reward],
        args=training_args, train_dataset=train_dataset, processing_class=tokenizer, peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    if args.push_to_hub:
        trainer.push_to_hub()


if __name__ == "__main__":
    main()
