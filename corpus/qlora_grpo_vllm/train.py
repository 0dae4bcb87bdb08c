"""A QLoRA GRPO launch script (4-bit base through TRL's ModelConfig, LoRA from get_peft_config), reproduced for the corpus.

Source: yoenoo/unsloth_vllm_profiling @ e71da9f8036b4d7818baa28a109b63e18ecdbe79, train.py (unchanged since 96af4c4
"working for qwq-32b"), launched by run_grpo_qwq.sh (`accelerate launch train.py --model_name_or_path
Qwen/Qwen3-30B-A3B-Instruct-2507 ... --use_peft --load_in_4bit ... --lora_target_modules "q_proj", "k_proj" --use_vllm
...`) in an environment of `uv pip install bitsandbytes accelerate vllm trl peft` (unpinned, August 2025; the
script's own notes ask for trl>=0.20, peft>=0.17, transformers>=4.55).
Kept: TrlParser over (ScriptArguments, GRPOConfig, ModelConfig); the dtype from `model_args.torch_dtype`; the
BitsAndBytesConfig from get_quantization_config(model_args) and get_kbit_device_map() when quantized; sdpa unless
ModelConfig names an attention; the loading keywords set into training_args.model_init_kwargs (revision,
attn_implementation, torch_dtype, device_map, quantization_config, use_cache=False); the model handed over as its
name; get_peft_config(model_args); the placeholder reward (the number of distinct characters of each completion).
Changed for the corpus: trl-lib/tldr -> ../data/tldr_like.jsonl (512 rows of its prompt/completion columns); the
prints of the parsed arguments and of every reward list are left out; the unused Mxfp4Config import is dropped.
"""

import torch
from datasets import load_dataset
from trl import (GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments, TrlParser, get_kbit_device_map,
                 get_peft_config, get_quantization_config)

dataset = load_dataset("json", data_files="../data/tldr_like.jsonl", split="train")  # the original: trl-lib/tldr


def reward_num_unique_chars(completions, **kwargs):
    return [len(set(c)) for c in completions]


parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig))
script_args, training_args, model_args = parser.parse_args_and_config()

torch_dtype = (model_args.torch_dtype if model_args.torch_dtype in ["auto", None]
               else getattr(torch, model_args.torch_dtype))
quantization_config = get_quantization_config(model_args)
attn_impl = getattr(model_args, "attn_implementation", None) or "sdpa"

training_args.model_init_kwargs = dict(
    revision=model_args.model_revision,
    attn_implementation=attn_impl,
    torch_dtype=torch_dtype,
    device_map=get_kbit_device_map() if quantization_config is not None else None,
    quantization_config=quantization_config,
    use_cache=False,
)

trainer = GRPOTrainer(
    model=model_args.model_name_or_path,
    args=training_args,
    reward_funcs=reward_num_unique_chars,
    train_dataset=dataset,
    peft_config=get_peft_config(model_args),
)
trainer.train()
