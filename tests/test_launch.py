"""`trl-doctor check -- LAUNCH COMMAND`: the user's script runs in the worker until it builds its TRL trainer, and
the rules judge what that trainer was given. Each test runs the real command on the scripts in fixtures/launch/
(scripts in the styles people write: an R1-reproduction recipe script, TRL's quickstart, a trainer subclass,
TRL's PPO example, `trl grpo`, `accelerate launch`), with the installed TRL and transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import result_of, run_doctor, trl_has

pytestmark = [pytest.mark.usefixtures("built_fixtures"), pytest.mark.trl_pair]

LAUNCH = Path(__file__).resolve().parent.parent / "fixtures" / "launch"


@pytest.fixture(autouse=True)
def in_launch_folder(monkeypatch):
    """The scripts use paths relative to their folder, as users run them from theirs."""
    monkeypatch.chdir(LAUNCH)


def run_json(*args: str) -> tuple[int, dict]:
    """`trl-doctor check OPTIONS -- COMMAND` with `--format json` among the options (after `--` is the command)."""
    i = args.index("--") if "--" in args else len(args)
    proc = run_doctor(*args[:i], "--format", "json", *args[i:])
    assert proc.stdout, f"no report on stdout; stderr:\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def line_of(script: str, text: str) -> int:
    lines = (LAUNCH / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


STATIC = "pad-token,trainer-config,batch-geometry,context-length,chat-template,dataset-schema,reward-functions"


def test_script_that_builds_its_prompts_is_checked_as_the_trainer_gets_them():
    code, report = run_json("check", "--no-smoke", "--select", STATIC, "--",
                            "python", "grpo_system_prompt.py", "--config", "grpo_system_prompt.yaml")
    assert code == 0, report
    launch = report["launch"]
    assert launch["trainer"] == "grpo" and launch["trainer_class"].endswith("GRPOTrainer")
    assert launch["constructed_at"] == f"{LAUNCH / 'grpo_system_prompt.py'}:{line_of('grpo_system_prompt.py', 'trainer = GRPOTrainer(')}"
    assert launch["recipe"] == str(LAUNCH / "grpo_system_prompt.yaml")
    schema = result_of(report, "dataset-schema")
    assert schema["status"] == "pass" and "`prompt` is conversational" in schema["message"]
    rewards = result_of(report, "reward-functions")
    assert rewards["status"] == "pass", rewards
    assert "__main__.accuracy_reward" in rewards["message"] and "__main__.format_reward" in rewards["message"]
    # the system prompt the script prepends is in what the chat template renders
    assert result_of(report, "chat-template")["status"] == "pass"
    assert result_of(report, "context-length")["status"] == "pass"


def test_the_file_view_of_the_same_data_sees_no_prompt_column():
    code, report = run_json("check", "--no-smoke", "--select", "dataset-schema", "file_view.yaml")
    assert code == 1
    assert "no `prompt` column" in result_of(report, "dataset-schema")["message"]


def test_gpu_settings_are_let_through_and_reported_on_a_machine_without_one():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nothing is relaxed")
    proc = run_doctor("check", "--no-smoke", "--select", "trainer-config", "--",
                      "python", "grpo_system_prompt.py", "--config", "grpo_system_prompt.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "relaxed on this machine: use_cpu:" in proc.stdout
    assert "captured: trl.trainer.grpo_trainer.GRPOTrainer constructed at" in proc.stdout


def test_quickstart_style_model_path_and_reward_defined_in_the_script():
    code, report = run_json("check", "--no-smoke", "--select", STATIC, "--", "python", "grpo_quickstart.py")
    assert code == 0, report
    assert report["config"] == str(LAUNCH / "grpo_quickstart.py")
    rewards = result_of(report, "reward-functions")
    assert rewards["status"] == "pass" and "__main__.reward_len" in rewards["message"]
    assert "accepts all" in result_of(report, "trainer-config")["message"]


def test_the_api_reports_a_launch_command_as_the_command_line_does(monkeypatch):
    """One front door (trl_doctor.front.request): trl_doctor.check(["python", ...]) names the same subject (the file
    that built the trainer), captures the same launch and gives the same verdicts as `check -- python ...`."""
    from trl_doctor import check

    monkeypatch.chdir(LAUNCH)
    code, cli = run_json("check", "--no-smoke", "--select", STATIC, "--", "python", "grpo_quickstart.py")
    api = json.loads(check(["python", "grpo_quickstart.py"], smoke=False, select=STATIC).to_json())
    assert api["config"] == cli["config"] == str(LAUNCH / "grpo_quickstart.py")
    assert api["launch"]["trainer_class"] == cli["launch"]["trainer_class"]
    assert [(r["id"], r["status"], r["message"]) for r in api["results"]] == \
        [(r["id"], r["status"], r["message"]) for r in cli["results"]]


def test_a_trainer_subclass_is_captured_at_the_line_that_builds_it():
    code, report = run_json("check", "--no-smoke", "--select", "vllm-tokenizer-drift,reward-functions", "--",
                            "python", "grpo_subclass.py")
    launch = report["launch"]
    assert launch["trainer_class"] == "__main__.ToolGRPOTrainer"
    # the line in main() that constructs the subclass, not its super().__init__ line
    assert launch["constructed_at"].endswith(f"grpo_subclass.py:{line_of('grpo_subclass.py', 'trainer = ToolGRPOTrainer(')}")
    drift = result_of(report, "vllm-tokenizer-drift")
    # the token the script added to its tokenizer is one the checkpoint has no embedding row for
    assert code == 1 and drift["status"] == "fail" and "'<search>'" in drift["message"]


def test_accelerate_launch_with_zero3_on_four_processes():
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry,trainer-config,distributed-setup", "--",
                            "accelerate", "launch", "--config_file", "zero3_4gpu.yaml",
                            "grpo_system_prompt.py", "--config", "grpo_bad_geometry.yaml")
    assert code == 1
    geometry = result_of(report, "batch-geometry")
    assert geometry["status"] == "fail" and "at 4 processes" in geometry["message"]
    assert "num_generations" in geometry["message"]
    # a fix of keys the recipe sets edits the recipe; one that names a key the recipe does not set is for a person
    # (the script might not read it there) and points at the script line that built the trainer
    where, how = geometry["location"]["file"], geometry["fix"]["applicability"]
    if geometry["location"]["key"] in ("num_generations", "per_device_train_batch_size"):  # keys of the recipe
        assert (where, how) == (str(LAUNCH / "grpo_bad_geometry.yaml"), "safe")
    else:
        assert (where, how) == (str(LAUNCH / "grpo_system_prompt.py"), "manual")
        assert geometry["location"]["line"] == line_of("grpo_system_prompt.py", "trainer = GRPOTrainer(")
    # a TRL whose config checks the batch (trl >= 0.17) refuses it at 1 process and at 4: the script still
    # reached its trainer, and the report says how
    from trl_doctor.facts.launch.launcher import is_geometry_error

    try:
        from trl import GRPOConfig

        GRPOConfig(output_dir=str(LAUNCH / "unused"), num_generations=8, per_device_train_batch_size=3, use_cpu=True)
        refused = False
    except ValueError as exc:
        refused = is_geometry_error(str(exc))
    assert ("per_device_train_batch_size" in report["launch"]["relaxed"]) == refused
    dist = result_of(report, "distributed-setup")
    from importlib.util import find_spec

    if find_spec("deepspeed") is None:
        # this machine has no GPU: not the launch machine, so a note that it must be installed there (the fail
        # where GPUs are visible is tested in test_launch_machine.py)
        assert dist["status"] == "pass" and "needs it on the launch machine" in dist["details"]["deepspeed"], dist


def test_accelerate_launch_num_processes_flag_sets_the_process_count():
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry", "--",
                            "accelerate", "launch", "--num_processes", "2", "grpo_quickstart.py")
    geometry = result_of(report, "batch-geometry")
    assert "at 2 processes (accelerate launch --num_processes 2)" in geometry["message"], geometry


def test_trl_cli_with_a_datasets_mixture():
    try:
        from trl.scripts.utils import DatasetMixtureConfig  # noqa: F401
    except ImportError:
        pytest.skip("the installed TRL's scripts take no `datasets:` mixture")
    code, report = run_json("check", "--no-smoke", "--select", STATIC, "--", "trl", "grpo", "--config",
                            "trl_grpo_mixture.yaml")
    assert code == 0, report
    schema = result_of(report, "dataset-schema")
    assert schema["status"] == "pass" and schema["details"]["rows"] == 32  # both files of the mixture
    assert "rewards.short_answer" in result_of(report, "reward-functions")["message"]
    assert report["launch"]["constructed_at"].split(":")[0].endswith(os.path.join("trl", "scripts", "grpo.py"))


def test_trl_cli_passes_num_processes_to_its_launch():
    try:
        from trl.scripts.utils import DatasetMixtureConfig  # noqa: F401
    except ImportError:
        pytest.skip("the installed TRL's scripts take no `datasets:` mixture")
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry", "--", "trl", "grpo", "--config",
                            "trl_grpo_two_processes.yaml")
    assert "at 2 processes (trl grpo --num_processes 2)" in result_of(report, "batch-geometry")["message"]


def test_torchrun_processes_per_node():
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry", "--",
                            "torchrun", "--nproc_per_node", "2", "grpo_quickstart.py")
    assert "at 2 processes (torchrun --nproc_per_node 2" in result_of(report, "batch-geometry")["message"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_models_load_on_the_meta_device_unless_load_weights(tmp_path, tmp_path_factory):
    script = tmp_path / "probe_device.py"
    out = tmp_path_factory.mktemp("outside") / "device.txt"  # outside the script's folder, which the check holds
    script.write_text(
        "from datasets import load_dataset\n"
        "from transformers import AutoModelForCausalLM\n"
        "from trl import GRPOConfig, GRPOTrainer\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(LAUNCH.parent / 'models' / 'qwen2-chat')!r})\n"
        f"open({str(out)!r}, 'w').write(next(model.parameters()).device.type)\n"
        f"data = load_dataset('json', data_files={str(LAUNCH.parent / 'data' / 'chat.jsonl')!r}, split='train')\n"
        "GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],\n"
        "            args=GRPOConfig(output_dir='out', num_generations=2, per_device_train_batch_size=2), train_dataset=data)\n"
    )
    proc = run_doctor("check", "--no-smoke", "--select", "pad-token", "--", "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "meta"
    proc = run_doctor("check", "--no-smoke", "--load-weights", "--select", "pad-token", "--", "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "cpu"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_a_script_that_computes_with_its_model_before_any_trainer_is_told_the_weights_are_the_captures(tmp_path):
    """TRL's best_of_n notebook samples and scores with its models and never builds a trainer: without
    --load-weights the capture's weightless (meta) model stops it at its first generate, and the line must say the
    doctor caused that, not blame the script; with --load-weights the script runs to its end and is said to train
    nothing."""
    script = tmp_path / "best_of_n.py"
    script.write_text(
        "import torch\n"
        "from transformers import AutoModelForCausalLM\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(LAUNCH.parent / 'models' / 'qwen2-chat')!r})\n"
        "out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)\n"
        "print(out.shape)\n"
    )
    proc = run_doctor("check", "--", "python", str(script))
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "best_of_n.py computed with its model's weights before constructing a TRL " \
        "trainer" in line and "meta" in line and "rerun with --load-weights" in line, proc.stderr
    assert "best_of_n.py:4" in line, line  # the script's own line that ran the model
    proc = run_doctor("check", "--load-weights", "--", "python", str(script))
    assert proc.returncode == 2 and "best_of_n.py finished without constructing a TRL trainer" in proc.stderr, \
        proc.stderr
    # the script's own error, with the weightless model in its globals, is still the script's
    other = tmp_path / "own_error.py"
    other.write_text(
        "from datasets import load_dataset\n"
        "from transformers import AutoModelForCausalLM\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(LAUNCH.parent / 'models' / 'qwen2-chat')!r})\n"
        "data = load_dataset('json', data_files='no_such_file.jsonl', split='train')\n"
    )
    proc = run_doctor("check", "--", "python", str(other))
    assert proc.returncode == 2 and "own_error.py failed before constructing a TRL trainer" in proc.stderr, \
        proc.stderr
    assert "--load-weights" not in proc.stderr, proc.stderr


def test_nothing_is_written_beside_the_script():
    run_doctor("check", "--no-smoke", "--select", "pad-token", "--", "python", "grpo_quickstart.py")
    assert not (LAUNCH / "out").exists()


# -- bad input: exit 2 and one line --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["python", "bad_raises.py"], ["bad_raises.py failed before constructing a TRL trainer: KeyError: 'problem'",
                                  f"bad_raises.py:{line_of('bad_raises.py', 'prompts = [')}"]),
    (["python", "bad_no_trainer.py"], ["bad_no_trainer.py finished without constructing a TRL trainer"]),
    (["python", "not_there.py"], ["not_there.py: no such training script"]),
    (["make", "train"], ["make: not a launcher trl-doctor can run"]),
    (["trl", "sft", "--config", "x.yaml"], ["trl sft: trl-doctor checks `trl grpo|rloo|ppo ...`"]),
    (["accelerate", "config"], ["only `accelerate launch [OPTIONS] SCRIPT [ARGS]` starts a job"]),
])
def test_bad_launch_commands_are_one_line_and_exit_2(args, words):
    proc = run_doctor("check", "--", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trl-doctor: error: "), proc.stderr
    for w in words:
        assert w in lines[0]


def test_a_script_that_hangs_is_stopped_and_named_where_it_was():
    proc = run_doctor("check", "--script-timeout", "2", "--", "python", "bad_hangs.py")
    assert proc.returncode == 2
    assert "did not construct a TRL trainer within 2s" in proc.stderr
    assert f"bad_hangs.py:{line_of('bad_hangs.py', 'time.sleep')}" in proc.stderr


def test_verbose_shows_the_script_traceback():
    proc = run_doctor("check", "-v", "--", "python", "bad_raises.py")
    assert proc.returncode == 2
    assert "Traceback (most recent call last)" in proc.stderr and "KeyError: 'problem'" in proc.stderr


# -- issue 44, class 6: what a launch script does to the doctor's own outputs and exit status ------------------------

@pytest.mark.parametrize("how", ["os._exit(0)", "os._exit(3)", "os.kill(os.getpid(), 9)"])
def test_a_script_that_ends_its_process_before_its_trainer_is_one_line_exit_2(tmp_path, how):
    script = tmp_path / "ends.py"
    script.write_text(f"import os\nprint('preparing the data')\n{how}\n")
    proc = run_doctor("check", "--no-smoke", "--", "python", str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ended its process" in lines[0] and "before constructing a TRL trainer" in lines[0], lines
    assert "its last output: preparing the data" in lines[0]


def test_a_report_path_the_script_makes_a_link_is_never_written_through(tmp_path):
    """The script puts a link at the --report path (to a file of the user's) and then builds its trainer: where the
    script's folder is held (trl_doctor/runtime/hold.py) the link never reaches it; with TRL_DOCTOR_HOLD=0 it does,
    and the report is written in the link's place. Either way the file it pointed to is untouched."""
    from trl_doctor.runtime import netns

    victim, report = tmp_path / "victim.txt", tmp_path / "report.json"
    victim.write_text("precious\n")
    script = tmp_path / "linker.py"
    script.write_text(f"import os, runpy, sys\nos.symlink({str(victim)!r}, {str(report)!r})\n"
                      f"sys.argv = ['grpo_quickstart.py']\n"
                      f"runpy.run_path({str(LAUNCH / 'grpo_quickstart.py')!r}, run_name='__main__')\n")
    held = netns.probe().namespace
    for env, linked in (({}, not held), ({"TRL_DOCTOR_HOLD": "0"}, True)):
        report.unlink(missing_ok=True)
        proc = run_doctor("check", "--no-smoke", "--report", f"json={report}", "--", "python", str(script), env=env)
        assert proc.returncode in (0, 1), proc.stderr
        assert victim.read_text() == "precious\n"
        assert not report.is_symlink() and json.loads(report.read_text())["results"]
        assert ("became a link while the check ran" in proc.stderr) == linked, proc.stderr


# -- issue 45, class 4: the cause is always named, never the doctor's own wrapper ------------------------------------

def test_a_keyword_error_in_the_config_names_the_users_line_not_the_doctors_wrapper(tmp_path):
    script = tmp_path / "kw.py"
    script.write_text("from trl import GRPOConfig\n\nargs = GRPOConfig(output_dir='out', bogus_key=1)\n")
    proc = run_doctor("check", "--", "python", str(script))
    assert proc.returncode == 2
    assert "unexpected keyword argument 'bogus_key'" in proc.stderr and f"(at {script}:3)" in proc.stderr
    assert "trl_doctor" not in proc.stderr and "hooks.py" not in proc.stderr, proc.stderr


def test_a_cli_that_catches_the_error_and_exits_1_is_named_with_its_cause(tmp_path):
    """oumi's CLI prints the traceback and calls sys.exit(1): the exception it caught is the cause said."""
    script = tmp_path / "cli.py"
    script.write_text("import logging, sys\n\nfrom trl import GRPOConfig\n\n\ndef main():\n    try:\n"
                      "        GRPOConfig(output_dir='out', fp16=True, bf16=True, use_cpu=True)\n"
                      "    except Exception as exc:\n        logging.getLogger('cli').debug(exc)  # nothing on stderr\n"
                      "        sys.exit(1)\n\n\nmain()\n")
    proc = run_doctor("check", "--", "python", str(script))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "exited with status 1 before constructing a TRL trainer" in line, line
    assert "after catching ValueError: At most one of fp16 and bf16 can be True" in line, line
    assert f"(at {script}:8, raised in transformers at " in line, line


@pytest.mark.pinned_releases  # the cited trainer pins trl 0.17.0 + transformers 4.51.3: the trl017 lane runs it too
def test_a_grpo_subclass_that_skips_its_parents_init_is_judged_as_grpo():
    """Issue 45, class 5: a GRPOTrainer subclass whose __init__ calls Trainer.__init__ itself (the R1-V-style VLM
    trainers' `super(GRPOTrainer, self).__init__`: nian1125/Invert4TVG at 10484566, qwen-vl-finetune/qwenvl/train/
    qwenvl_grpo_trainer.py L160 and L387, cited in the fixture) was "not a trainer trl-doctor checks", every rule
    skipped, exit 0.
    It is judged as GRPO on what it was given (its reward functions from `self.reward_funcs`), and the report says
    which of the parent's checks its __init__ skipped."""
    code, report = run_json("check", "--no-smoke", "--", "python", "grpo_subclass_own_init.py")
    assert code == 1 and report["trainer"] == "grpo"
    assert result_of(report, "batch-geometry")["status"] == "fail"
    assert "__main__.format_reward" in result_of(report, "reward-functions")["message"]
    (note,) = [n for n in report["launch"]["notes"] if "Trainer.__init__ itself" in n]
    assert note.startswith("__main__.VisionGRPOTrainer subclasses TRL's GRPOTrainer") and "GRPOTrainer.__init__" in note
    # issue 58, class 2: its construction runs to its end and the script stops at train(), with the trainer as built
    assert "its construction ran to its end and the script was stopped at train()" in note


# -- issue 45, class 1: any launcher that is a Python program, followed to the process that builds the trainer ------

FRAMEWORK = LAUNCH / "framework"


def _framework(*args: str):
    return run_doctor("check", *args, cwd=FRAMEWORK, env={"PYTHONPATH": str(FRAMEWORK / "site")})


def test_an_installed_packages_command_that_relaunches_itself_is_followed():
    """`minifw train CONFIG` (an installed console script, as `axolotl train` is) re-launches itself as `accelerate
    launch --num_processes 2 -m minifw.train CONFIG`: that launch runs in its place, at 2 processes, and the
    framework's dataloader settings (workers and a prefetch factor of 256) take their step."""
    proc = _framework("--format", "json", "--", "minifw", "train", "grpo_ok.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["launch"]["command"] == "minifw train grpo_ok.yaml"
    assert any("re-launched itself as `accelerate launch --num_processes 2 -m minifw.train grpo_ok.yaml`" in n
               for n in report["launch"]["notes"]), report["launch"]
    assert result_of(report, "smoke-step")["status"] == "pass"
    assert "at 2 processes" in result_of(report, "batch-geometry")["message"]
    assert not (FRAMEWORK / "out").exists()


def test_a_relaunched_jobs_batch_geometry_is_judged_at_the_launchs_process_count():
    proc = _framework("--no-smoke", "--format", "json", "--", "minifw", "train", "grpo_bad_geometry.yaml")
    assert proc.returncode == 1, proc.stderr[-2000:]
    geometry = result_of(json.loads(proc.stdout), "batch-geometry")
    assert geometry["status"] == "fail" and "at 2 processes (accelerate launch --num_processes 2)" in geometry["message"]
    assert "(6)" in geometry["message"] or "(2 x 3)" in geometry["message"], geometry["message"]  # TRL's own words


def test_a_command_no_installed_package_has_is_still_refused_in_one_line():
    proc = run_doctor("check", "--", "no-such-framework-cli", "train", "x.yaml")
    assert proc.returncode == 2
    assert "not a launcher trl-doctor can run" in proc.stderr and "installed Python package" in proc.stderr


# -- the Python API and the gate inside the job --------------------------------------------------------------------

def test_python_api_on_a_launch_command_and_on_a_config():
    import trl_doctor

    report = trl_doctor.check(["python", "grpo_quickstart.py"], select=["reward-functions", "pad-token"], smoke=False)
    assert report.ok and report.trainer == "grpo"
    assert report.summary["pass"] == 2
    assert json.loads(report.to_json())["launch"]["constructed_at"].endswith("grpo_quickstart.py:19")
    assert "captured: trl.trainer.grpo_trainer.GRPOTrainer" in report.table
    bad = trl_doctor.check("file_view.yaml", select=["dataset-schema"], smoke=False)
    assert not bad.ok and bad.results[0].status.value == "fail"


def run_script(*args: str) -> subprocess.CompletedProcess:
    """The script run as its user runs it; its own temporary output folder goes to a folder removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="launch-script-") as tmp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "TRL_DOCTOR_TEST_NO_FORKSERVER": "1",
               "TMPDIR": tmp}
        return subprocess.run([sys.executable, *args], cwd=LAUNCH, env=env, capture_output=True, text=True,
                              timeout=600)


@pytest.mark.slow  # seconds long (a trainer run or a process of its own): CI's long selection
def test_doctor_callback_stops_the_job_before_step_one():
    proc = run_script("grpo_with_callback.py", "--bad")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "DoctorStop: trl-doctor stopped the job before step 1: TD014 reward-functions" in proc.stdout
    assert "global_step=0" in proc.stdout
    assert "__main__.reward_labels" in proc.stderr  # the table, on stderr


@pytest.mark.slow
def test_doctor_callback_lets_a_healthy_job_train():
    proc = run_script("grpo_with_callback.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trained: global_step=1" in proc.stdout


# -- the trainer run on the script's own objects ------------------------------------------------------------------

@pytest.mark.slow
def test_smoke_step_runs_on_the_scripts_rewards_and_prompts():
    code, report = run_json("check", "--select", "smoke-step,eos-termination", "--",
                            "python", "grpo_system_prompt.py", "--config", "grpo_system_prompt.yaml")
    assert code == 0, report
    smoke = result_of(report, "smoke-step")
    assert smoke["status"] == "pass", smoke
    assert "__main__.accuracy_reward" in json.dumps(smoke["details"])


@pytest.mark.slow
def test_base_checkpoint_under_the_script_never_stops():
    code, report = run_json("check", "--no-smoke", "--select", "eos-termination", "--",
                            "python", "grpo_system_prompt.py", "--config", "grpo_system_prompt_base.yaml")
    eos = result_of(report, "eos-termination")
    assert code == 1 and eos["status"] == "fail" and "'<|im_end|>'" in eos["message"]


@pytest.mark.skipif(not trl_has("ppo"), reason="the installed TRL has no PPO trainer")
def test_ppo_example_builds_its_value_model_from_the_reward_model_path():
    args = ["python", "ppo_example.py", "--sft_model_path", "../models/qwen2-chat", "--reward_model_path",
            "../models/rm-qwen2", "--output_dir", "out/ppo", "--per_device_train_batch_size", "2",
            "--response_length", "16", "--stop_token", "eos", "--report_to", "none"]
    code, report = run_json("check", "--no-smoke", "--select", "value-model,pad-token,dataset-schema", "--", *args)
    assert code == 0, report
    assert report["trainer"] == "ppo"
    assert result_of(report, "value-model")["status"] == "pass"
    assert "tokenized by the script" in result_of(report, "dataset-schema")["message"]


@pytest.mark.slow
@pytest.mark.other_trl  # another TRL release from PyPI (real_trl)
def test_ppo_script_passing_the_policy_as_its_own_reference(built_fixtures):
    """Catalog F5: `PPOTrainer(model=policy, ref_model=policy)` stops at construction; the doctor says so before
    launch, and TRL's own example (a separately loaded reference) passes."""
    from conftest import real_trl

    env = {} if trl_has("ppo") else real_trl("1.12.0")
    common = ["--sft_model_path", "../models/qwen2-chat", "--reward_model_path", "../models/rm-qwen2",
              "--output_dir", "out/ppo", "--per_device_train_batch_size", "2", "--response_length", "16",
              "--stop_token", "eos", "--report_to", "none"]
    proc = run_doctor("check", "--no-smoke", "--select", "value-model", "--format", "json", "--",
                      "python", "ppo_same_ref.py", *common, cwd=LAUNCH, env=env)
    value = result_of(json.loads(proc.stdout), "value-model")
    assert proc.returncode == 1 and value["status"] == "fail", value
    assert "passes the policy itself as ref_model (" in value["message"] and "ppo_same_ref.py:" in value["message"]
    assert "cannot be the same object" in value["message"] and "ref_model=None" in value["fix"]["description"]
    proc = run_doctor("check", "--no-smoke", "--select", "value-model", "--format", "json", "--",
                      "python", "ppo_example.py", *common, cwd=LAUNCH, env=env)
    assert result_of(json.loads(proc.stdout), "value-model")["status"] == "pass"


def test_embeddings_resized_in_memory_while_vllm_loads_the_folder():
    """Catalog B7: the script grows the embeddings for its added tokens, vLLM starts from the folder's config.json;
    without vLLM the same script is fine."""
    code, report = run_json("check", "--no-smoke", "--select", "vllm-tokenizer-drift", "--", "python", "grpo_resized_vllm.py")
    drift = result_of(report, "vllm-tokenizer-drift")
    found = [drift["message"], *drift["details"].get("also", [])]
    resized = [m for m in found if "embedding rows" in m and "whose config.json says vocab_size" in m]
    assert code == 1 and drift["status"] == "fail" and resized, found
    assert "has 322 embedding rows (" in resized[0] and "vocab_size 320" in resized[0]
    assert "self.org_vocab_size" in resized[0] and "save_pretrained(DIR)" in resized[0]
    assert drift["details"]["vocab_size vLLM loads (config.json)"] == 320
    code, report = run_json("check", "--no-smoke", "--select", "vllm-tokenizer-drift", "--", "python",
                            "grpo_resized_vllm.py", "--no-vllm")
    assert code == 0 and result_of(report, "vllm-tokenizer-drift")["status"] in ("pass", "skip")


def test_python_dash_m_runs_the_module_from_the_current_folder():
    code, report = run_json("check", "--no-smoke", "--select", "reward-functions", "--", "python", "-m", "grpo_quickstart")
    assert code == 0, report
    assert report["launch"]["constructed_at"].endswith("grpo_quickstart.py:19")


@pytest.mark.slow
def test_fix_through_a_launch_command_edits_the_checkpoint_the_script_loads(tmp_path, monkeypatch):
    import shutil

    for part in ("launch", "data"):
        shutil.copytree(LAUNCH.parent / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "out"))
    shutil.copytree(LAUNCH.parent / "models" / "qwen2-base", tmp_path / "models" / "qwen2-base")
    monkeypatch.chdir(tmp_path / "launch")
    command = ["--", "python", "grpo_system_prompt.py", "--config", "grpo_system_prompt_base.yaml"]
    code, report = run_json("check", "--fix", "--no-smoke", "--select", "eos-termination", *command)
    assert code == 0, report
    assert result_of(report, "eos-termination")["status"] == "pass"
    # where the installed trainer ends the completion mask at the tokenizer's eos only (trl <= 1.12), the fix retargets
    # that eos too, so that generation and the mask end at the same token (docs/coverage.md B8)
    from trl_doctor.facts.trl.generation import mask_eos

    mask = mask_eos("grpo")
    model = tmp_path / "models" / "qwen2-base"
    files = ["generation_config.json"] + ([] if mask is not None and mask.kind == "all" else [
        f for f in ("tokenizer_config.json", "special_tokens_map.json") if (model / f).exists()])
    assert sorted(a["file"] for a in report["applied"]) == sorted(str(tmp_path / "models" / "qwen2-base" / f) for f in files)
    assert 2 in json.loads((tmp_path / "models" / "qwen2-base" / "generation_config.json").read_text())["eos_token_id"]


def test_a_multi_node_accelerate_launch_is_one_world_size_in_every_rule():
    """Issue 30, class 5: `accelerate launch --num_machines 4 --num_processes 32` (accelerate's num_processes counts
    every machine's) on machines of 8 H100s. batch-geometry counted 32 processes while gpu-capacity sharded ZeRO-3 over
    the 8 GPUs of one machine and the launch notes said --num_machines was not read; now the launch fact holds the
    machines, and every rule judges 32 processes, 8 per machine."""
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry,gpu-capacity,distributed-setup",
                            "--target", "8xH100-80GB", "--", "accelerate", "launch", "--config_file", "zero3_4gpu.yaml",
                            "--num_machines", "4", "--machine_rank", "0", "--num_processes", "32", "--main_process_ip",
                            "10.0.0.1", "--main_process_port", "29500", "grpo_quickstart.py")
    assert code == 0, report
    assert not any("--num_machines" in note for note in report["launch"]["notes"]), report["launch"]["notes"]
    capacity = result_of(report, "gpu-capacity")
    assert "with DeepSpeed ZeRO-3 over 32 processes" in capacity["message"], capacity["message"]
    assert capacity["details"]["machines"].startswith("4 (accelerate launch --num_machines 4): 32 training processes "
                                                      "in all"), capacity["details"]
    assert "8 per machine" in capacity["details"]["machines"]
    assert result_of(report, "batch-geometry")["message"].startswith("at 32 processes")
    assert result_of(report, "distributed-setup")["message"].startswith("32 training processes")


