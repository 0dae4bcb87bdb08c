"""A SLURM tutorial's GRPO script (GSM8K, LoRA, DeepSpeed through TrainingArguments), reproduced for the corpus.

Source: boss-chanon/tutorial_grpo_on_lanta @ cc7a02f50877ef64efc080e78246c5e8980c305f, train.py, launched by
submit_train.sh (sbatch on the LANTA supercomputer: one node, `accelerate launch --num_machines 1 --num_processes 2
--multi_gpu --mixed_precision fp16 ... --deepspeed <config> --bf16 True`). Kept: HfArgumentParser over a
ScriptArguments dataclass and GRPOConfig, the GSM8K copy read with load_from_disk(...)["train"], the system prompt
plus a one-shot exchange before each question, the `#### answer` extraction, pad = eos, LoRA r=16 / alpha=64 on
"all-linear", the model handed to GRPOTrainer as a path (nothing passed to from_pretrained), the two rewards
(exact match of the <answer> block against `answer`, a loose tag regex), save_model at the end.
Changed for the corpus: the model and dataset paths come from the command line as in the original, pointing at the
corpus stand-ins (Qwen3-1.7B -> ../models/qwen2.5-instruct, the saved openai/gsm8k -> ../data/gsm8k_disk); the
original's unused imports (BitsAndBytesConfig, torch) are left out.
"""

import os
import re
from dataclasses import dataclass, field

from datasets import load_from_disk
from peft import LoraConfig
from transformers import AutoTokenizer, HfArgumentParser
from trl import GRPOConfig, GRPOTrainer

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

SYSTEM_PROMPT = f"""
Respond in the following format:

{THINK_OPEN}
...
{THINK_CLOSE}
{ANSWER_OPEN}
...
{ANSWER_CLOSE}
"""
SHOT_REPLY = f"""
{THINK_OPEN}
{{reasoning}}
{THINK_CLOSE}
{ANSWER_OPEN}
{{answer}}
{ANSWER_CLOSE}
"""
SHOT = {"question": "What is the largest single-digit prime number?",
        "reasoning": "9 is divisible by 3 and 8 is divisible by 2, but 7 is prime.", "answer": "7"}


@dataclass
class ScriptArguments:
    model_name: str = field(default="Qwen/Qwen2.5-1.5B-Instruct")
    dataset_path: str = field(default=None, metadata={"help": "Local path to dataset"})
    use_lora: bool = field(default=True)


def answer_block(text):
    try:
        return text.split(ANSWER_OPEN)[-1].split(ANSWER_CLOSE)[0].strip()
    except Exception:
        return ""


def hash_answer(text):
    return text.split("####")[1].strip() if "####" in text else None


def prepare(dataset_path, one_shot=True, max_samples=None):
    rows = load_from_disk(dataset_path)["train"]

    def to_chat(row):
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        if one_shot:
            messages += [{"role": "user", "content": SHOT["question"]},
                         {"role": "assistant",
                          "content": SHOT_REPLY.format(reasoning=SHOT["reasoning"], answer=SHOT["answer"])}]
        messages.append({"role": "user", "content": row["question"]})
        return {"prompt": messages, "answer": hash_answer(row["answer"])}

    rows = rows.map(to_chat)
    if max_samples and len(rows) > max_samples:
        rows = rows.shuffle(seed=42).select(range(max_samples))
    return rows


def correctness_reward_func(prompts, completions, answer, **kwargs):
    got = [answer_block(c[0]["content"]) for c in completions]
    return [2.0 if g == a else 0.0 for g, a in zip(got, answer)]


def format_reward_func(completions, **kwargs):
    pattern = (f"{re.escape(THINK_OPEN)}.*?{re.escape(THINK_CLOSE)}.*?"
               f"{re.escape(ANSWER_OPEN)}.*?{re.escape(ANSWER_CLOSE)}")
    return [0.5 if re.search(pattern, c[0]["content"], re.DOTALL) else 0.0 for c in completions]


def main():
    script_args, training_args = HfArgumentParser((ScriptArguments, GRPOConfig)).parse_args_into_dataclasses()
    dataset = prepare(script_args.dataset_path)
    if isinstance(dataset, dict):
        dataset = dataset["train"]

    tokenizer = AutoTokenizer.from_pretrained(script_args.model_name)
    tokenizer.pad_token = tokenizer.eos_token

    peft_config = None
    if script_args.use_lora:
        peft_config = LoraConfig(r=16, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
    print(dataset)

    trainer = GRPOTrainer(
        model=script_args.model_name,
        processing_class=tokenizer,
        reward_funcs=[correctness_reward_func, format_reward_func],
        args=training_args,
        train_dataset=dataset,
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(os.path.join(training_args.output_dir, "final_model"))


if __name__ == "__main__":
    main()
