"""run-phases (TD024, issue 60): what stops a job after its first step, read before launch. The configs' cases are
fixtures/run-phases (tests/test_fixture_cases.py runs them); here the cases that need a folder or a disk of their
own: a resume from the newest checkpoint of an output folder with none and with one, and a first checkpoint larger
than the disk's free space (a 64 KiB tmpfs in a mount namespace of the test's own: `unshare -rm`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import NET_AUDIT_ENV, FIXTURES, ROOT, check_here, result_of, run_doctor, run_json, trl_doctor_exe
from truths import truth_run

TRUTH = ROOT / "tools" / "accuracy" / "truth.py"  # a script run for one CPU step, all else its own
# tools/accuracy/truth.py with the script's report_to kept: a ground truth about what its trackers do at train()
TRUTH_WITH_TRACKERS = ("import importlib.util, sys\n"
                       "spec = importlib.util.spec_from_file_location('truth', sys.argv[1])\n"
                       "truth = importlib.util.module_from_spec(spec)\n"
                       "spec.loader.exec_module(truth)\n"
                       "del truth.CHANGES['report_to']\n"
                       "sys.exit(truth.main(sys.argv[2:]))\n")

pytestmark = pytest.mark.release_free


def _recipe(tmp_path, **more) -> str:
    text = (FIXTURES / "run-phases" / "ok_grpo.yaml").read_text()
    text = text.replace("../models/", f"{FIXTURES}/models/").replace("../data/", f"{FIXTURES}/data/")
    text += "".join(f"{k}: {json.dumps(v)}\n" for k, v in more.items())
    (tmp_path / "rewards.py").write_text((FIXTURES / "run-phases" / "rewards.py").read_text())
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


def test_resume_from_the_newest_checkpoint_needs_one(tmp_path):
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, output_dir=str(out), resume_from_checkpoint=True)
    _, report = check_here(recipe, "--select", "run-phases", "--no-smoke")
    found = result_of(report, "run-phases")
    assert found["status"] == "fail" and "No valid checkpoint found in output directory" in found["message"], found
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-5" / "model.safetensors").write_bytes(b"")
    _, report = check_here(recipe, "--select", "run-phases", "--no-smoke")
    assert result_of(report, "run-phases")["status"] == "pass"
    recipe = _recipe(tmp_path, output_dir=str(out), resume_from_checkpoint=str(out / "checkpoint-5" / "missing"))
    _, report = check_here(recipe, "--select", "run-phases", "--no-smoke")
    assert "does not exist" in result_of(report, "run-phases")["message"]


def test_another_machines_checkpoint_is_not_judged(tmp_path):
    recipe = _recipe(tmp_path, resume_from_checkpoint="/no-such-root/runs/grpo/checkpoint-500")
    _, report = check_here(recipe, "--select", "run-phases", "--no-smoke")
    found = result_of(report, "run-phases")
    assert found["status"] == "skip" and "another machine's path" in found["message"], found


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.skipif(not shutil.which("unshare") or sys.platform != "linux", reason="needs util-linux's unshare")
def test_a_first_checkpoint_larger_than_the_free_disk_fails(tmp_path):
    """The real command, in a mount namespace of its own where output_dir is a 64 KiB tmpfs: the first checkpoint
    of the tiny Qwen2 (its weights and AdamW's two states) does not fit."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged mount namespaces are not allowed here: {probe.stderr.decode().strip()}")
    disk = tmp_path / "disk"
    disk.mkdir()
    recipe = _recipe(tmp_path, output_dir=str(disk / "out"))
    script = f"mount -t tmpfs -o size=64k tmpfs {disk} && exec {trl_doctor_exe()} check {recipe} --select run-phases " \
             "--no-smoke --format json"
    env = {k: v for k, v in os.environ.items() if k != "TRL_DOCTOR_FORKSERVER"}  # its worker: in this namespace
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    found = result_of(json.loads(proc.stdout), "run-phases")
    assert found["status"] == "fail" and "the first checkpoint needs about" in found["message"], found
    assert "free" in found["details"]["checkpoint"], found


def _launch_machine() -> dict:
    """The environment of a check that sees GPUs (tests/fake_nvml), as the launch machine would: its trackers' and
    the hub's credentials and packages are then judged."""
    from test_fixture_cases import fake_gpu_env

    return fake_gpu_env(FIXTURES / "run-phases" / "gpus" / "4x-a100-80g.json")


def test_a_tracker_not_installed_is_found_in_the_words_the_trainer_stops_with(tmp_path):
    """Ground truth: TRL's GRPOTrainer built with report_to clearml (not installed in any lane) raises when it is
    constructed; run-phases names the same words. Without a GPU here the same recipe is said as not judged."""
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    recipe = _recipe(tmp_path, report_to=["clearml"])
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, num_generations=4,
                      per_device_train_batch_size=4, max_completion_length=8, report_to=["clearml"])
    with pytest.raises(RuntimeError) as trl_says:
        GRPOTrainer(model=str(FIXTURES / "models" / "qwen2-chat"), args=args,
                    reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                    train_dataset=load_dataset("json", data_files=str(FIXTURES / "data" / "chat.jsonl"), split="train"))
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke", env=_launch_machine())
    found = result_of(report, "run-phases")
    assert found["status"] == "fail" and str(trl_says.value) in found["message"], (found, trl_says.value)
    _, here = check_here(recipe, "--select", "run-phases", "--no-smoke")
    found = result_of(here, "run-phases")
    assert found["status"] == "pass" and "clearml: the launch machine's credentials and packages, not judged here" \
        in found["message"], found