# TRL's docs' multi-node GRPO recipe (docs/source/grpo_trainer.md at huggingface/trl@f2cd57710): its srun line's
# accelerate launch, rank 0 of 4 machines of 8 GPUs, the SLURM variables given values
DOCS_MULTINODE = ("accelerate", "launch", "--config_file", "deepspeed_zero3.yaml", "--num_processes", "32",
                  "--num_machines", "4", "--main_process_ip", "10.0.0.1", "--machine_rank", "0", "--rdzv_backend", "c10d",
                  "grpo_multinode_docs.py")


def _docs_recipe_imports() -> bool:
    from importlib.util import find_spec

    return find_spec("trl.rewards") is not None  # the recipe's accuracy_reward (and vllm_mode) are TRL 1.x's


needs_recipes_trl = pytest.mark.skipif("not _docs_recipe_imports()", reason="the recipe imports trl.rewards, which this "
                                       "TRL lacks (the docs at f2cd57710 are TRL 1.x's)")


@needs_recipes_trl
def test_trls_multi_node_recipe_is_one_world_size_in_every_rule():
    """Issue 30, class 5, on public material: TRL's own multi-node recipe (fixtures/launch/grpo_multinode_docs.py).
    Before 7e32a0e, gpu-capacity sharded ZeRO-3 "over 8 processes" while batch-geometry counted 32, and the launch
    notes said `--num_machines 4` was not read (run on this fixture at 7e32a0e^); now every rule counts 32 processes on
    4 machines. The vLLM server of the recipe's fifth node is judged as another machine's (server mode)."""
    code, report = run_json("check", "--no-smoke", "--select", "batch-geometry,gpu-capacity,distributed-setup,vllm-server",
                            "--target", "8xH100-80GB", "--", *DOCS_MULTINODE, "--vllm_server_host", "ip-192-0-2-1")
    assert code == 0, report
    assert not any("--num_machines" in note for note in report["launch"]["notes"]), report["launch"]["notes"]
    capacity = result_of(report, "gpu-capacity")
    assert "with DeepSpeed ZeRO-3 over 32 processes" in capacity["message"], capacity["message"]
    assert capacity["details"]["machines"].startswith("4 (accelerate launch --num_machines 4): 32 training processes")
    assert result_of(report, "batch-geometry")["message"].startswith("at 32 processes")
    assert result_of(report, "distributed-setup")["message"].startswith("32 training processes")
    server = result_of(report, "vllm-server")
    assert server["details"]["vLLM mode"].startswith("server") and server["details"]["server host"] == "another machine"


