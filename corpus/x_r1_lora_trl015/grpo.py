# Reproduction (not a copy) of X-R1's training script (dhcode-cpp/X-R1 @ 208e0bf534c9, src/x_r1/grpo.py), run as its
# README runs it (`accelerate launch --config_file recipes/zero1.yaml --num_processes=1 src/x_r1/grpo.py --config
# recipes/X_R1_zero_0dot5B_peft_config.yaml`, "single GPU with LoRA"): TrlParser over its script arguments, its
# GRPOConfig subclass and TRL's ModelConfig; the dataset's problems become a system + user conversation; the
# ModelConfig's torch_dtype is turned into a torch.dtype and handed to the trainer in model_init_kwargs (gradient
# checkpointing switched off first); XGRPOTrainer gets the model's name, the rewards chosen by name and
# get_peft_config's LoRA. X-R1 also imports wandb and sets its entity/project variables when report_to names it, and
# builds benchmark callbacks by name: neither is used by this recipe's run, so both are left out.
import logging
import os
import sys
from dataclasses import dataclass, field

import torch
from datasets import load_dataset
from transformers import set_seed
from transformers.trainer_utils import get_last_checkpoint
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from configs import GRPOConfig
from rewards import accuracy_reward, format_reward
from x_grpo_trainer import XGRPOTrainer

logger = logging.getLogger(__name__)


@dataclass
class GRPOScriptArguments(ScriptArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format"],
                                    metadata={"help": "List of reward functions: 'accuracy', 'format'"})


SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think><answer> answer here </answer>"
)


def main(script_args, training_args, model_args):
    set_seed(training_args.seed)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                        handlers=[logging.StreamHandler(sys.stdout)])
    logger.setLevel(training_args.get_process_log_level())

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir):
        last_checkpoint = get_last_checkpoint(training_args.output_dir)

    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)
    reward_registry = {"accuracy": accuracy_reward, "format": format_reward}
    reward_funcs = [reward_registry[name] for name in script_args.reward_funcs]

    def make_conversation(example):
        return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": example["problem"]}]}

    dataset = dataset.map(make_conversation)
    for split in dataset:
        if "messages" in dataset[split].column_names:
            dataset[split] = dataset[split].remove_columns("messages")

    torch_dtype = (model_args.torch_dtype if model_args.torch_dtype in ["auto", None]
                   else getattr(torch, model_args.torch_dtype))
    training_args.gradient_checkpointing = False
    training_args.model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=model_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        torch_dtype=torch_dtype,
        use_cache=False if training_args.gradient_checkpointing else True,
    )

    trainer = XGRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
        peft_config=get_peft_config(model_args),
        callbacks=[],
    )
    print(trainer)

    checkpoint = training_args.resume_from_checkpoint or last_checkpoint
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.log_metrics("train", train_result.metrics)
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        trainer.create_model_card(dataset_name=script_args.dataset_name, tags=["X-R1"])
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(training_args.output_dir)


if __name__ == "__main__":
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
