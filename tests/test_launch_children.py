"""Every process of the launch (issue 58, class 1): while `check -- LAUNCH` runs a launch, each Python process it
starts is a scout (trl_doctor/capture/children.py, child.py) that stops at the first trainer constructor or optimizer
step it reaches, whatever started it; the process that built the trainer is run in the doctor's place.

The framework-shaped CLIs are fixtures/launch/framework/site/minifw (an installed console script, as ms-swift's
`swift` is): `minifw rlhf` starts `python <package>/rlhf.py CONFIG` (ms-swift 4.6.0's swift/cli/main.py, cli_main), with
NPROC_PER_NODE `python -m torch.distributed.run ...`; `minifw sh` a shell script step whose `python`, or `torchrun`
with NPROC_PER_NODE, trains. Run for real (tested below) the child trains and writes checkpoints into the user's
folder; under the doctor nothing is trained or written. The mechanism itself is tested in this process first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import result_of, run_doctor
from trl_doctor.capture.children import Children, ScoutStopped
from trl_doctor.capture.command import parse_command

FRAMEWORK = Path(__file__).resolve().parent.parent / "fixtures" / "launch" / "framework"
# what a scout captures is decided by Python's start-up and the trainer classes it stops at, not by vLLM: the vLLM lane
# (the default lane's TRL, another transformers 5.x) leaves these out (its launches took 162 s of its 479); the legacy
# lane, another TRL / transformers pair, runs them
pytestmark = pytest.mark.trl_pair


def _scouts(**kw) -> Children:
    return Children(load_weights=False, has_cuda=False, trust_remote_code=False, **kw)


LOOP = textwrap.dedent("""
    import sys, torch
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2)).sum().backward()
    optimizer.step()
    open(sys.argv[1], "w").write("stepped")
""")


@pytest.mark.parametrize("env", [None, "own"], ids=["inherited", "given"])
def test_a_child_that_steps_an_optimizer_is_stopped_before_the_step(tmp_path, env):
    """A child's own training loop (torch only, no trainer) stops at its first optimizer step, whether it inherits the
    environment or is given one of its own; the wait for it ends the script there (ScoutStopped)."""
    script, marker = tmp_path / "loop.py", tmp_path / "STEPPED"
    script.write_text(LOOP)
    given = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)} if env else None
    with _scouts() as children, pytest.raises(ScoutStopped) as stopped:
        subprocess.run([sys.executable, str(script), str(marker)], env=given, check=False)
    report = stopped.value.report
    assert report.event == "step" and report.optimizer == "SGD"
    assert report.where == (str(script), 6)
    assert not marker.exists()
    assert children.stepped() == report and children.channel is not None and not children.channel.exists()


def test_a_child_that_fails_says_why(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import json\n\ndef load(path):\n    return json.load(open(path))\n\nload('missing.json')\n")
    with _scouts() as children:
        code = subprocess.run([sys.executable, str(script)], capture_output=True).returncode
    assert code == 1
    failure = children.failure()
    assert failure is not None and failure.error["type"] == "FileNotFoundError"
    assert failure.error_words().startswith("FileNotFoundError: [Errno 2] No such file or directory: 'missing.json'")
    assert f"at {script}:4" in failure.error_words()


def test_a_child_that_does_not_train_runs_as_it_would(tmp_path):
    """A data-preparation step (no trainer, no step) runs to its end and its output is its own."""
    with _scouts() as children:
        out = subprocess.run([sys.executable, "-c", "import json; print(json.dumps({'rows': 3}))"],
                             capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"rows": 3} and children.reports() == []


def test_ending_the_scouts_reaps_them_without_stopping_the_doctor():
    """Once a scout has reached a trainer, the doctor ends the others and reaps those that are its own children
    (os.waitpid, hooked while the launch runs): its own wait must not stop like the launch's (CI at 46b1cd5: the
    hand-over failed with "ScoutStopped" when a launcher scout was the doctor's direct child)."""
    with _scouts() as children:
        assert children.channel is not None
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        (children.channel / "trainer-1-1.json").write_text(json.dumps({
            "version": 1, "event": "trainer", "pid": 1, "ppid": 0, "time": 0.0, "argv": ["python", "x.py"],
            "cwd": "/", "env": {}, "trainer": "trl.GRPOTrainer"}))
        assert children.decided() is not None
        ended = children.end_scouts()
        assert sleeper.pid in ended
        with pytest.raises(ScoutStopped):  # the launch's own wait still stops there
            sleeper.wait(timeout=10)


