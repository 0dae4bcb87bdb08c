"""philschmid's "Mini-R1" Countdown GRPO script, reproduced for the corpus (not copied).

Source: philschmid/deep-learning-pytorch-huggingface, training/scripts/run_r1_grpo.py @
4a7cc932a9fdaadb89aa934221de59097228a640 (2025-01-30; unchanged up to fe9cd62c5732eb90b3e3d4add99e8de2ae50d18c), written
for trl==0.14.0. Kept: a plain ScriptArguments dataclass parsed by TrlParser((ModelConfig, ScriptArguments, GRPOConfig))
with `--config`, the tokenizer's pad fallback to eos, the R1 prompt built as a string by apply_chat_template with the
assistant turn prefilled ("...<think>", continue_final_message=True), the two reward functions (a format regex and an
equation checked by a restricted eval, both reading the `target` / `nums` columns), and the trainer call with the model
as a string and get_peft_config(model_args). As in the original, nothing of ModelConfig but the model name and the
PEFT settings reaches the trainer: its torch_dtype and attn_implementation are parsed and never used.
Changed for the corpus: the 50k-row subset is capped at the rows the local dataset has, and the completion samples
the original appends to completion_samples/*.txt (10% of calls) are not written.
"""

import os
import re
from dataclasses import dataclass

from datasets import load_dataset
from transformers import AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint

from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config

os.environ["HF_HUB_ENABLE_HF_TRANSFER"] = "1"

SUBSET = 50000
SYSTEM = ("You are a helpful assistant. You first thinks about the reasoning process in the mind and then provides the "
          "user with the answer.")
TASK = ("Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic operations "
        "(+, -, *, /) one or multiple times but each number can only be used once. Show your work in <think> </think> "
        "tags. And return the final equation in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>. "
        "Think step by step inside <think> tags.")
PREFILL = "Let me solve this step by step.\n<think>"
FORMAT = re.compile(r"^<think>([^<]*(?:<(?!/?think>)[^<]*)*)<\/think>\n<answer>([\s\S]*?)<\/answer>$", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)<\/answer>")
ARITHMETIC = re.compile(r"^[\d+\-*/().\s]+$")


@dataclass
class ScriptArguments:
    dataset_id_or_path: str = "Jiayi-Pan/Countdown-Tasks-3to4"
    dataset_splits: str = "train"
    tokenizer_name_or_path: str = None


def format_reward_func(completions, target, **kwargs):
    """1.0 when '<think>' + completion is a think block followed by an answer block, else 0.0."""
    scores = []
    for completion in completions:
        try:
            found = FORMAT.search("<think>" + completion)  # the prompt prefilled <think>
            scores.append(1.0 if found is not None and len(found.groups()) == 2 else 0.0)
        except Exception:
            scores.append(0.0)
    return scores


def _equation_score(completion, goal, numbers):
    found = ANSWER.search("<think>" + completion)
    if found is None:
        return 0.0
    equation = found.group(1).strip()
    if sorted(int(n) for n in re.findall(r"\d+", equation)) != sorted(numbers):
        return 0.0  # every number exactly once
    if not ARITHMETIC.match(equation):
        return 0.0
    value = eval(equation, {"__builtins__": None}, {})
    return 1.0 if abs(float(value) - float(goal)) < 1e-5 else 0.0


def equation_reward_func(completions, target, nums, **kwargs):
    """1.0 when the answer is an equation over exactly the given numbers that evaluates to the target."""
    scores = []
    for completion, goal, numbers in zip(completions, target, nums):
        try:
            scores.append(_equation_score(completion, goal, numbers))
        except Exception:
            scores.append(0.0)
    return scores


def r1_prompt(tokenizer, numbers, target):
    conversation = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": TASK.format(numbers=numbers, target=target)},
                    {"role": "assistant", "content": PREFILL}]
    text = tokenizer.apply_chat_template(conversation, tokenize=False, continue_final_message=True)
    return {"prompt": text, "target": target, "nums": numbers}


def grpo_function(model_args, script_args, training_args):
    tokenizer = AutoTokenizer.from_pretrained(script_args.tokenizer_name_or_path or model_args.model_name_or_path,
                                              revision=model_args.model_revision,
                                              trust_remote_code=model_args.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    dataset = load_dataset(script_args.dataset_id_or_path, split=script_args.dataset_splits)
    dataset = dataset.shuffle(seed=42).select(range(min(SUBSET, len(dataset))))
    dataset = dataset.map(lambda row: r1_prompt(tokenizer, row["nums"], row["target"]))
    split = dataset.train_test_split(test_size=0.1)

    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=[format_reward_func, equation_reward_func],
        args=training_args,
        train_dataset=split["train"],
        eval_dataset=split["test"],
        peft_config=get_peft_config(model_args),
    )
    last = get_last_checkpoint(training_args.output_dir) if os.path.isdir(training_args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    trainer.model.config.use_cache = True
    trainer.save_model(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)


def main():
    parser = TrlParser((ModelConfig, ScriptArguments, GRPOConfig))
    model_args, script_args, training_args = parser.parse_args_and_config()
    grpo_function(model_args, script_args, training_args)


if __name__ == "__main__":
    main()