@pytest.mark.slow
def test_a_resume_trl_cannot_make_fails_in_the_words_of_trl_s_own_train(tmp_path):
    """Ground truth: TRL's own GRPOTrainer.train(resume_from_checkpoint=...) on the same recipe, which stops before
    any step in transformers' words, "Can't find a valid checkpoint at ...", for a folder that is not there
    (shibing624/MedicalGPT#91) and for one that holds its weights as shards without their index
    (HKUDS/GraphGPT#78: `pytorch_model-0000N-of-00003.bin`, config, rng state); run-phases fails both before launch.
    A checkpoint the Trainer wrote itself resumes in TRL and passes (the healthy twin)."""
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    missing = tmp_path / "out" / "checkpoint-32500"
    sharded = tmp_path / "shards" / "checkpoint-50000"
    sharded.mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "pytorch_model-00001-of-00003.bin",
                 "pytorch_model-00002-of-00003.bin", "rng_state_1.pth"):
        (sharded / name).write_bytes(b"")
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, num_generations=4,
                      per_device_train_batch_size=4, max_completion_length=8, max_steps=1, save_steps=1,
                      report_to=[])
    trainer = GRPOTrainer(model=str(FIXTURES / "models" / "qwen2-chat"), args=args,
                          reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
                          train_dataset=load_dataset("json", data_files=str(FIXTURES / "data" / "chat.jsonl"),
                                                     split="train"))
    for folder in (missing, sharded):
        with pytest.raises(ValueError, match="Can't find a valid checkpoint at") as trl_says:
            trainer.train(resume_from_checkpoint=str(folder))
        _, report = run_json("check", _recipe(tmp_path, resume_from_checkpoint=str(folder)), "--select", "run-phases",
                             "--no-smoke")
        found = result_of(report, "run-phases")
        assert found["status"] == "fail" and str(folder) in found["message"], (found, trl_says.value)
    trainer.train()  # its one step, saved as checkpoint-1: the folder the Trainer writes itself
    written = tmp_path / "out" / "checkpoint-1"
    assert written.is_dir(), sorted(p.name for p in (tmp_path / "out").iterdir())
    trainer.train(resume_from_checkpoint=str(written))  # TRL resumes from it (at max_steps already: no more steps)
    _, report = run_json("check", _recipe(tmp_path, resume_from_checkpoint=str(written)), "--select", "run-phases",
                         "--no-smoke")
    assert result_of(report, "run-phases")["status"] == "pass", result_of(report, "run-phases")


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_push_to_hub_with_the_hub_switched_off_fails_where_the_trainer_would(tmp_path):
    """HF_HUB_OFFLINE=1 in the user's environment (the worker sets it for itself, keeping the user's value aside):
    transformers' Trainer creates the hub repository when constructed and stops with OfflineModeIsEnabled. With a
    token at hand and the hub on, nothing is said; the token is never sent anywhere."""
    recipe = _recipe(tmp_path, push_to_hub=True)
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke",
                         env={**_launch_machine(), "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_test"})
    found = result_of(report, "run-phases")
    assert found["status"] == "fail" and "push_to_hub with HF_HUB_OFFLINE=1" in found["message"], found
    _, report = run_json("check", recipe, "--select", "run-phases", "--no-smoke",
                         env={**_launch_machine(), "HF_TOKEN": "hf_test", "HF_HUB_OFFLINE": ""})
    assert result_of(report, "run-phases")["status"] == "pass"


