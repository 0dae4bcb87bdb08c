# Reproduction (not a copy) of the Hugging Face cookbook notebook "Post training an LLM for reasoning with GRPO in
# TRL" (huggingface/cookbook @ d243ebea0bbe, notebooks/en/fine_tuning_llm_grpo_trl.ipynb) as one script: a small
# instruct model loaded as an object (dtype and device map "auto"), LoRA applied by hand with get_peft_model on
# q_proj/v_proj, a system prompt that asks for <think>/<answer>, a format reward and a math_verify accuracy reward
# that reads the dataset's `solution` column from the keyword arguments.
import re

from datasets import load_dataset
from math_verify import LatexExtractionConfig, parse, verify
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

model_id = "../models/qwen2.5-instruct"
train_dataset = load_dataset("json", data_files="../data/math_problems.jsonl", split="train")

SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think><answer> answer here </answer>"
)


def make_conversation(example):
    return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": example["problem"]}]}


train_dataset = train_dataset.map(make_conversation)

model = AutoModelForCausalLM.from_pretrained(model_id, torch_dtype="auto", device_map="auto")
lora_config = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=32, lora_dropout=0.1, target_modules=["q_proj", "v_proj"])
model = get_peft_model(model, lora_config)
model.print_trainable_parameters()


def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think>\s*<answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    return [1.0 if re.match(pattern, content) else 0.0 for content in completion_contents]


def accuracy_reward(completions, **kwargs):
    solutions = kwargs["solution"]
    completion_contents = [completion[0]["content"] for completion in completions]
    rewards = []
    for content, solution in zip(completion_contents, solutions):
        gold_parsed = parse(solution, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        answer_parsed = parse(content, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        if len(gold_parsed) != 0:
            try:
                rewards.append(float(verify(answer_parsed, gold_parsed)))
            except Exception:
                rewards.append(0.0)
        else:
            rewards.append(1.0)
    return rewards


training_args = GRPOConfig(
    output_dir="Qwen2-0.5B-GRPO-test",
    learning_rate=1e-5,
    remove_unused_columns=False,  # to access the solution column in accuracy_reward
    gradient_accumulation_steps=16,
    num_train_epochs=1,
    bf16=True,
    max_completion_length=64,
    num_generations=4,
    report_to=["tensorboard"],
    logging_steps=10,
    push_to_hub=True,
    save_strategy="steps",
    save_steps=10,
)

tokenizer = AutoTokenizer.from_pretrained(model_id)
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[format_reward, accuracy_reward],
                      args=training_args, train_dataset=train_dataset)
trainer.train()
