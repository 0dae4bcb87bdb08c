"""Issue 42's audit test: checks of the fixtures, of the launch-command recipes and of TRL's multi-node recipe run
under a PEP 578 audit hook (tests/netaudit/sitecustomize.py, written apart from the doctor's own guard) in the
printing process, the worker and every process they start; any connect or name look-up outside 127.0.0.0/8, ::1
and `localhost` that the command line did not allow fails the test, with the process and its command line.

Each run here writes to a log of its own (the whole session writes to another one: tests/conftest.py). Runs that
allow a host, and a script that reaches for one, are in tests/test_network.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import FIXTURES, NET_AUDIT, NET_AUDIT_ENV, run_doctor

pytestmark = pytest.mark.pinned_releases  # every lane that runs a TRL release runs it (the trl017 and trl024 ones too)

LAUNCH = FIXTURES / "launch"
# TRL's multi-node GRPO recipe (fixtures/launch/grpo_multinode_docs.py; tests/test_launch.py keeps its launch line):
# its vLLM server is the fifth node, ip-192-0-2-1 becoming 192.0.2.1 in the script
MULTINODE = ("accelerate", "launch", "--config_file", "deepspeed_zero3.yaml", "--num_processes", "32",
             "--num_machines", "4", "--main_process_ip", "10.0.0.1", "--machine_rank", "0", "--rdzv_backend", "c10d",
             "grpo_multinode_docs.py", "--vllm_server_host", "ip-192-0-2-1")


def audited(tmp_path: Path, *args: str, cwd: Path | None = None) -> tuple[object, list[str]]:
    """(the finished `trl-doctor` process, the audit's lines) of one run in a fresh process with a log of its own."""
    log = tmp_path / f"audit-{len(list(tmp_path.glob('audit-*')))}.log"
    log.touch()
    env = {NET_AUDIT_ENV: str(log),
           "PYTHONPATH": os.pathsep.join([str(NET_AUDIT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = run_doctor(*args, cwd=cwd or FIXTURES, env=env)
    return proc, log.read_text(encoding="utf-8").splitlines()


def _configs() -> list[str]:
    return sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*") if p.suffix in (".yaml", ".yml", ".json")
                  and p.name != "expected.yaml" and p.parent.name not in ("models", "data", "watch", "gpus"))


def _names_a_server(path: str) -> bool:
    return any(key in (FIXTURES / path).read_text(encoding="utf-8", errors="replace")
               for key in ("vllm_server", "use_vllm"))


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_the_fixture_sweep_contacts_nothing(built_fixtures, tmp_path):
    """Every fixture config, --static (the CI gate, in the printing process), then those that name a vLLM server or
    use vLLM in full checks of the rules that read a host (the worker: 10.0.0.2, vllm-node.invalid, local servers that
    are down). Every rule's full check of every fixture runs under the session's own audit (tests/conftest.py) in the
    lanes that run tests/test_fixture_cases.py."""
    configs = _configs()
    assert len(configs) > 200, len(configs)
    proc, lines = audited(tmp_path, "check", "--static", "--format", "json", *configs)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines == [], "\n".join(lines)
    served = [c for c in configs if _names_a_server(c)]
    assert len(served) >= 30, served
    proc, lines = audited(tmp_path, "check", "--no-smoke", "--format", "json", "--select",
                          "vllm-server,gpu-capacity,vllm-weights,distributed-setup,version-skew", *served)
    assert proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert '"vllm-server"' in proc.stdout
    assert lines == [], "\n".join(lines)


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_launch_recipes_and_the_multi_node_recipe_contact_nothing(built_fixtures, tmp_path):
    """The launch commands of tests/test_launch.py's recipes, and TRL's multi-node recipe with its server node: the
    script runs in the worker, the rules judge the server it names (another machine: not contacted)."""
    from importlib.util import find_spec

    commands = [("python", "grpo_quickstart.py"),
                ("accelerate", "launch", "--config_file", "zero3_4gpu.yaml", "grpo_quickstart.py"),
                ("trl", "grpo", "--config", "trl_grpo_mixture.yaml"),
                ("python", "grpo_resized_vllm.py")]
    if find_spec("trl.rewards") is not None:  # the recipe imports trl.rewards (TRL 1.x)
        commands.append(MULTINODE)
    for command in commands:
        proc, lines = audited(tmp_path, "check", "--no-smoke", "--target", "8xH100-80GB", "--format", "json", "--",
                              *command, cwd=LAUNCH)
        # an older TRL may stop a recipe written for a newer one (exit 2, one line): the audit still holds
        assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
        assert proc.returncode != 2 or command[1] != "grpo_quickstart.py", proc.stderr[-2000:]  # TRL's quickstart runs
        assert lines == [], (command, "\n".join(lines))
        if command is MULTINODE:
            assert "http://192.0.2.1:8000 is on another machine" in proc.stdout, proc.stdout[-3000:]


def test_the_audit_sees_a_look_up(tmp_path):
    """The audit is not blind: a process that looks up another machine's name is logged."""
    import subprocess
    import sys

    log = tmp_path / "audit.log"
    log.touch()
    env = {**os.environ, NET_AUDIT_ENV: str(log),
           "PYTHONPATH": os.pathsep.join([str(NET_AUDIT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    subprocess.run([sys.executable, "-c", "import socket\ntry:\n socket.getaddrinfo('vllm-node.invalid', 80)\n"
                    "except OSError:\n pass"], env=env, check=True, timeout=60)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "socket.getaddrinfo 'vllm-node.invalid'" in lines[0], lines
