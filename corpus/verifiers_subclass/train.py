# Reproduction (not a copy) of the trainer-subclass pattern of willccbb/verifiers @ 3be6e1a0 (verifiers/trainers/
# grpo_env_trainer.py, verifiers/examples/gsm8k_calculator.py): a GRPOTrainer subclass that takes an environment of
# its own and overrides `_generate_and_score_completions` to post-process what the parent built (here: masking the
# tool-output spans an environment marks); GSM8K-shaped prompts with a system prompt, rewards that read `answer`.
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer


class ToolEnv:
    """Stands for the environment: it says which completion tokens came from a tool (none, in this sketch)."""

    def tool_mask(self, completion_ids):
        return completion_ids.new_ones(completion_ids.shape)


class GRPOEnvTrainer(GRPOTrainer):
    def __init__(self, env, **kwargs):
        self.env = env
        super().__init__(**kwargs)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        out["completion_mask"] = out["completion_mask"] * self.env.tool_mask(out["completion_ids"])
        return out


SYSTEM = "Think step by step inside <reasoning> tags, then give the final number inside <answer> tags."


def correctness(completions, answer, **kwargs):
    got = [c[0]["content"].split("<answer>")[-1].split("</answer>")[0].strip() for c in completions]
    return [1.0 if g == a.split("####")[-1].strip() else 0.0 for g, a in zip(got, answer)]


def format_ok(completions, **kwargs):
    return [0.5 if "<answer>" in c[0]["content"] else 0.0 for c in completions]


dataset = load_dataset("json", data_files="../data/gsm8k_like.jsonl", split="train")
dataset = dataset.map(lambda x: {"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": x["question"]}]})
model = AutoModelForCausalLM.from_pretrained("../models/qwen2.5-instruct", torch_dtype="bfloat16",
                                             attn_implementation="flash_attention_2", use_cache=False)
tokenizer = AutoTokenizer.from_pretrained("../models/qwen2.5-instruct")
args = GRPOConfig(output_dir="outputs/gsm8k-calculator", learning_rate=1e-6, beta=0.0, num_iterations=2,
                  num_generations=8, per_device_train_batch_size=8, gradient_accumulation_steps=4,
                  max_completion_length=512, bf16=True, gradient_checkpointing=True, logging_steps=1, report_to="none")
trainer = GRPOEnvTrainer(env=ToolEnv(), model=model, processing_class=tokenizer, reward_funcs=[format_ok, correctness],
                         args=args, train_dataset=dataset)
trainer.train()
