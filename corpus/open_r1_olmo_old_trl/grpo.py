# Reproduction (not a copy) of an open-r1 fork's GRPO entry point, as of Neelectric/open-r1_olmo @
# 4f488f4dd118e149ba6f10970a7d88a78ffaa11f: src/open_r1/grpo.py (TrlParser over the fork's script arguments, its
# GRPOConfig subclass and TRL's ModelConfig), src/open_r1/configs.py (the fields the subclasses add),
# src/open_r1/utils/model_utils.py (get_tokenizer, get_model: the policy is loaded here and handed to the trainer as
# an object), src/open_r1/utils/callbacks.py (the push_to_hub_revision callback), src/open_r1/utils/wandb_logging.py;
# the reward functions are open-r1's (rewards.py: the corpus's reproduction of them, which this fork kept).
# Its setup.py pins trl @ c04e84c4545a (0.17.0.dev0) with transformers 4.51.2.
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
import trl
from trl import GRPOTrainer, ModelConfig, TrlParser, get_kbit_device_map, get_peft_config, get_quantization_config

from rewards import REWARDS

logger = logging.getLogger(__name__)


@dataclass
class GRPOConfig(trl.GRPOConfig):
    benchmarks: list[str] = field(default_factory=lambda: [], metadata={"help": "benchmarks to run after training"})
    callbacks: list[str] = field(default_factory=lambda: [], metadata={"help": "callbacks to run during training"})
    chat_template: Optional[str] = field(default=None, metadata={"help": "the chat template to use"})
    system_prompt: Optional[str] = field(default=None, metadata={"help": "the optional system prompt"})
    hub_model_revision: Optional[str] = field(default="main", metadata={"help": "the Hub model branch to push to"})
    overwrite_hub_revision: bool = field(default=False, metadata={"help": "whether to overwrite the Hub revision"})
    push_to_hub_revision: bool = field(default=False, metadata={"help": "whether to push to a Hub revision"})
    wandb_entity: Optional[str] = field(default=None, metadata={"help": "the entity to store runs under"})
    wandb_project: Optional[str] = field(default=None, metadata={"help": "the project to store runs under"})
    wandb_run_group: Optional[str] = field(default=None, metadata={"help": "the group to store runs under"})


@dataclass
class GRPOScriptArguments(trl.ScriptArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format", "tag_count"],
                                    metadata={"help": "reward functions, by name"})
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "column holding the question"})
    e2b_router_url: Optional[str] = field(default=None, metadata={"help": "URL of the E2B router"})


class PushToHubRevisionCallback(TrainerCallback):
    """Pushes each saved checkpoint to a Hub branch, then queues the benchmarks (on_save: not reached in one step)."""

    def __init__(self, model_config):
        self.model_config = model_config


def get_tokenizer(model_args, training_args):
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                              trust_remote_code=model_args.trust_remote_code)
    # the fork replaces the chat template when the model is "allenai/OLMo-2-1124-7B": not the stand-in's path
    if training_args.chat_template is not None:
        tokenizer.chat_template = training_args.chat_template
    return tokenizer


def get_model(model_args, training_args):
    torch_dtype = (model_args.torch_dtype if model_args.torch_dtype in ["auto", None]
                   else getattr(torch, model_args.torch_dtype))
    quantization_config = get_quantization_config(model_args)
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path, revision=model_args.model_revision,
        trust_remote_code=model_args.trust_remote_code, attn_implementation=model_args.attn_implementation,
        torch_dtype=torch_dtype, use_cache=False if training_args.gradient_checkpointing else True,
        device_map=get_kbit_device_map() if quantization_config is not None else None,
        quantization_config=quantization_config)


def main(script_args, training_args, model_args):
    set_seed(training_args.seed)
    if "wandb" in training_args.report_to:  # init_wandb_training: the run's entity and project, by environment
        if training_args.wandb_entity is not None:
            os.environ["WANDB_ENTITY"] = training_args.wandb_entity
        if training_args.wandb_project is not None:
            os.environ["WANDB_PROJECT"] = training_args.wandb_project

    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)
    tokenizer = get_tokenizer(model_args, training_args)
    model = get_model(model_args, training_args)
    reward_funcs = [REWARDS[name] for name in script_args.reward_funcs]

    def make_conversation(example, prompt_column: str = script_args.dataset_prompt_column):
        prompt = []
        if training_args.system_prompt is not None:
            prompt.append({"role": "system", "content": training_args.system_prompt})
        if prompt_column not in example:
            raise ValueError(f"Dataset Question Field Error: {prompt_column} is not supported.")
        prompt.append({"role": "user", "content": example[prompt_column]})
        return {"prompt": prompt}

    dataset = dataset.map(make_conversation)
    for split in dataset:
        if "messages" in dataset[split].column_names:
            dataset[split] = dataset[split].remove_columns("messages")

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
        peft_config=get_peft_config(model_args),
        callbacks=[PushToHubRevisionCallback(model_args) for name in training_args.callbacks
                   if name == "push_to_hub_revision"],
        processing_class=tokenizer,
    )
    trainer.train()


if __name__ == "__main__":
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
