"""What will run (issue 60, item 4): the job as the installed TRL will run it, at the head of the report.

In-process on the fixtures (trl_doctor.facts.launch.will_run over a Context), with TRL's own trainer as the ground
truth for the optimizer steps: the GRPOTrainer built on the same data counts its steps as transformers does
(`len(get_train_dataloader()) // gradient_accumulation_steps` an epoch). The command's table and JSON once, end to
end; the streamed table is tests/test_streaming.py's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import FIXTURES, real_trl, result_of, run_json

pytestmark = pytest.mark.trl_pair  # what the lines say is the installed TRL's config class and source


def _will_run(config: Path):
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl_doctor.facts.launch.will_run import what_will_run

    with Context(load_config(config), Options(smoke=False)) as ctx:
        return what_will_run(ctx)


def _recipe(tmp_path: Path, extra: str, name: str = "grpo.yaml") -> Path:
    base = (FIXTURES / "run-phases" / "ok_grpo.yaml").read_text()
    base = base.replace("../models/", f"{FIXTURES / 'models'}/").replace("../data/", f"{FIXTURES / 'data'}/")
    base = base.replace("rewards.length_reward", "trl.rewards.think_format_reward")
    path = tmp_path / name
    path.write_text(base + extra)
    return path


def _trls_own_steps(config: Path) -> int:
    """The optimizer steps TRL's GRPOTrainer, built on the config's model and data, will take: transformers'
    max_steps arithmetic over the trainer's own dataloader."""
    import yaml
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    raw = yaml.safe_load(config.read_text())
    keys = {k: raw[k] for k in ("num_generations", "per_device_train_batch_size", "max_completion_length",
                                "gradient_accumulation_steps", "num_iterations", "steps_per_generation",
                                "num_train_epochs", "max_steps") if k in raw}
    args = GRPOConfig(output_dir=str(config.parent / "out"), use_cpu=True, bf16=False, report_to=[], **keys)
    data = load_dataset("json", data_files=raw["dataset_path"], split="train")
    trainer = GRPOTrainer(model=raw["model_name_or_path"], reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=data)
    if args.max_steps > 0:
        return args.max_steps
    per_epoch = len(trainer.get_train_dataloader()) // args.gradient_accumulation_steps
    return math.ceil(args.num_train_epochs * per_epoch)


@pytest.mark.parametrize("extra", ["", "gradient_accumulation_steps: 2\n", "num_iterations: 2\n",
                                   "per_device_train_batch_size: 2\nsteps_per_generation: 4\n",
                                   "num_train_epochs: 1.5\n", "max_steps: 7\n"],
                         ids=["defaults", "accumulation", "iterations", "steps-per-generation", "fractional-epochs",
                              "max-steps"])
def test_the_optimizer_steps_are_the_ones_trls_own_trainer_counts(tmp_path, extra):
    import dataclasses

    from trl import GRPOConfig, __version__

    missing = {line.split(":")[0] for line in extra.splitlines()} - {f.name for f in dataclasses.fields(GRPOConfig)}
    if missing:
        pytest.skip(f"trl {__version__}'s GRPOConfig has no {', '.join(sorted(missing))}")
    config = _recipe(tmp_path, extra)
    plan = _will_run(config)
    steps = plan.lines["steps"]
    theirs = _trls_own_steps(config)
    said = f"{theirs} optimizer steps (max_steps)" if "max_steps" in extra else f"about {theirs} optimizer steps ("
    assert said in steps, (steps, theirs)


def test_a_healthy_grpo_job_at_trls_defaults_is_stated_line_by_line(tmp_path):
    """The run-phases fixture at TRL's defaults: no evaluation, a checkpoint every 500 steps in a job of 48 steps
    (3 epochs x 16 rows x 4 generations / 4 a step): the only checkpoint is what the script saves itself. Whether a
    reference model loads is what the installed GRPOTrainer, built at beta 0, does."""
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer, __version__

    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, num_generations=4,
                      per_device_train_batch_size=4, max_completion_length=8, report_to=[], beta=0.0)
    built = GRPOTrainer(model=str(FIXTURES / "models" / "qwen2-chat"), args=args,
                        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                        train_dataset=load_dataset("json", data_files=str(FIXTURES / "data" / "chat.jsonl"),
                                                   split="train"))
    at_zero = _will_run(_recipe(tmp_path, "beta: 0.0\n"))
    assert ("no reference model loads" in at_zero.lines["loss"]) == (built.ref_model is None), at_zero.lines["loss"]
    plan = _will_run(FIXTURES / "run-phases" / "ok_grpo.yaml")
    assert plan.title == f"trl {__version__}'s GRPOConfig, as it resolves this config"
    assert list(plan.lines) == ["processes", "generation", "loss", "steps", "checkpoints", "evaluation", "logging"]
    assert plan.lines["processes"].startswith("1 process (")
    assert plan.lines["generation"].startswith("transformers' generate inside the trainer (use_vllm off): "
                                               "4 completions a prompt, each at most 64 tokens")
    assert f"beta {GRPOConfig.beta:g}" in plan.lines["loss"]  # the installed release's default
    assert plan.lines["checkpoints"].startswith("every 500 steps: none within the job's 48 steps")
    assert plan.lines["checkpoints"].endswith(", in out/run-phases")
    assert plan.lines["evaluation"] == "none (eval_strategy 'no')"
    assert plan.lines["logging"].startswith(f"every {GRPOConfig.logging_steps} steps to ")


