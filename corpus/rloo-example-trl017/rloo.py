"""TRL's RLOO example of the PPO-style RLOOTrainer era (trl 0.11-0.18), reproduced for the corpus.

After huggingface/trl examples/scripts/rloo/rloo.py (read at commit 0fa5da8ae58436e61a01e670e2696f62d51325cc; the
v0.15.2 and v0.17.0 tags have the same parsing, loading, tokenization and trainer call). What matters is kept:
HfArgumentParser over (ScriptArguments, RLOOConfig, ModelConfig), a left-padded tokenizer given a `[PAD]` pad token,
policy and ref_policy from sft_model_path, a 1-label reward classifier from reward_model_path, the `prompt` column
tokenized into `input_ids` by `prepare_dataset`, and the keyword call of RLOOTrainer. The hub dataset is replaced
by a local JSON-lines file (`--dataset_name` names it), so the last rows serve as the eval split.
"""

import shutil

from accelerate import PartialState
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser

from trl import ModelConfig, RLOOConfig, RLOOTrainer, ScriptArguments
from trl.trainer.utils import SIMPLE_CHAT_TEMPLATE

if __name__ == "__main__":
    parser = HfArgumentParser((ScriptArguments, RLOOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_into_dataclasses()
    shutil.rmtree(training_args.output_dir, ignore_errors=True)

    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, padding_side="left",
                                              trust_remote_code=model_args.trust_remote_code)
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    if tokenizer.chat_template is None:
        tokenizer.chat_template = SIMPLE_CHAT_TEMPLATE
    reward_model = AutoModelForSequenceClassification.from_pretrained(
        training_args.reward_model_path, trust_remote_code=model_args.trust_remote_code, num_labels=1)
    ref_policy = AutoModelForCausalLM.from_pretrained(training_args.sft_model_path,
                                                      trust_remote_code=model_args.trust_remote_code)
    policy = AutoModelForCausalLM.from_pretrained(training_args.sft_model_path,
                                                  trust_remote_code=model_args.trust_remote_code)

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

    trainer = RLOOTrainer(
        config=training_args,
        processing_class=tokenizer,
        policy=policy,
        ref_policy=ref_policy,
        reward_model=reward_model,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