def test_a_launch_scripts_trackers_are_judged_though_the_capture_turns_them_off(tmp_path):
    """A script passing report_to="wandb": the capture turns it off in what its trainer is given (nothing logs from
    the check), and run-phases still judges the wandb the job will start; what will run names it."""
    source = (FIXTURES / "launch" / "grpo_quickstart.py").read_text()
    source = source.replace('"../models/qwen2-chat"', repr(str(FIXTURES / "models" / "qwen2-chat")))
    source = source.replace('"../data/chat_many.jsonl"', repr(str(FIXTURES / "data" / "chat_many.jsonl")))
    assert 'report_to="none"' in source
    (tmp_path / "train.py").write_text(source.replace('report_to="none"', 'report_to="wandb"'))
    proc = run_doctor("check", "--no-smoke", "--select", "run-phases", "--format", "json", "--", "python",
                      str(tmp_path / "train.py"), env={**_launch_machine(), "WANDB_API_KEY": "", "WANDB_MODE": "",
                                                       "WANDB_DISABLED": ""})
    report = json.loads(proc.stdout)
    found = result_of(report, "run-phases")
    assert found["status"] == "fail" and "report_to wandb: no wandb API key here" in found["message"], found
    assert report["will_run"]["lines"]["logging"] == "every step to wandb"
    assert "report_to" in report["launch"]["relaxed"]


def _no_wandb_key(tmp_path) -> dict:
    """A machine where wandb has no credentials (no WANDB_API_KEY, no ~/.netrc: an empty home) and is not offline."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "WANDB_DIR": str(tmp_path), "WANDB_API_KEY": "", "WANDB_MODE": "", "WANDB_DISABLED": ""}


@pytest.mark.slow  # it trains: the default lane's long selection (the module is release_free)
def test_wandb_without_credentials_stops_trls_own_train_and_run_phases_fails_it(tmp_path):
    """Ground truth (unslothai/unsloth#1914's mode): the script (fixtures/launch/grpo_tracker_args.py, reporting to
    wandb) run by the installed TRL for one step on a machine with no wandb key and wandb not offline stops at
    train() in wandb's own words; run-phases fails the same launch before it starts. The twin with wandb offline
    trains, and run-phases passes it."""
    pytest.importorskip("wandb")
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode:
        pytest.skip("needs util-linux's unshare and user namespaces (the job's own run is kept off the network)")
    case = tmp_path / "launch"
    case.mkdir()
    shutil.copy(FIXTURES / "launch" / "grpo_tracker_args.py", case / "train.py")
    (tmp_path / "data").symlink_to(FIXTURES / "data")
    command = ["python", "train.py", str(FIXTURES / "models" / "qwen2-chat"), "wandb", "dtype", "1"]
    _judged_without_a_wandb_key("run_phases/wandb", ["unshare", "-rn", sys.executable, "-W", "ignore", *command[1:]],
                                command, case, tmp_path, ("fixtures/launch/grpo_tracker_args.py", "fixtures/data"),
                                trained=lambda truth: "TRAINED" in truth.stdout)


def _judged_without_a_wandb_key(name, argv, command, case, tmp_path, reads, trained, env=None) -> None:
    """On a launch machine whose wandb has no key and is not offline, then with wandb offline: the job's own run
    (`argv` in `case`, in a network namespace of its own: wandb without a key looks up its server before it gives
    up, and from here nothing may reach another machine; recorded by tests/truths.py under `name`) stops at train()
    in wandb's words, then trains (`trained(truth)`); run-phases fails the launch `command`, then passes it."""
    for offline in (False, True):
        machine = {**_no_wandb_key(tmp_path), **({"WANDB_MODE": "offline"} if offline else {})}
        truth = truth_run(f"{name}-{'offline' if offline else 'no-key'}", argv, case,
                          env={k: v for k, v in machine.items() if v != ""} | (env or {}),
                          unset=(NET_AUDIT_ENV, *(k for k, v in machine.items() if v == "")), tmp=tmp_path,
                          reads=reads, requires={"wandb": ""})
        proc = run_doctor("check", "--no-smoke", "--select", "run-phases", "--format", "json", "--", *command,
                          cwd=case, env={**_launch_machine(), **machine})
        found = result_of(json.loads(proc.stdout), "run-phases")
        if offline:
            assert truth.returncode == 0 and trained(truth), truth.stderr[-2000:]
            assert found["status"] == "pass", found
        else:
            assert truth.returncode != 0 and "on_train_begin" in truth.stderr, truth.stderr[-2000:]
            last = truth.stderr.strip().splitlines()[-1]
            assert "wandb" in last and "API key" in last.replace("api_key", "API key"), last
            assert found["status"] == "fail" and "report_to wandb: no wandb API key here" in found["message"], found