def test_the_environment_is_the_scripts_again_afterwards():
    before = dict(os.environ)
    with _scouts():
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0].endswith(os.path.join("data", "boot"))
    assert dict(os.environ) == before


def test_launchers_run_as_modules_are_the_launchers_themselves():
    """ms-swift starts `python -m torch.distributed.run ...`: torchrun, parsed by torchrun's own parser."""
    command = parse_command(("python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "x.py"), "/tmp")
    assert command.launcher == "torchrun" and command.argv[0] == "torchrun"
    command = parse_command(("python3", "-m", "accelerate.commands.launch", "train.py"), "/tmp")
    assert command.launcher == "accelerate" and command.argv[:2] == ("accelerate", "launch")


# -- the real command, on framework-shaped CLIs ------------------------------------------------------------------

def _site_packages() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


def _framework(*args: str, nproc: str | None = None, flags: str | None = None):
    # a child started with -S reads no site-packages: it imports TRL from PYTHONPATH, as such a launch must
    site = [_site_packages()] if flags == "-S" else []
    env = {"PYTHONPATH": os.pathsep.join([str(FRAMEWORK / "site"), *site]), "HF_HUB_OFFLINE": "1"}
    if nproc:
        env["NPROC_PER_NODE"] = nproc
    if flags:
        env["MINIFW_PYTHON_FLAGS"] = flags
    return run_doctor("check", "--no-smoke", "--select", "batch-geometry,reward-functions", "--format", "json",
                      "--", "minifw", *args, cwd=FRAMEWORK, env=env)


def _processes_naming(word: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if word in cmd:
            found.append(cmd)
    return found


@pytest.fixture
def case(request):
    """grpo_rlhf.yaml as a config of this test's own (its own output folder: the cases run side by side), removed
    afterwards; then nothing was written into the output folder and no process of the launch is left."""
    import shutil

    name = f"_case_{request.node.name.translate(str.maketrans('[]-/', '____'))}"
    config, out = FRAMEWORK / f"{name}.yaml", FRAMEWORK / f"out{name}"
    config.write_text((FRAMEWORK / "grpo_rlhf.yaml").read_text().replace("output_dir: out_rlhf", f"output_dir: {out.name}"))
    shutil.rmtree(out, ignore_errors=True)
    try:
        yield config
        assert not out.exists(), sorted(p.name for p in out.iterdir())
        assert _processes_naming(config.name) == []
    finally:
        config.unlink()
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.usefixtures("built_fixtures")
@pytest.mark.parametrize("flags", ["-I", "-E"])
def test_a_child_started_isolated_is_a_scout_too(case, flags):
    """`python -I <package>/rlhf.py` (or -E) ignores PYTHONPATH, so the boot folder there: the .pth the worker puts
    in its own layer over site-packages (trl_doctor/runtime/hold.py: seed_site) makes it a scout all the same. It
    stops at the trainer's constructor and is run in the doctor's place; the .pth is named nowhere as the launch's."""
    from trl_doctor.runtime import netns

    if not netns.probe().namespace:
        pytest.skip("no user namespace here: site-packages cannot be held, an isolated child is not scouted")
    proc = _framework("rlhf", case.name, flags=flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["launch"]["constructed_at"].endswith("minifw/train.py:35"), report["launch"]
    (note,) = [n for n in report["launch"]["notes"] if "a process minifw started" in n]
    assert "stopped there, before any training, and run here in its place" in note
    assert not any("trl-doctor-scout" in n for n in report["launch"]["notes"]), report["launch"]["notes"]


@pytest.mark.usefixtures("built_fixtures")
def test_a_child_no_scout_runs_in_is_stopped_before_it_trains_and_named(case):
    """`python -S <package>/rlhf.py` with site-packages on PYTHONPATH runs neither the boot folder's sitecustomize
    nor a .pth (no site module), and trains when its user runs it (the ground truth below writes checkpoint-1 and 2).
    The backstop (trl_doctor/capture/unscouted.py) stops it seconds after its start, before its imports are done,
    and the launch ends naming it; nothing is written and no process is left (the `case` fixture)."""
    proc = _framework("rlhf", case.name, flags="-S")
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "NotScouted: it was started with -S" in proc.stderr and "stopped before it could train" in proc.stderr
    assert f"-S {FRAMEWORK / 'site' / 'minifw' / 'rlhf.py'} {case.name}" in proc.stderr, proc.stderr


def test_the_interpreter_flags_before_the_script_are_read_as_the_interpreter_reads_them():
    from trl_doctor.capture.unscouted import _flags

    assert _flags(["-S", "x.py", "-I"]) == {"S"}
    assert _flags(["-IS", "-W", "ignore", "-X", "dev", "x.py"]) == {"I", "S"}
    assert _flags(["-m", "torch.distributed.run", "-S"]) == set()
    assert _flags(["-c", "print(1)"]) == set() and _flags(["x.py"]) == set()


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.usefixtures("built_fixtures")
def test_what_a_framework_writes_before_its_trainer_is_held_away_from_the_users_folder(tmp_path):
    """minifw, as ms-swift does, writes its run's arguments (out/args.json) before it builds the trainer. Under the
    doctor the working directory is held (trl_doctor/runtime/hold.py): the framework's child writes into the check's
    own layer, the note says so, and the user's folder has no output folder afterwards; with TRL_DOCTOR_HOLD=0 (the
    control) the same run leaves out/args.json behind, as the note then says."""
    import shutil

    from trl_doctor.runtime import netns

    if not netns.probe().namespace:
        pytest.skip("no user namespace here, so no folder is held (the report says 'left in place')")
    work = tmp_path / "fw"
    shutil.copytree(FRAMEWORK, work, ignore=shutil.ignore_patterns("out*", "_case_*"))
    config = (work / "grpo_rlhf.yaml")
    config.write_text(config.read_text().replace("base_model: ../../", f"base_model: {FRAMEWORK.parent.parent}/")
                      .replace("datasets: ../../", f"datasets: {FRAMEWORK.parent.parent}/"))
    env = {"PYTHONPATH": str(work / "site"), "HF_HUB_OFFLINE": "1"}
    check = ("check", "--no-smoke", "--select", "batch-geometry", "--format", "json", "--", "minifw", "rlhf",
             "grpo_rlhf.yaml")
    for extra, held in (({}, True), ({"TRL_DOCTOR_HOLD": "0"}, False)):
        proc = run_doctor(*check, cwd=work, env={**env, **extra})
        assert proc.returncode == 0, proc.stderr[-3000:]
        notes = json.loads(proc.stdout)["launch"]["notes"]
        (created,) = [n for n in notes if "created" in n]
        assert f"{work / 'out_rlhf'}/" in created, notes
        assert ("held in the check's own layer" in created) == held and ("left in place" in created) != held
        assert (work / "out_rlhf" / "args.json").exists() != held


@pytest.mark.usefixtures("built_fixtures")
@pytest.mark.parametrize("shape, nproc, ranks", [("rlhf", None, 1), ("sh", None, 1), ("sh", "2", 2)],
                         ids=["python-package-file", "shell-step", "shell-step-torchrun"])
@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_framework_child_that_would_train_is_captured_and_never_trains(case, shape, nproc, ranks):
    """Run as its user runs it, `minifw rlhf|sh grpo_rlhf.yaml` trains and writes out_rlhf/checkpoint-*; under the
    doctor the process that builds GRPOTrainer (a package file, a shell step's python, each torchrun rank) stops at
    the trainer's constructor and is run in the doctor's place, at the launch's process count."""
    proc = _framework(shape, case.name, nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["trainer"] == "grpo" and report["launch"]["constructed_at"].endswith("minifw/train.py:35")
    (note,) = [n for n in report["launch"]["notes"] if "a process minifw started" in n]
    assert f"rlhf.py {case.name}" in note and "stopped there, before any training, and run here in its place" in note
    assert result_of(report, "batch-geometry")["status"] == "pass"
    assert f"at {ranks} process" in result_of(report, "batch-geometry")["message"]


@pytest.mark.usefixtures("built_fixtures")
def test_a_launcher_run_as_a_module_in_a_child_is_followed_as_that_launcher(case):
    proc = _framework("rlhf", case.name, nproc="2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert any("re-launched itself as `torchrun --nproc_per_node 2" in n for n in report["launch"]["notes"])
    assert "at 2 processes" in result_of(report, "batch-geometry")["message"]


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.usefixtures("built_fixtures")
@pytest.mark.parametrize("shape", ["rlhf", "sh"])
def test_a_child_that_dies_before_its_trainer_is_named_with_its_exception(case, shape):
    case.write_text(case.read_text().replace("qwen2-chat", "no-such-model"))
    proc = _framework(shape, case.name)
    assert proc.returncode == 2
    assert "minifw exited with status 1 before constructing a TRL trainer: its child process" in proc.stderr
    assert f"minifw/rlhf.py {case.name}" in proc.stderr and "no-such-model" in proc.stderr
    assert "minifw/train.py:36" in proc.stderr


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
@pytest.mark.usefixtures("built_fixtures")
@pytest.mark.parametrize("flags", ["", "-S"])
def test_the_child_trains_when_run_as_its_user_runs_it(tmp_path, flags):
    """The ground truth of the cases above: without the doctor, `minifw rlhf` trains and writes its checkpoints (its
    child started with -S too, site-packages on PYTHONPATH). Recorded (tests/truths.py): it is the releases' behaviour
    on the framework fixture's files, run again wherever any of them changes."""
    import shutil

    from truths import truth_run

    name = f"truth{flags.strip('-')}"  # each its own config and output folder: the two may run side by side
    config, out = FRAMEWORK / f"_{name}.yaml", FRAMEWORK / f"out_{name}"
    text = (FRAMEWORK / "grpo_rlhf.yaml").read_text()
    config.write_text(text.replace("output_dir: out_rlhf", f"output_dir: {out.name}"))
    shutil.rmtree(out, ignore_errors=True)
    path = [str(FRAMEWORK / "site"), *([_site_packages()] if flags else [])]
    env = {"PYTHONPATH": os.pathsep.join(path), "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path),
           "MINIFW_PYTHON_FLAGS": flags}
    try:
        ran = truth_run(f"launch_children/minifw-rlhf{flags}", [sys.executable, "-c", "import sys; from minifw.cli "
                        "import main; sys.exit(main())", "rlhf", config.name], FRAMEWORK,
                        reads=("fixtures/launch/framework", "fixtures/data/chat.jsonl"), env=env, tmp=tmp_path,
                        files_under=out)
        assert ran.returncode == 0, (ran.recorded, ran.stderr[-3000:])
        assert {"TRAINED", "checkpoint-1", "checkpoint-2"} <= set(ran.files), (ran.recorded, ran.files)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        config.unlink()


def test_a_script_s_own_training_loop_is_stopped_before_its_first_step(tmp_path):
    """In the worker too: a launch whose script steps an optimizer without any trainer (a loop of its own) is stopped
    before the step, in one line that names the optimizer and the line, and nothing it writes after the step exists."""
    script, marker = tmp_path / "loop.py", tmp_path / "STEPPED"
    script.write_text(LOOP)
    proc = run_doctor("check", "--", "python", str(script), str(marker))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"loop.py reached an optimizer step (SGD.step() at {script}:6) without constructing a TRL trainer" \
        in proc.stderr, proc.stderr
    assert not marker.exists()
