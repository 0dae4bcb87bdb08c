"""The miniature twin's step runs on one torch thread and the real model's sample on the worker's own count
(trl_doctor/facts/trainer_run/execute.py: twin_threads)."""

from __future__ import annotations

import types

import pytest

pytestmark = pytest.mark.trl_pair  # the installed trainer calls the reward functions


def _project(tmp_path, fixtures):
    """ok_sample_stops.yaml's project with a reward function that writes down the torch threads it is called on."""
    seen = tmp_path / "threads.txt"
    (tmp_path / "thread_probe.py").write_text(
        "import torch\n\n\n"
        "def threads_reward(prompts, completions, **kwargs):\n"
        f"    with open({str(seen)!r}, 'a') as out:\n"
        "        out.write(f'{torch.get_num_threads()}\\n')\n"
        "    return [float(len(c if isinstance(c, str) else c[-1]['content'])) for c in completions]\n")
    config = tmp_path / "grpo.yaml"
    config.write_text(f"model_name_or_path: {fixtures / 'models' / 'qwen2-stops'}\n"
                      f"dataset_path: {fixtures / 'data' / 'chat.jsonl'}\n"
                      "reward_funcs: [thread_probe.threads_reward]\n"
                      "num_generations: 4\nper_device_train_batch_size: 4\nmax_completion_length: 24\n"
                      "learning_rate: 1.0e-6\n")
    return config, seen


@pytest.mark.slow
def test_the_twin_steps_on_one_thread_and_the_real_model_samples_on_all(tmp_path, built_fixtures):
    import torch

    from trl_doctor import Context, Options
    from trl_doctor.context.config import load_config
    from trl_doctor.facts.trainer_run.plan import trainer_run

    config, seen = _project(tmp_path, built_fixtures)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # the worker's count, whatever this machine's: more than the twin's one
    try:
        with Context(load_config(config), Options(device="cpu", sample=2)) as ctx:
            run = trainer_run(ctx)
            assert run.outcome == "ok", run
            assert run.result["train"] is not None and run.result["sample"] is not None
            assert torch.get_num_threads() == 3  # restored after the step
    finally:
        torch.set_num_threads(threads)
    calls = [int(line) for line in seen.read_text().split()]
    # the step's reward call (on the twin), then the sample's (on the real model's completions)
    assert len(calls) >= 2 and set(calls[:-1]) == {1} and calls[-1] == 3, calls


@pytest.mark.parametrize("spec", [types.SimpleNamespace(device="cuda", twin_aux=True),
                                  types.SimpleNamespace(device="cpu", twin_aux=False)],
                         ids=["twin on a GPU", "real model on the CPU"])
def test_only_the_twin_on_the_cpu_gets_one_thread(spec):
    import torch

    from trl_doctor.facts.trainer_run.execute import twin_threads

    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with twin_threads(spec):
            assert torch.get_num_threads() == 3
        with twin_threads(types.SimpleNamespace(device="cpu", twin_aux=True)):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)
