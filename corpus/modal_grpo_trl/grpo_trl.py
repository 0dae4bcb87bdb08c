"""Modal's "Train a model to solve coding problems using GRPO and TRL" example, reproduced for the corpus (not copied).

Source: modal-labs/modal-examples @ 17eca697af222e80a27ba55222a61ccae5795759,
06_gpu_and_ml/reinforcement-learning/grpo_trl.py, run as its header says (`modal run grpo_trl.py::train`: the
`train` function calls start_grpo_trainer() in an image with trl[vllm]==0.19.1 and datasets==3.5.1 on one H100).

Kept: the dataset shaping (OpenCoder-LLM/opc-sft-stage2 "educational_instruct": `instruction` renamed to `prompt`,
plain strings, `testcase` renamed to `testcases`, the first 128 rows), the reward function that builds a program
from the completion's ```python block plus the row's assert lines and returns 1 when it runs clean else 0, handed to
TRL as Modal's `compute_reward.starmap(zip(completions, testcases))` returns it (a lazy iterator of ints, not a
list), the GRPOConfig (report_to wandb, use_vllm False, vllm_mode None, max_steps 5, save_steps 1, every other
field TRL's default) and the trainer given the model as a hub id. Changed for the corpus: the model id
(Qwen/Qwen2-0.5B-Instruct) is the local Qwen2.5-Instruct stand-in and the dataset a local jsonl with the
subset's columns; Modal's app, image, volume and secret are left out and output_dir is a local folder for the
volume's /models; the Modal Sandbox that runs `python -c PROGRAM` is replaced by a compile() of PROGRAM (the
reward's shape, one int per completion through a lazy iterator, is unchanged; model output is not executed here).
The vLLM server / colocate variants and the inference server are not reproduced.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable, Sequence

from datasets import Dataset, load_dataset
from trl import GRPOConfig, GRPOTrainer

MODELS_DIR = Path("outputs/models")  # the Modal volume mounted at /models


def compute_reward(completion: str, testcase: Sequence[str]) -> int:
    """Modal's sandboxed run of the program, as a compile check: 1 when it would start, else 0."""
    score = 0
    program = get_generated_code_and_test_cases(completion, testcase)
    try:
        compile(program, "<completion>", "exec")
        score = 1
    except Exception as e:
        print(e)
    return score


def get_generated_code_and_test_cases(completion: str, testcase: Sequence[str]) -> str:
    if "```python" in completion:
        start = completion.find("```python") + len("```python")
        end = completion.find("```", start)
        code = completion[start:end].strip() if end != -1 else completion[start:].strip()
    else:
        code = completion.strip()
    return f"{code}\n\n" + "\n".join(testcase)


def reward_helper_function(completions: Sequence[str], testcases: Sequence[Sequence[str]], **kwargs: object
                           ) -> Iterable[int]:
    return itertools.starmap(compute_reward, zip(completions, testcases))  # Modal: compute_reward.starmap(...)


def start_grpo_trainer(use_vllm=False, vllm_mode=None):
    dataset: Dataset = load_dataset("json", data_files="../data/opc_educational_instruct.jsonl", split="train")
    dataset = dataset.rename_column("instruction", "prompt")  # needed for the GRPO trainer
    dataset = dataset.rename_column("testcase", "testcases")
    dataset = dataset.select(range(128))  # To simplify testing. Remove for production use cases.
    training_args = GRPOConfig(
        output_dir=str(MODELS_DIR),
        report_to="wandb",
        use_vllm=use_vllm,
        vllm_mode=vllm_mode,
        max_steps=5,
        save_steps=1,  # To simplify testing. Remove for production use cases.
    )
    trainer = GRPOTrainer(
        model="../models/qwen2.5-instruct",  # Qwen/Qwen2-0.5B-Instruct
        reward_funcs=reward_helper_function,
        args=training_args,
        train_dataset=dataset,
    )
    trainer.train()


if __name__ == "__main__":  # Modal's `train` function, on one H100
    start_grpo_trainer()
