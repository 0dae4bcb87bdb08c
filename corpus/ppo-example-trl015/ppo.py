"""TRL's PPO example of the trl 0.12-0.2x era, reproduced for the corpus.

After huggingface/trl examples/scripts/ppo/ppo.py (read at commit 07e1b4fe3820e36e823ebc930e6a0989b19fb402; the
v0.15.2 tag has the same parsing, loading, tokenization and trainer call, without the later trackio lines). What
matters is kept: HfArgumentParser over (ScriptArguments, PPOConfig, ModelConfig), the dtype/quantization keywords
from ModelConfig, a left-padded tokenizer given a `[PAD]` pad token, value and reward models both 1-label classifiers
from reward_model_path, policy (and ref_policy unless PEFT) from sft_model_path, the `prompt` column tokenized into
`input_ids` by `prepare_dataset`, and the keyword call of PPOTrainer. The hub dataset is replaced by a local
JSON-lines file (`--dataset_name` names it), so the last rows serve as the eval split.
"""

import shutil

import torch
from accelerate import PartialState
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser

from trl import (
    ModelConfig,
    PPOConfig,
    PPOTrainer,
    ScriptArguments,
    get_kbit_device_map,
    get_peft_config,
    get_quantization_config,
)
from trl.trainer.utils import SIMPLE_CHAT_TEMPLATE

if __name__ == "__main__":
    parser = HfArgumentParser((ScriptArguments, PPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_into_dataclasses()
    shutil.rmtree(training_args.output_dir, ignore_errors=True)

    torch_dtype = (model_args.torch_dtype if model_args.torch_dtype in ["auto", None]
                   else getattr(torch, model_args.torch_dtype))
    quantization_config = get_quantization_config(model_args)
    model_kwargs = dict(
        revision=model_args.model_revision,
        attn_implementation=model_args.attn_implementation,
        torch_dtype=torch_dtype,
        device_map=get_kbit_device_map() if quantization_config is not None else None,
        quantization_config=quantization_config,
    )

    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, padding_side="left",
                                              trust_remote_code=model_args.trust_remote_code)
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    if tokenizer.chat_template is None:
        tokenizer.chat_template = SIMPLE_CHAT_TEMPLATE
    value_model = AutoModelForSequenceClassification.from_pretrained(
        training_args.reward_model_path, trust_remote_code=model_args.trust_remote_code, num_labels=1)
    reward_model = AutoModelForSequenceClassification.from_pretrained(
        training_args.reward_model_path, trust_remote_code=model_args.trust_remote_code, num_labels=1)
    policy = AutoModelForCausalLM.from_pretrained(training_args.sft_model_path,
                                                  trust_remote_code=model_args.trust_remote_code)

    peft_config = get_peft_config(model_args)
    if peft_config is None:
        ref_policy = AutoModelForCausalLM.from_pretrained(training_args.sft_model_path,
                                                          trust_remote_code=model_args.trust_remote_code)
    else:
        ref_policy = None

    dataset = load_dataset("json", data_files=script_args.dataset_name, split=script_args.dataset_train_split)
    eval_samples = 4
    train_dataset = dataset.select(range(len(dataset) - eval_samples))
    eval_dataset = dataset.select(range(len(dataset) - eval_samples, len(dataset)))
    dataset_text_field = "prompt"

    def prepare_dataset(dataset, tokenizer):
        """pre-tokenize the dataset before training; only collate during training"""

        def tokenize(element):
            outputs = tokenizer(element[dataset_text_field], padding=False)
            return {"input_ids": outputs["input_ids"]}

        return dataset.map(tokenize, batched=True, remove_columns=dataset.column_names,
                           num_proc=training_args.dataset_num_proc)

    with PartialState().local_main_process_first():
        train_dataset = prepare_dataset(train_dataset, tokenizer)
        eval_dataset = prepare_dataset(eval_dataset, tokenizer)

    trainer = PPOTrainer(
        args=training_args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
