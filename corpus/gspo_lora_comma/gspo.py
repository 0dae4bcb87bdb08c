# Reproduction (not a copy) of TRL's examples/scripts/gspo.py (huggingface/trl @ 46d09bd2, v0.21.0), launched as its
# docstring and docs/source/grpo_trainer.md (@ 56f4201d) write it: TRL's parser over (ScriptArguments, GRPOConfig,
# ModelConfig), LoRA from the command line through get_peft_config, a think-format reward and a math_verify accuracy
# reward over the dataset's `solution` column.
import torch
from datasets import load_dataset
from math_verify import LatexExtractionConfig, parse, verify
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments, TrlParser, get_peft_config


def think_format_reward(completions, **kwargs):
    texts = [c[0]["content"] for c in completions]
    return [1.0 if "</think>" in t and t.count("<think>") <= 1 else 0.0 for t in texts]


def accuracy_reward(completions, solution, **kwargs):
    rewards = []
    for completion, sol in zip(completions, solution):
        gold = parse(sol, extraction_mode="first_match")
        if len(gold) == 0:
            rewards.append(None)
            continue
        answer = parse(completion[0]["content"], extraction_mode="first_match",
                       extraction_config=[LatexExtractionConfig()])
        try:
            rewards.append(float(verify(gold, answer)))
        except Exception:
            rewards.append(None)
    return rewards


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    training_args.model_init_kwargs = dict(revision=model_args.model_revision,
                                           attn_implementation=model_args.attn_implementation, dtype=dtype)
    dataset = load_dataset("json", data_files=script_args.dataset_name, split="train")
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    trainer = GRPOTrainer(model=model_args.model_name_or_path, args=training_args,
                          reward_funcs=[think_format_reward, accuracy_reward], train_dataset=dataset,
                          processing_class=tokenizer, peft_config=get_peft_config(model_args))
    trainer.train()