@needs_recipes_trl
def test_trls_multi_node_recipe_as_written_stops_at_its_own_argument():
    """The docs' launch line passes `--server_ip` to a script that declares `--vllm_server_host`: argparse stops it
    before any trainer, and the exit-2 line says so at the script's own line, as the job would on every node."""
    proc = run_doctor("check", "--no-smoke", "--", *DOCS_MULTINODE, "--server_ip", "ip-10-0-0-5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "grpo_multinode_docs.py exited with status 2 before constructing a TRL trainer" in line, line
    assert "unrecognized arguments: --server_ip ip-10-0-0-5" in line and "grpo_multinode_docs.py:30" in line, line


def test_torchrun_over_nodes_counts_every_node():
    code, report = run_json("check", "--no-smoke", "--select", "gpu-capacity", "--target", "8xH100-80GB", "--",
                            "torchrun", "--nnodes", "2", "--nproc_per_node", "8", "grpo_quickstart.py")
    capacity = result_of(report, "gpu-capacity")
    assert capacity["details"]["machines"].startswith("2 (torchrun --nnodes 2): 16 training processes in all"), capacity

def test_what_the_script_creates_in_the_working_directory_is_held_and_said(tmp_path, tmp_path_factory):
    """Issue 30, class 9, and issue 58: the script the capture runs writes a log of its prompts into the working
    directory, its arguments into the --output_dir its command line names, elsewhere, and an event file into the
    logging_dir its recipe names (a third folder, named only inside the YAML), before it builds its trainer. The report names both and nothing that was there before; where the system allows a mount namespace both
    folders are held (trl_doctor/runtime/hold.py) and no write reaches them. TRL_DOCTOR_HOLD=0 is the control:
    the files are written and left in place."""
    from trl_doctor.runtime import netns

    runs = tmp_path_factory.mktemp("runs")
    source = (LAUNCH / "grpo_quickstart.py").read_text()
    source = source.replace('"../models/qwen2-chat"', repr(str(LAUNCH.parent / "models" / "qwen2-chat")))
    source = source.replace('"../data/chat_many.jsonl"', repr(str(LAUNCH.parent / "data" / "chat_many.jsonl")))
    source = source.replace("\n\ndef reward_len", "\nimport os, sys\nos.makedirs('prompt_logs', exist_ok=True)\n"
                            "open('prompt_logs/prompts.txt', 'w').write(str(dataset[0]))\n"
                            "out = sys.argv[sys.argv.index('--output_dir') + 1]\nos.makedirs(out, exist_ok=True)\n"
                            "open(os.path.join(out, 'args.json'), 'w').write('{}')\n"
                            "import yaml\nlogs = yaml.safe_load(open(sys.argv[sys.argv.index('--config') + 1]))"
                            "['logging_dir']\nos.makedirs(logs, exist_ok=True)\n"
                            "open(os.path.join(logs, 'events.out'), 'w').write('')\n\n\ndef reward_len")
    (tmp_path / "train.py").write_text(source)
    logs = tmp_path_factory.mktemp("logs")  # named only inside the recipe
    (tmp_path / "recipe.yaml").write_text(f"logging_dir: {logs / 'tb'}\nreport_to: none\n")
    (tmp_path / "notes.txt").write_text("here before the check\n")
    model = str(LAUNCH.parent / "models" / "qwen2-chat")  # the quickstart's first argument
    check = ("check", "--no-smoke", "--select", "pad-token", "--format", "json", "--", "python", "train.py", model,
             "--output_dir", str(runs / "run1"), "--config", "recipe.yaml")
    held = netns.probe().namespace  # the same user namespace makes the mount namespace
    for env, where in (({}, "held in the check's own layer, gone with it: not written into your folder"
                        if held else "left in place"), ({"TRL_DOCTOR_HOLD": "0"}, "left in place")):
        proc = run_doctor(*check, cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        notes = json.loads(proc.stdout)["launch"]["notes"]
        created = [note for note in notes if "created" in note]
        here = [f"{tmp_path / 'prompt_logs'}/"] + (sorted([f"{runs / 'run1'}/", f"{logs / 'tb'}/"])
                                                    if where != "left in place" else [])
        assert created == [f"the launch command's script created {', '.join(here)} ({where})"], notes
        assert (tmp_path / "prompt_logs" / "prompts.txt").exists() == (where == "left in place")
        assert (runs / "run1" / "args.json").exists() == (where == "left in place")
        assert (logs / "tb" / "events.out").exists() == (where == "left in place")
    assert (tmp_path / "notes.txt").read_text() == "here before the check\n"


def test_a_helper_script_the_job_runs_as_a_child_is_not_taken_for_the_job(tmp_path):
    """A script that runs `python prepare.py` (a data step) before building its trainer: that child runs as it
    would, and the script goes on to the trainer the rules judge (only distributed launchers and the running
    package's own re-launch are followed in place)."""
    (tmp_path / "prepare.py").write_text("open('prepared.txt', 'w').write('ok')\n")
    script = tmp_path / "train_after_prepare.py"
    script.write_text("import os, runpy, subprocess, sys\n"
                      f"subprocess.run([sys.executable, 'prepare.py'], cwd={str(tmp_path)!r}, check=True)\n"
                      "sys.argv = ['grpo_quickstart.py']\n"
                      f"runpy.run_path({str(LAUNCH / 'grpo_quickstart.py')!r}, run_name='__main__')\n")
    code, report = run_json("check", "--no-smoke", "--", "python", str(script))
    assert report["launch"]["trainer_class"].endswith("GRPOTrainer"), report["launch"]
    assert not any("re-launched" in n for n in report["launch"]["notes"])


# -- issue 46: the smoke step runs the trainer the script built: its tools --------------------------------------------

def _tools_trl() -> bool:
    import inspect

    from trl import GRPOTrainer

    return "tools" in inspect.signature(GRPOTrainer.__init__).parameters


@pytest.mark.slow
@pytest.mark.skipif("not _tools_trl()", reason="the installed TRL's GRPOTrainer takes no tools (trl >= 1.x does)")
@pytest.mark.parametrize("template, words", [
    (None, "does not support tool calling"),  # qwen2-chat's own template reads only message['content']
    ("tools/custom_tools.jinja", "failed to add response schema"),  # renders tool calls, but no template TRL knows
    ("tools/qwen2_5.jinja", None),  # Qwen2.5's, as TRL ships it: the job trains
])
def test_the_scripts_tools_reach_the_step_and_trls_tool_checks(template, words):
    """grpo_tools.py passes `tools=[multiply]`; the real script (use_cpu, one step) raised these same ValueErrors at
    GRPOTrainer(...) and trained with Qwen2.5's template. Before, the step dropped the tools and passed all three."""
    code, report = run_json("check", "--select", "smoke-step", "--", "python", "grpo_tools.py", "../models/qwen2-chat",
                            *([template] if template else []))
    smoke = result_of(report, "smoke-step")
    if words is None:
        assert code == 0 and smoke["status"] == "pass", smoke
        return
    assert code == 1 and smoke["status"] == "fail" and words in smoke["message"], smoke
    assert "trainer init" in smoke["message"], smoke


@pytest.mark.slow
@pytest.mark.skipif("not _tools_trl()", reason="the installed TRL's GRPOTrainer takes no environment_factory")
@pytest.mark.parametrize("rows, status", [("tools/env_rows.jsonl", "pass"), ("tools/env_rows_unknown.jsonl", "fail")])
def test_a_row_naming_an_environment_the_factory_lacks_fails_before_the_step_that_reaches_it(rows, status):
    """grpo_environments.py passes environment_factory={"counter": ..., "echo": ...}; the real script (use_cpu, 8 steps)
    trained on env_rows.jsonl and raised "Example has `environment='calculator'`, which is not among the environments
    passed to `environment_factory`" on env_rows_unknown.jsonl (its row 6). The step, on the first rows, trains."""
    code, report = run_json("check", "--select", "smoke-step,dataset-schema", "--", "python", "grpo_environments.py", rows)
    schema, smoke = result_of(report, "dataset-schema"), result_of(report, "smoke-step")
    assert smoke["status"] == "pass", smoke  # the environments reached the trainer: TRL probed each one's reset
    assert schema["status"] == status and code == (0 if status == "pass" else 1), schema
    assert schema["details"]["environments"] == ["counter", "echo"]
    if status == "fail":
        assert "'calculator'" in schema["message"] and "first at row 6" in schema["message"], schema


@pytest.mark.skipif("not _tools_trl()", reason="the installed TRL's GRPOTrainer takes no environment_factory")
def test_trls_2048_example_whose_reward_reads_the_environments_is_not_failed():
    """TRL's examples/scripts/grpo_2048.py (f2cd577, fixtures/launch/grpo_2048_example.py): its reward is
    `reward_score(environments, **kwargs)`, and TRL passes `environments=` (one instance per completion) to every
    reward function of a job with an environment_factory. dataset-schema and reward-functions failed it ("takes
    `environments` without a default, but the dataset has no such column"), a false alarm the accuracy harness found
    (TRL trains it). Now the reward is called as TRL calls it, with environments built and reset as TRL does."""
    code, report = run_json("check", "--no-smoke", "--select", "dataset-schema,reward-functions", "--", "python",
                            "grpo_2048_example.py")
    schema, rewards = result_of(report, "dataset-schema"), result_of(report, "reward-functions")
    assert code == 0 and schema["status"] == "pass" and rewards["status"] == "pass", (schema, rewards)
    assert "environments=" in rewards["details"]["arguments passed"], rewards["details"]
    assert rewards["details"]["reward __main__.reward_score"] == [0.0, 0.0, 0.0, 0.0]  # each game's score after reset
    assert "environments" in schema["details"]["TRL passes reward functions"], schema["details"]


def test_trl_grpos_dtype_reaches_the_model_where_trl_refuses_the_batch(built_fixtures, tmp_path):
    """The GPU verdicts' `num_generations: 3` launch (docs/gpu-verdicts.json): TRL's `trl grpo` sets the config's
    model_init_kwargs from ModelConfig after building it, and the doctor read them from the config it rebuilds, which
    TRL refuses for the batch: it warned that `dtype: bfloat16` never reaches the model. The script's own config
    object holds them."""
    from trl_doctor.facts.trl.installed import trl_root

    script = (trl_root() or Path()) / "scripts" / "grpo.py"
    source = script.read_text() if script.is_file() else ""
    if not all(w in source for w in ("training_args.model_init_kwargs", "reward_funcs", "get_dataset")):
        pytest.skip("the installed TRL's `trl grpo` takes no reward_funcs or dataset mixture, or does not set "
                    "model_init_kwargs itself (trl < 0.2x)")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model_name_or_path: {LAUNCH.parent / 'models' / 'qwen2-chat'}\n"
                      f"datasets: [{{path: json, data_files: {LAUNCH.parent / 'data' / 'chat.jsonl'}, split: train}}]\n"
                      "reward_funcs: [think_format_reward]\nnum_generations: 3\nper_device_train_batch_size: 8\n"
                      "max_completion_length: 16\ndtype: bfloat16\nreport_to: none\noutput_dir: out\n")
    proc = run_doctor("check", "--no-smoke", "--select", "precision-and-attention,batch-geometry", "--format", "json",
                      "--", "trl", "grpo", "--config", str(recipe), cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert result_of(report, "batch-geometry")["status"] == "fail"
    precision = result_of(report, "precision-and-attention")
    assert precision["status"] == "pass", precision["message"]
    assert "ModelConfig keys that do not reach the model" not in precision["details"], precision["details"]
