"""The frameworks that build TRL's trainer for their users (issue 45): axolotl and oumi at their own commands, on
their documented GRPO examples (fixtures/frameworks/README.md cites each at its commit and lists what was changed
to run it on a CPU without the hub), against the framework's own one-step CPU run as ground truth.

These run only where the framework is installed: the CI's frameworks lane (.ci/run: one environment per framework,
at the release its PyPI metadata pins TRL to); elsewhere each test skips, saying so. The framework's own run (the
ground truth, 15-30 s a case) is the framework's behaviour, the same for the same inputs and releases: it is read
from tools/accuracy/truths.json where the case's key matches (tools/accuracy/record.py: the case's folder, the shared
data, the models' builder, the command, the environment and the releases installed), and run wherever anything of it
changed. TRL_DOCTOR_ACCURACY_LIVE=1 runs every one; TRL_DOCTOR_TRUTHS_RECORD=1 runs every one and records it. The
doctor's side runs every time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, result_of, trl_doctor_exe
from truths import LIVE_ENV, RECORD_ENV, Truth, flag, record_module

CASES = FIXTURES / "frameworks"
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "CUDA_VISIBLE_DEVICES": "", "DO_NOT_TRACK": "1",
       "AXOLOTL_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
       # ms-swift's hub, LLaMA-Factory's version check and the analytics of the gradio it imports: nothing leaves
       "MODELSCOPE_OFFLINE": "1", "DISABLE_VERSION_CHECK": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
MODELS = ("qwen2-chat", "qwen2-chat-32k")  # what the cases' configs name (../../../models/...)

# (framework, case, the documented command, the doctor's exit status, the rules that fail, what the framework's own
# one-step run ends with: its exit status and words of its output)
Case = tuple[str, str, tuple[str, ...], int, frozenset, int, str]
TABLE: tuple[Case, ...] = (
    ("axolotl", "grpo_quickstart", ("axolotl", "train", "config.yaml"), 0, frozenset(), 0, "checkpoint-1"),
    ("axolotl", "rlhf_grpo_basic", ("axolotl", "train", "config.yaml"), 0, frozenset(), 0, "checkpoint-1"),
    ("axolotl", "rlhf_grpo_full_async", ("axolotl", "train", "config.yaml"), 0, frozenset(), 0, "checkpoint-1"),
    ("axolotl", "rlhf_grpo_rollout_func", ("axolotl", "train", "config.yaml"), 1,
     frozenset({"smoke-step", "dataset-schema", "reward-functions"}), 1,
     "math_solver_rollout() missing 1 required positional argument: 'prompts'"),
    ("axolotl", "rlhf_gdpo", ("axolotl", "train", "config.yaml"), 1,
     frozenset({"smoke-step", "dataset-schema", "reward-functions"}), 1,
     "correctness_reward() missing 1 required positional argument: 'answers'"),
    ("oumi", "grpo_tldr", ("oumi", "train", "-c", "config.yaml"), 1, frozenset({"batch-geometry"}), 1,
     "generation_batch_size (2) must be divisible by num_generations (8)"),
    ("oumi", "letter_counting", ("oumi", "train", "-c", "config.yaml"), 1, frozenset({"batch-geometry"}), 1,
     "generation_batch_size (2) must be divisible by num_generations (4)"),
    ("oumi", "docs_trl_grpo", ("oumi", "train", "-c", "config.yaml"), 0, frozenset(), 0, "Training is Complete"),
    ("oumi", "docs_gsm8k_reward", ("oumi", "train", "-c", "config.yaml"), 1,
     frozenset({"smoke-step", "dataset-schema", "reward-functions"}), 1,
     "gsm8k_reward() got an unexpected keyword argument"),
    # as documented: a reward registered nowhere; oumi's CLI catches the KeyError and exits 1 (the cause is named)
    ("oumi", "docs_reward_kwargs", ("oumi", "train", "-c", "config.yaml"), 2, frozenset(), 1,
     "reward_function `rubric_reward` was not found in the registry"),
    # issue 58: swift's CLI trains in a child `python .../swift/cli/rlhf.py`, and its GRPOTrainer replaces TRL's
    # __init__ and data path (reward functions by name, a `messages`/`problem` dataset through its own template)
    ("swift", "grpo_transformers", ("swift", "rlhf", "config.yaml"), 0, frozenset(), 0, "checkpoint-1"),
    ("swift", "grpo_plugin_reward_unloaded", ("swift", "rlhf", "config.yaml"), 2, frozenset(), 1,
     "reward_function external_math_acc is not implemented in swift.rewards"),
    # issue 58: LLaMA-Factory's PPO on trl 0.9.6, the PPOTrainer of TRL's first API (a value head on the policy,
    # generate with LLaMA-Factory's own eos ids), judged by that API's contract
    ("llamafactory", "ppo_lora", ("llamafactory-cli", "train", "config.yaml"), 0, frozenset(), 0,
     "value_head.safetensors"),
    ("llamafactory", "ppo_no_reward_model", ("llamafactory-cli", "train", "config.yaml"), 2, frozenset(), 1,
     "`reward_model` is necessary for PPO training."),
)


def _installed(framework: str) -> str | None:
    """Why the framework's cases cannot run here (None: they can)."""
    if importlib.util.find_spec(framework) is None:
        return f"{framework} is not installed here (the CI's frameworks lane installs it)"
    return None