@pytest.mark.slow  # it trains (recorded): the default lane's long selection
def test_a_public_recipe_reporting_to_wandb_without_credentials(tmp_path, corpus_models):
    """The same mode on a recipe no one here wrote: Modal's GRPO example (corpus/modal_grpo_trl: modal-labs/
    modal-examples @ 17eca697, 06_gpu_and_ml/reinforcement-learning/grpo_trl.py, `report_to="wandb"` in its
    GRPOConfig, max_steps 5, a checkpoint every step), launched as `python grpo_trl.py` on a launch machine whose
    wandb has no key and is not offline. Ground truth: the script itself, run by the installed TRL as its user runs
    it (in a network namespace of its own, through tools/accuracy/truth.py with its report_to kept: on the CPU, bf16
    off and one step), stops at train() in wandb's words, and with wandb offline trains; run-phases fails the first
    before it starts and passes the second."""
    pytest.importorskip("wandb")
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode:
        pytest.skip("needs util-linux's unshare and user namespaces (the job's own run is kept off the network)")
    corpus = corpus_models.parent
    case = tmp_path / "modal"
    case.mkdir()
    shutil.copy(corpus / "modal_grpo_trl" / "grpo_trl.py", case / "grpo_trl.py")
    for name in ("models", "data"):  # the script's ../models and ../data
        (tmp_path / name).symlink_to(corpus / name)
    _judged_without_a_wandb_key(
        "run_phases/modal-wandb",
        ["unshare", "-rn", sys.executable, "-W", "ignore", "-c", TRUTH_WITH_TRACKERS, str(TRUTH), "--", "python",
         "grpo_trl.py"], ["python", "grpo_trl.py"], case, tmp_path,
        ("corpus/modal_grpo_trl/grpo_trl.py", "corpus/data/opc_educational_instruct.jsonl", "corpus/build.py",
         "tools/accuracy/truth.py"),
        trained=lambda truth: "truth: trainer GRPOTrainer" in truth.stderr, env={"TRL_DOCTOR_TRUTH_TRACE": "1"})


@pytest.mark.boundary  # TRL's own CLI run as ground truth: CI's boundary step, every submission
def test_an_evaluation_the_local_folder_cannot_feed_stops_trls_own_run_and_run_phases_fails_it(tmp_path):
    """Ground truth (huggingface/trl#2253's mode): `trl grpo --config` with eval_strategy on a local folder whose one
    jsonl datasets reads as a lone `train` split stops with KeyError: 'test' after the model has loaded; run-phases
    fails that recipe (it passed it before: only a saved DatasetDict's splits were read). The twin, whose folder
    holds train.jsonl and test.jsonl, takes its step, and run-phases passes it."""
    for twin in (False, True):
        case = tmp_path / ("twin" if twin else "lone")
        (case / "data").mkdir(parents=True)
        names = ["train.jsonl", "test.jsonl"] if twin else ["chat.jsonl"]
        for name in names:
            shutil.copy(FIXTURES / "data" / "chat.jsonl", case / "data" / name)
        shutil.copy(FIXTURES / "run-phases" / "rewards.py", case / "rewards.py")
        (case / "recipe.yaml").write_text(
            f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\ndataset_name: data\n"
            "reward_funcs: [rewards.length_reward]\nnum_generations: 4\nper_device_train_batch_size: 4\n"
            "max_completion_length: 16\noutput_dir: out\neval_strategy: steps\neval_steps: 100\nmax_steps: 1\n"
            "use_cpu: true\nreport_to: none\n")
        trl = shutil.which("trl", path=os.path.dirname(sys.executable)) or "trl"
        truth = truth_run(f"run_phases/trl-grpo-eval-{'twin' if twin else 'lone'}", [trl, "grpo", "--config",
                          "recipe.yaml"], case, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
                          given={"recipe.yaml": (case / "recipe.yaml").read_text(), "data": " ".join(names)},
                          reads=("fixtures/data/chat.jsonl", "fixtures/run-phases/rewards.py"), tmp=tmp_path)
        _, report = check_here(str(case / "recipe.yaml"), "--select", "run-phases", "--no-smoke")
        found = result_of(report, "run-phases")
        if twin:
            assert truth.returncode == 0, truth.stderr[-2000:]
            assert found["status"] == "pass", found
        else:
            assert truth.returncode != 0 and "KeyError: 'test'" in truth.stderr, truth.stderr[-2000:]
            assert found["status"] == "fail" and "no 'test' split (it has train)" in found["message"], found
