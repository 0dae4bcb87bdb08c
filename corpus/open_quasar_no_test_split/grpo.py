# Reproduction (not a copy) of an open-r1 fork's GRPO entry point, as of troy12x/open-quasar @
# a13232b807299f317a78cf09cf3d7b1154f2ed93 (2025-02-11): src/open_r1/grpo.py (TrlParser over its script arguments, the
# fork's GRPOConfig subclass and TRL's ModelConfig; the dataset loaded by name, mapped to a system + user
# conversation, and handed to GRPOTrainer with `eval_dataset=dataset[script_args.dataset_test_split]` whenever
# eval_strategy is not "no"), src/open_r1/configs.py (the fields its GRPOConfig adds), src/open_r1/utils/callbacks.py
# (get_callbacks: none unless `callbacks` names some). Its setup.py pins trl and transformers to their git main of that
# day (trl 0.15.0.dev0) and vllm 0.7.1. What the script does after train() (a model card, an evaluation, a push) is
# left out: the check stops before it.
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
import trl
from datasets import load_dataset
from transformers import set_seed
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOTrainer, ModelConfig, ScriptArguments, TrlParser, get_peft_config

from rewards import accuracy_reward, format_reward, get_cosine_scaled_reward, reasoning_steps_reward

logger = logging.getLogger(__name__)


@dataclass
class GRPOConfig(trl.GRPOConfig):
    benchmarks: list[str] = field(default_factory=lambda: [])
    callbacks: list[str] = field(default_factory=lambda: [])
    system_prompt: Optional[str] = field(default=None)
    hub_model_revision: Optional[str] = field(default="main")
    overwrite_hub_revision: bool = field(default=False)
    push_to_hub_revision: bool = field(default=False)


@dataclass
class GRPOScriptArguments(ScriptArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format", "reasoning_steps", "cosine"])
    cosine_min_value_wrong: float = field(default=0.0)
    cosine_max_value_wrong: float = field(default=-0.5)
    cosine_min_value_correct: float = field(default=0.5)
    cosine_max_value_correct: float = field(default=1.0)
    cosine_max_len: int = field(default=8129)


SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>."
)


def get_callbacks(train_config, model_config):
    if train_config.callbacks:
        raise ValueError(f"Callback {train_config.callbacks[0]} not found in CALLBACKS.")
    return []


def main(script_args, training_args, model_args):
    set_seed(training_args.seed)
    last_checkpoint = None
    if os.path.isdir(training_args.output_dir):
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
    if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
        logger.info(f"Checkpoint detected, resuming training at {last_checkpoint=}.")

    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)

    registry = {
        "accuracy": accuracy_reward,
        "format": format_reward,
        "reasoning_steps": reasoning_steps_reward,
        "cosine": get_cosine_scaled_reward(
            min_value_wrong=script_args.cosine_min_value_wrong,
            max_value_wrong=script_args.cosine_max_value_wrong,
            min_value_correct=script_args.cosine_min_value_correct,
            max_value_correct=script_args.cosine_max_value_correct,
            max_len=script_args.cosine_max_len,
        ),
    }
    reward_funcs = [registry[name] for name in script_args.reward_funcs]

    def make_conversation(example):
        return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": example["problem"]}]}

    dataset = dataset.map(make_conversation)
    for split in dataset:
        if "answer" in dataset[split].column_names:
            dataset[split] = dataset[split].remove_columns("answer")

    torch_dtype = (
        model_args.torch_dtype if model_args.torch_dtype in ["auto", None] else getattr(torch, model_args.torch_dtype)
    )
    training_args.model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=model_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        torch_dtype=torch_dtype,
        use_cache=False if training_args.gradient_checkpointing else True,
    )

    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
        peft_config=get_peft_config(model_args),
        callbacks=get_callbacks(training_args, model_args),
    )

    checkpoint = training_args.resume_from_checkpoint or last_checkpoint
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