def _case_tree(framework: str, case: str, tmp_path: Path) -> Path:
    """A private copy of the case (the framework writes its output_dir there) beside the shared data and models."""
    from conftest import fixture_build

    missing = [m for m in MODELS if not (FIXTURES / "models" / m / "config.json").is_file()]
    if missing:
        builders = fixture_build.all_builders()
        for name in MODELS:
            builders[name]()
    root = tmp_path / "fixtures"
    shutil.copytree(CASES / framework / case, root / "frameworks" / framework / case)
    shutil.copytree(CASES / "data", root / "frameworks" / "data")
    (root / "models").mkdir()
    for name in MODELS:
        (root / "models" / name).symlink_to(FIXTURES / "models" / name)
    return root / "frameworks" / framework / case


def _listing(folder: Path) -> list[str]:
    """Every path in the case's folder (symlinks not followed), to hold the check to writing none of them."""
    out = []
    for root, dirs, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, n), folder) for n in dirs + files]
    return sorted(out)


def _unwritten(folder: Path, before: list[str]) -> None:
    """Where the check holds the working directory (trl_doctor/runtime/hold.py; a user namespace here), nothing the
    framework wrote before its trainer (swift's args.json, axolotl's prepared dataset) reached the user's folder."""
    from trl_doctor.runtime import netns

    if netns.probe().namespace:
        assert _listing(folder) == before, sorted(set(_listing(folder)) - set(before))