def test_a_kl_term_says_the_reference_it_loads(tmp_path):
    full = _will_run(_recipe(tmp_path, "beta: 0.04\n"))
    lora = _will_run(_recipe(tmp_path, "beta: 0.04\nuse_peft: true\n", "lora.yaml"))
    assert "beta 0.04: a KL term; a reference model loads (a copy of the policy)" in full.lines["loss"]
    assert "beta 0.04: a KL term; the reference is the base model under the adapter (no copy)" in lora.lines["loss"]


def test_vllm_colocated_and_served_are_told_apart_with_the_launch_machines_processes():
    from trl_doctor.context.config import load_config
    from trl_doctor.context.context import Context, Options
    from trl import GRPOConfig

    from trl_doctor.context.target import target_gpus
    from trl_doctor.facts.launch.will_run import what_will_run

    def plan(name: str):
        options = Options(smoke=False, target="8xH100-80GB", target_gpus=target_gpus("8xH100-80GB"))
        with Context(load_config(FIXTURES / "gpu-capacity" / name), options) as ctx:
            return what_will_run(ctx)

    colocate, server = plan("bad_vllm_colocate_share.yaml"), plan("bad_vllm_server_one_gpu.yaml")
    assert colocate.lines["generation"].startswith("vLLM colocated in each training process: "
                                                   "vllm_gpu_memory_utilization 0.9 of its GPU: 8 completions")
    assert server.lines["generation"].startswith("a vLLM server (")
    for p in (colocate, server):
        assert p.lines["processes"].startswith("8 processes (--target 8xH100-80GB")
        assert "GPUs the launch machine's (--target): 8 x " in p.lines["processes"]
        assert "64 completions an optimizer step (8 per device x 8 processes x 1 accumulated)" in p.lines["steps"]
        corrected = "vLLM's sampling corrected by importance weights" in p.lines["loss"]
        assert corrected == bool(getattr(GRPOConfig, "vllm_importance_sampling_correction", False))
        assert "/tmp" not in p.lines["checkpoints"]  # no output_dir written: not the check's own folder either


def test_checkpoints_evaluation_and_trackers_as_the_job_keeps_them(tmp_path):
    plan = _will_run(_recipe(tmp_path, "save_steps: 10\nsave_total_limit: 2\nsave_only_model: true\n"
                                       "eval_strategy: steps\neval_steps: 5\nload_best_model_at_end: true\n"
                                       "metric_for_best_model: eval_reward\nreport_to: [wandb, trackio]\n"
                                       "logging_steps: 1\n"))
    assert plan.lines["checkpoints"].startswith("every 10 steps: 4 in 48 steps, the last 2 kept, model only "
                                                "(no optimizer state: not resumable)")
    assert plan.lines["evaluation"] == "every 5 steps; the best checkpoint by eval_reward is loaded at the end"
    assert plan.lines["logging"] == "every step to wandb, trackio"


def test_a_value_trl_refuses_leaves_its_lines_out_and_the_rest_stands(tmp_path):
    """A batch size TRL's parser refuses is trainer-config's finding: what depends on it is not guessed."""
    plan = _will_run(_recipe(tmp_path, "gradient_accumulation_steps: [2]\n"))
    assert "steps" not in plan.lines and "checkpoints" in plan.lines and "loss" in plan.lines, plan.lines


def test_the_report_states_it_at_its_head_in_the_table_and_the_json(built_fixtures):
    code, report = run_json("check", str(FIXTURES / "run-phases" / "ok_grpo.yaml"), "--no-smoke",
                            "--select", "pad-token")
    assert code == 0 and result_of(report, "pad-token")["status"] == "pass"
    assert report["will_run"]["title"].endswith("'s GRPOConfig, as it resolves this config")
    assert report["will_run"]["lines"]["evaluation"] == "none (eval_strategy 'no')"
    from trl_doctor.report.formats import _table

    lines = _table.will_run_lines(report["will_run"], width=60)
    assert lines[0].startswith("what will run (trl ") and all(len(line) <= 60 for line in lines), lines
    assert any(line.startswith("  processes    1 process") for line in lines), lines


@pytest.mark.other_trl
def test_ppo_on_its_last_release_counts_rollouts_not_generations(built_fixtures):
    """trl 1.12.0's PPOTrainer: a rollout of per_device x accumulation x mini-batches, num_ppo_epochs passes over
    it, total_episodes = epochs x rows (the trainer's own num_total_batches)."""
    code, report = run_json("check", str(FIXTURES / "value-model" / "ok_reward_as_value.yaml"), "--no-smoke",
                            "--select", "pad-token", env=real_trl("1.12.0"))
    lines = report["will_run"]["lines"]
    assert report["will_run"]["title"] == "trl 1.12.0's PPOConfig, as it resolves this config"
    assert lines["generation"] == "the policy's own generate, at most 16 tokens a response"
    assert lines["steps"].startswith("2 completions a rollout (2 per device x 1 process x 1 accumulated x "
                                     "1 mini-batch), each trained on for 4 epochs of its mini-batches; 24 rollouts "
                                     "(48 episodes): 96 optimizer steps"), lines["steps"]
    assert lines["loss"].startswith("PPO's clipped policy and value losses: kl_coef 0.05")
