"""PolicyReact: GRPO for a search-using agent (a ReSearch reproduction on MuSiQue), reproduced for the corpus.

Source: aspisov/policy-react @ 25de4517990b8b5531dec180a882ac9c73b85e48, src/main.py (with src/model.py,
src/dataset.py, src/rewards.py), run from src/ as `python main.py` (its wandb run files record program main.py,
root .../policyreact/src), pinned to trl 0.17.0, transformers 4.51.3, peft 0.15.2 (pyproject.toml).
Kept: every GRPOConfig setting (per_device_train_batch_size 1 x 20 accumulation steps, 5 generations, prompt 512 /
completion 1024 tokens, beta 0.001, remove_unused_columns False, bf16/fp16 only when CUDA has them), LoRA r=16 on the
seven Qwen projections, the model loaded by model.py (bf16, flash_attention_2 with an ImportError fallback, no
device map), the first 1000 MuSiQue rows mapped to a system + user conversation and `answer`, the ReSearch reward
(F1 of the last \\boxed{} against the answer, 0.1 for the right tag format) and the save at the end.
Changed for the corpus: Qwen/Qwen3-0.6B -> ../models/qwen2.5-instruct and dgslibisey/MuSiQue -> ../data/musique_like.jsonl
(dataset.py); the commented-out BitsAndBytesConfig block is left out (bnb_config is None in the original).
"""

import torch
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer

from dataset import load_and_preprocess_musique
from model import load_model_and_tokenizer
from rewards import research_reward_func


def main():
    model_name = "../models/qwen2.5-instruct"  # the original: "Qwen/Qwen3-0.6B"
    attn_implementation = "flash_attention_2"

    peft_config = LoraConfig(
        r=16,
        lora_alpha=32,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"],
        task_type="CAUSAL_LM",
        lora_dropout=0.05,
    )

    cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    grpo_config = GRPOConfig(
        output_dir=f"outputs/{model_name.split('/')[-1]}-GRPO-MuSiQue",
        run_name=f"{model_name.split('/')[-1]}-GRPO-MuSiQue-run",
        learning_rate=1e-6,
        logging_steps=10,
        bf16=cuda_bf16,
        fp16=torch.cuda.is_available() and not cuda_bf16,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=20,  # "so effective batch size (1*20=20) is divisible by num_generations (5)"
        num_generations=5,
        max_prompt_length=512,
        max_completion_length=1024,
        num_train_epochs=2,
        save_steps=200,
        report_to="wandb",
        log_on_each_node=False,
        remove_unused_columns=False,  # "We need the 'answer' column for the reward function"
        beta=0.001,
    )

    model, tokenizer = load_model_and_tokenizer(model_name=model_name, attn_implementation=attn_implementation)
    train_dataset = load_and_preprocess_musique("train").select(range(1000))

    trainer = GRPOTrainer(
        model=model,
        args=grpo_config,
        train_dataset=train_dataset,
        reward_funcs=[research_reward_func],
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(grpo_config.output_dir)
    tokenizer.save_pretrained(grpo_config.output_dir)


if __name__ == "__main__":
    main()