def _env() -> dict:
    bin_dir = os.path.dirname(sys.executable)  # the framework's console scripts, beside this Python
    return {**os.environ, **ENV, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def _ids(table):
    return [f"{fw}/{case}" for fw, case, *_ in table]


@pytest.mark.parametrize("framework, case, command, status, fails, truth_status, truth_words", TABLE, ids=_ids(TABLE))
def test_the_doctor_judges_the_documented_example_as_the_framework_runs_it(tmp_path, framework, case, command, status,
                                                                           fails, truth_status, truth_words):
    why = _installed(framework)
    if why:
        pytest.skip(why)
    folder = _case_tree(framework, case, tmp_path)
    before = _listing(folder)
    proc = subprocess.run([trl_doctor_exe(), "check", "--format", "json", "--", *command], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=600)
    _unwritten(folder, before)
    if status == 2:  # the framework stops before its trainer is built: one line, naming what it raised and where
        assert proc.returncode == 2 and truth_words in proc.stderr, proc.stderr
        assert framework != "oumi" or "after catching" in proc.stderr, proc.stderr  # oumi's CLI catches and exits 1
        assert "trl_doctor" not in proc.stderr.split("raised in", 1)[-1], proc.stderr  # never the doctor's own code
        return
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    failed = {r["rule"] for r in report["results"] if r["status"] in ("fail", "error")}
    assert (proc.returncode, failed) == (status, set(fails)), \
        [(r["rule"], r["status"], r["message"][:300]) for r in report["results"] if r["status"] != "pass"]
    warned = [(r["rule"], r["message"][:300]) for r in report["results"] if r["status"] == "warn"]
    assert not warned, warned  # a documented example that trains is not warned about either
    if "batch-geometry" in fails:  # the fix names the framework's own file and key, never its installed code
        geometry = result_of(report, "batch-geometry")
        assert geometry["location"]["file"].endswith("config.yaml"), geometry["location"]
        assert "site-packages" not in json.dumps(geometry.get("fix")), geometry.get("fix")


DISTRIBUTIONS = {"axolotl": "axolotl", "oumi": "oumi", "swift": "ms-swift", "llamafactory": "llamafactory"}


def _framework_run(framework: str, case: str, command: tuple, tmp_path: Path) -> tuple[dict, str | None]:
    """The framework's own one-step run of the case: ({"returncode", "out", "files"}, the day it was recorded, or
    None where it ran now). `out` is its output's last 4,000 characters and every line under 500 characters;
    `files` what it wrote (names relative to the case's folder)."""
    record = record_module()
    where = CASES.relative_to(ROOT)
    truth_case = Truth(f"frameworks/{framework}/{case}", list(command), CASES / framework / case,
                       {DISTRIBUTIONS[framework]: ""}, {"command": list(command), "env": ENV},
                       (str(where / framework / case), str(where / "data")))
    keyed = record.key(truth_case)
    recording = flag(RECORD_ENV)
    if not recording and not flag(LIVE_ENV):
        found = record.find(truth_case, keyed)
        if found is not None:
            return found["truth"], found["recorded"]
    folder = _case_tree(framework, case, tmp_path)
    started = time.monotonic()
    proc = subprocess.run(list(command), cwd=folder, env=_env(), capture_output=True, text=True, timeout=900)
    out = (proc.stdout + proc.stderr).replace(str(tmp_path), "<tmp>")  # the record says no test's folder
    kept = [line for line in out.splitlines() if len(line) < 500]
    written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_symlink())
    truth = {"returncode": proc.returncode, "out": out[-4000:], "lines": kept, "files": written[:500]}
    if recording and keyed is not None:
        record.save(truth_case, keyed, {k: truth[k] for k in ("returncode", "out", "files")} |
                    {"lines": [line for line in kept if any(w in line for w in _WORDS)]}, time.monotonic() - started)
    return truth, None


_WORDS = tuple({row[6] for row in TABLE})  # what each case's ground truth is known by (the record keeps those lines)


@pytest.mark.slow
@pytest.mark.parametrize("framework, case, command, status, fails, truth_status, truth_words", TABLE, ids=_ids(TABLE))
def test_the_framework_itself_agrees(tmp_path, framework, case, command, status, fails, truth_status, truth_words):
    """The ground truth: the framework's own documented command, one step on this CPU (or its record)."""
    why = _installed(framework)
    if why:
        pytest.skip(why)
    truth, recorded = _framework_run(framework, case, command, tmp_path)
    said = truth["out"] + "\n" + "\n".join(truth["lines"])
    assert (truth["returncode"] != 0) == (truth_status != 0), (recorded, said[-3000:])
    assert truth_words in said or any(truth_words in Path(f).name for f in truth["files"]), (recorded, said[-3000:])
    assert (status != 0) == (truth_status != 0)  # the doctor's verdict (above) is the framework's own


# oumi's grpo_tldr as its own 4-GPU job runs it: configs/examples/grpo_tldr/gcp_job.yaml (at the commit above) calls
# `oumi distributed torchrun -m oumi train -c ... --training.per_device_train_batch_size 3
# --training.grpo.num_generations 6`, which on a machine of 4 GPUs starts `torchrun --nproc-per-node=4 ... -m oumi
# train ...` (src/oumi/cli/distributed_run.py L229-240; without a GPU it stops: "No supported distributed backends
# found and no GPUs on local machine!"). At 4 processes oumi maps each rank to `cuda:{LOCAL_RANK}`
# (src/oumi/builders/models.py L279-285) and TRL's batch check holds (3 x 4 = 12 prompts' completions, 6 per group).
GCP_JOB = ("torchrun", "--nproc-per-node", "4", "-m", "oumi", "train", "-c", "config.yaml",
           "--training.per_device_train_batch_size", "3", "--training.grpo.num_generations", "6")


