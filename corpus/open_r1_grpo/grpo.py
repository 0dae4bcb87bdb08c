# Reproduction (not a copy) of open-r1's GRPO entry point, as of huggingface/open-r1 @ 1416fa0cf21595d2083b399a2a0bbddd7f6e9563
# (src/open_r1/grpo.py, src/open_r1/configs.py, src/open_r1/rewards.py; the early form is @ a20666d5b57c): TRL's parser
# reads a recipe into script, training and model arguments; the training config is a GRPOConfig subclass that adds a
# system prompt; the prompt column is configurable; reward functions are picked by name from a registry; the model is
# given to the trainer as a path, with `model_init_kwargs` built from ModelConfig (dtype, attention, cache).
from dataclasses import dataclass, field
from typing import Optional

import torch
from datasets import load_dataset
from transformers import AutoTokenizer
import trl
from trl import ModelConfig, TrlParser, get_peft_config

from rewards import REWARDS


@dataclass
class GRPOScriptArguments(trl.ScriptArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format", "tag_count"],
                                    metadata={"help": "reward functions, by name"})
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "column holding the question"})


@dataclass
class GRPOConfig(trl.GRPOConfig):
    system_prompt: Optional[str] = field(default=None, metadata={"help": "system turn prepended to every prompt"})
    chat_template: Optional[str] = field(default=None, metadata={"help": "override the tokenizer's template"})


def main(script_args, training_args, model_args):
    # trl 1.x's ModelConfig has no trust_remote_code (open-r1 targets trl 0.18): the one change made to run it here
    trust_remote_code = getattr(model_args, "trust_remote_code", False)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                              trust_remote_code=trust_remote_code)
    if training_args.chat_template is not None:
        tokenizer.chat_template = training_args.chat_template
    dataset = load_dataset("json", data_files=script_args.dataset_name)

    def make_conversation(example, prompt_column: str = script_args.dataset_prompt_column):
        if prompt_column not in example:
            raise ValueError(f"Dataset Question Field Error: {prompt_column} is not supported.")
        prompt = []
        if training_args.system_prompt is not None:
            prompt.append({"role": "system", "content": training_args.system_prompt})
        prompt.append({"role": "user", "content": example[prompt_column]})
        return {"prompt": prompt}

    dataset = dataset.map(make_conversation)
    for split in dataset:
        if "messages" in dataset[split].column_names:
            dataset[split] = dataset[split].remove_columns("messages")

    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    training_args.model_init_kwargs = dict(
        revision=model_args.model_revision, trust_remote_code=trust_remote_code,
        attn_implementation=model_args.attn_implementation, dtype=dtype,
        use_cache=False if training_args.gradient_checkpointing else True)

    trainer = trl.GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=[REWARDS[name] for name in script_args.reward_funcs],
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()


if __name__ == "__main__":
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