def test_oumi_s_four_gpu_job_is_judged_at_its_four_processes(tmp_path):
    """Before: distributed-setup failed `device_map='auto'` at 4 processes, which oumi never passes at 4. oumi's rank
    set-up needs a GPU (torch.device(LOCAL_RANK)): the capture says it ran at world size 1 and why, and the device map
    seen there is not judged; the batch is judged at the job's 4 processes."""
    why = _installed("oumi")
    if why:
        pytest.skip(why)
    folder = _case_tree("oumi", "grpo_tldr", tmp_path)
    proc = subprocess.run([trl_doctor_exe(), "check", "--target", "4xA100-80GB", "--format", "json", "--", *GCP_JOB],
                          cwd=folder, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, [(r["rule"], r["status"], r["message"][:300]) for r in report["results"]
                                  if r["status"] not in ("pass", "skip")]
    note = next(n for n in report["launch"]["notes"] if "world size 1" in n)
    assert "needs a GPU this machine lacks" in note and "oumi" in note, note
    setup = result_of(report, "distributed-setup")
    assert setup["details"]["device_map"].endswith("not judged"), setup["details"]
    assert result_of(report, "batch-geometry")["message"].startswith("at 4 processes (torchrun --nproc_per_node 4")


def test_oumi_s_distributed_command_on_a_machine_without_gpus_says_what_to_check_instead(tmp_path):
    """`oumi distributed torchrun` counts the GPUs before it starts torchrun, and stops without one: one line naming
    oumi's own error, and the launch to check instead (the torchrun line it would start), never a traceback."""
    why = _installed("oumi")
    if why:
        pytest.skip(why)
    folder = _case_tree("oumi", "grpo_tldr", tmp_path)
    proc = subprocess.run([trl_doctor_exe(), "check", "--target", "4xA100-80GB", "--", "oumi", "distributed",
                           "torchrun", "-m", "oumi", "train", "-c", "config.yaml"], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "No supported distributed backends found and no GPUs on local machine!" in lines[0], lines[0]
    assert "this machine has no GPU: check the launch that command starts" in lines[0], lines[0]


def test_swift_s_distributed_launch_is_followed_as_torchrun_and_never_trains(tmp_path):
    """`NPROC_PER_NODE=2 swift rlhf ...` (ms-swift's documented multi-GPU form) starts `python -m torch.distributed.run
    --nproc_per_node 2 <site-packages>/swift/cli/rlhf.py ...`: followed as torchrun, judged at 2 processes, and
    nothing of the job runs (no checkpoint, no completions file in its output folder)."""
    why = _installed("swift")
    if why:
        pytest.skip(why)
    folder = _case_tree("swift", "grpo_transformers", tmp_path)
    before = _listing(folder)
    proc = subprocess.run([trl_doctor_exe(), "check", "--no-smoke", "--format", "json", "--", "swift", "rlhf",
                           "config.yaml"], cwd=folder, env={**_env(), "NPROC_PER_NODE": "2"}, capture_output=True,
                          text=True, timeout=600)
    _unwritten(folder, before)  # swift writes output/v0-*/args.json before its trainer: held
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert any("re-launched itself as `torchrun --nproc_per_node 2" in n for n in report["launch"]["notes"])
    assert any("its construction ran to its end and the script was stopped at train()" in n
               for n in report["launch"]["notes"])
    assert result_of(report, "batch-geometry")["message"].startswith("at 2 processes")
    written = [p.name for p in folder.rglob("*") if p.name.startswith("checkpoint") or p.name == "completions.jsonl"]
    assert written == []


def test_llamafactory_s_forced_torchrun_is_followed_and_judged_by_its_ppo_api(tmp_path):
    """`FORCE_TORCHRUN=1 llamafactory-cli train` starts `torchrun ... <site-packages>/llamafactory/launcher.py
    config.yaml`: followed in place, and trl 0.9.6's PPOTrainer is judged by its own contract (no value model, no
    stop_token: value-model passes, eos-termination skips), not by TRL >= 0.12's."""
    why = _installed("llamafactory")
    if why:
        pytest.skip(why)
    folder = _case_tree("llamafactory", "ppo_lora", tmp_path)
    proc = subprocess.run([trl_doctor_exe(), "check", "--no-smoke", "--format", "json", "--", "llamafactory-cli",
                           "train", "config.yaml"], cwd=folder,
                          env={**_env(), "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert any("re-launched itself as `torchrun" in n for n in report["launch"]["notes"]), report["launch"]["notes"]
    value = result_of(report, "value-model")
    assert value["status"] == "pass" and "the value head is on the policy" in value["message"], value
    eos = result_of(report, "eos-termination")
    assert eos["status"] == "skip" and "generates with the caller's own keywords" in eos["message"], eos
    assert not list(folder.rglob("value_head.safetensors"))
