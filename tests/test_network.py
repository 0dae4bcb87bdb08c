"""Issue 42: the doctor contacts this machine only, unless the command line (--allow-host) or the project's config
(allow-hosts) names another host. What is this machine is answered without a name look-up; the worker's guard refuses
any other connect or look-up, the user's code's included, and the report says what was not contacted.

"Another machine" here is an address of a private network namespace's local route (`unshare -rn`, `ip route add
local 10.254.0.0/24 dev lo`): it answers on this machine's loopback device, but no interface holds it, so to the
doctor it is another machine, and nothing leaves the namespace."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURES, NET_AUDIT_ENV, result_of, run_doctor, run_json

from trl_doctor.runtime import network

REMOTE = "198.51.100.7"  # TEST-NET-2: an address no machine of ours holds


def test_this_machine_is_answered_without_a_look_up():
    for host in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "::ffff:127.0.0.1", "0.0.0.0", "::", "", "localhost",
                 "LOCALHOST", "api.localhost"):
        assert network.this_machine(host), host
    for address in network.own_addresses():  # the interfaces' own addresses, read from /proc
        assert network.this_machine(address), address
    import socket

    assert network.this_machine(socket.gethostname())
    assert REMOTE not in network.own_addresses()
    for host in (REMOTE, "ip-192-0-2-1", "gpu-node-5", "vllm.internal.example"):
        assert not network.this_machine(host), host


def test_allowed_hosts_parse_as_the_command_line_takes_them():
    parse = network.parse_host
    assert str(parse("gpu-node-5")) == "gpu-node-5"
    assert str(parse("10.0.0.2:8000")) == "10.0.0.2:8000"
    assert str(parse("[FD00::2]:8000")) == "[fd00::2]:8000"
    assert str(parse("fd00::2")) == "[fd00::2]"
    assert str(parse("http://10.0.0.2:8000/v1")) == "10.0.0.2:8000"
    for bad in ("", "a b", "node:port", "x/y", "user@host"):
        with pytest.raises(ValueError):
            parse(bad)
    # issue 59: urlsplit drops a newline or a tab, so 'a\nb' was taken as 'ab'; a right-to-left override or a
    # zero-width space hides what the host is: each is refused, named by its code point
    for bad, code in (("a\nb", "U+000A"), ("a\tb:80", "U+0009"), ("evil\u202e.localhost", "U+202E"),
                      ("node\u200b-5", "U+200B")):
        with pytest.raises(ValueError, match=re.escape(code)):
            parse(bad)
    allowed = network.parse_hosts(["gpu-node-5", "10.0.0.2:8000", "10.0.0.2:8000"])
    assert len(allowed) == 2
    assert network.allowed_entry(allowed, "GPU-NODE-5", 1234) is not None  # no port: any port
    assert network.allowed_entry(allowed, "10.0.0.2", 8000) is not None
    assert network.allowed_entry(allowed, "10.0.0.2", 8001) is None


GUARD = textwrap.dedent("""
    import json, socket, sys
    from trl_doctor.runtime import network
    network.guard(network.parse_hosts(sys.argv[1:]))
    out = {}
    listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen()
    for name, call in [
        ("loopback", lambda: socket.create_connection(listener.getsockname(), timeout=2).close()),
        ("remote", lambda: socket.create_connection(("%s", 80), timeout=0.2)),
        ("name", lambda: socket.getaddrinfo("vllm.internal.example", 8000)),
        ("byname", lambda: socket.gethostbyname("vllm.internal.example")),
        ("unix", lambda: socket.socket(socket.AF_UNIX).connect("/nonexistent/socket")),
    ]:
        try:
            call()
            out[name] = "ok"
        except Exception as exc:
            out[name] = type(exc).__name__
    out["refused"] = [r.words() for r in network.take_refused()]
    print(json.dumps(out))
""" % REMOTE)


def _guarded(*allowed: str) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k != NET_AUDIT_ENV}  # it reaches for another machine on purpose
    proc = subprocess.run([sys.executable, "-c", GUARD, *allowed], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_guard_refuses_other_machines_and_names_them():
    out = _guarded()
    assert out["loopback"] == "ok" and out["unix"] == "FileNotFoundError"  # this machine's sockets go through
    assert out["remote"] == "RefusedLookup" and out["name"] == "RefusedLookup" and out["byname"] == "RefusedLookup"
    assert out["refused"] == [f"a connection to {REMOTE}:80", "a look-up of vllm.internal.example:8000",
                              "a look-up of vllm.internal.example"], out["refused"]


def test_the_guard_lets_an_allowed_host_through():
    out = _guarded(f"{REMOTE}:80")
    assert out["remote"] != "RefusedLookup" and out["remote"] != "RefusedConnection", out
    assert out["refused"] == ["a look-up of vllm.internal.example:8000", "a look-up of vllm.internal.example"]


def test_a_malformed_allowed_host_is_one_line(built_fixtures, tmp_path):
    config = FIXTURES / "pad-token" / "ok_grpo_pad_is_eos.yaml"
    proc = run_doctor("check", "--no-smoke", "--select", "pad-token", "--allow-host", "node:port", str(config))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("--allow-host: 'node:port' is not HOST or HOST:PORT "
                                                         "(Port could not be cast to integer value as 'port')")
    (tmp_path / ".trl-doctor.toml").write_text('allow-hosts = ["a b"]\n')
    (tmp_path / "c.yaml").write_text(config.read_text().replace("../", str(FIXTURES) + "/"))
    proc = run_doctor("check", "--no-smoke", "--select", "pad-token", str(tmp_path / "c.yaml"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{tmp_path / '.trl-doctor.toml'}: allow-hosts: 'a b' is not HOST or HOST:PORT" in proc.stderr


def test_allowed_hosts_are_settings_in_force(built_fixtures, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text((FIXTURES / "pad-token" / "ok_grpo_pad_is_eos.yaml").read_text().replace("../", str(FIXTURES) + "/"))
    (tmp_path / ".trl-doctor.toml").write_text('allow-hosts = ["gpu-node-5:8000"]\n')
    code, report = run_json("check", "--no-smoke", "--select", "pad-token", "--allow-host", "10.0.0.2", str(config))
    assert {"setting": "allow-host", "value": "10.0.0.2", "source": "command line"} in report["settings"]
    assert {"setting": "allow-host", "value": "gpu-node-5:8000", "source": str(tmp_path / ".trl-doctor.toml")} \
        in report["settings"], report["settings"]
    proc = run_doctor("check", "--no-smoke", "--select", "pad-token", "--allow-host", "10.0.0.2", str(config))
    assert "setting in force: allow-host 10.0.0.2 (from command line)" in proc.stdout


# -- the vLLM server of another machine -----------------------------------------------------------------------

def _vllm_config(tmp_path: Path, url: str) -> Path:
    shutil.copy(FIXTURES / "vllm-server" / "rewards.py", tmp_path / "rewards.py")
    lines = {"model_name_or_path": str(FIXTURES / "models" / "qwen2-chat"),
             "dataset_path": str(FIXTURES / "data" / "chat.jsonl"), "reward_funcs": "[rewards.format_reward]",
             "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 64, "use_vllm": "true",
             "vllm_mode": "server", "vllm_server_base_url": url}
    path = tmp_path / "config.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return path


def test_another_machines_server_is_not_contacted_and_the_skip_says_how_to_allow_it(built_fixtures, tmp_path):
    code, report = run_json("check", str(_vllm_config(tmp_path, f"http://{REMOTE}:8000")), "--select",
                            "vllm-server", "--no-smoke")
    result = result_of(report, "vllm-server")
    assert code == 0 and result["status"] == "skip", result
    assert f"the vLLM server at http://{REMOTE}:8000 is on another machine" in result["message"]
    assert f"pass --allow-host {REMOTE}:8000" in result["message"] and "trl vllm-serve --model" in result["message"]
    assert result["details"]["probe"].startswith("not contacted")
    assert result["details"]["max-model-len needed"][0].isdigit()  # what the config implies is still said


def _netns_ok() -> str | None:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "unshare or ip (iproute2) is not installed"
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up && ip route add local 10.254.0.0/24 dev lo"],
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else f"no private network namespace here: {proc.stderr.strip()}"


NETNS = textwrap.dedent("""
    # runs inside `unshare -rn`: a server at 10.254.0.7 (another machine to the doctor) and the doctor's runs of a
    # spec {"tests", "routes", "model", "files": {path: text}, "runs": {name: [args]}}, PORT standing for its port
    import json, os, subprocess, sys
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "route", "add", "local", "10.254.0.0/24", "dev", "lo"], check=True)
    spec = json.load(open(sys.argv[1]))
    sys.path.insert(0, spec["tests"])
    from test_vllm_server import TRL_OWN_ROUTES, Server, vllm_routes
    out = {}
    routes = TRL_OWN_ROUTES if spec["routes"] == "trl" else vllm_routes(spec["model"], 4096)
    with Server(routes, host="10.254.0.7") as srv:
        for path, text in spec["files"].items():
            with open(path, "w") as f:
                f.write(text.replace("PORT", str(srv.port)))
        env = {**os.environ, "TRL_DOCTOR_FORKSERVER": ""}  # the fork server's workers live outside this namespace
        for name, args in spec["runs"].items():
            srv.asked.clear()
            proc = subprocess.run([a.replace("PORT", str(srv.port)) for a in args], capture_output=True, text=True,
                                  env=env, cwd=spec["cwd"])
            out[name] = {"code": proc.returncode, "report": json.loads(proc.stdout) if proc.stdout else None,
                         "stderr": proc.stderr[-2000:], "asked": list(srv.asked)}
    print(json.dumps(out))
""")


def in_namespace(tmp_path: Path, routes: str, files: dict, runs: dict) -> dict:
    """The outcome {name: code, report, stderr, what the server was asked} of each run of `runs` inside a private
    network namespace whose 10.254.0.7 serves `routes` ("vllm" or "trl"); the test skips where none can be made."""
    import os

    why = _netns_ok()
    if why:
        pytest.skip(why)
    spec = {"tests": str(Path(__file__).parent), "routes": routes, "model": str(FIXTURES / "models" / "qwen2-chat"),
            "files": files, "runs": runs, "cwd": str(tmp_path)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "ns.py").write_text(NETNS)
    env = {**os.environ, "TRL_DOCTOR_TEST_NET_ALLOW": "10.254.0.7"}  # the runs that allow it contact it
    proc = subprocess.run(["unshare", "-rn", sys.executable, str(tmp_path / "ns.py"), str(tmp_path / "spec.json")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _has_server_mode() -> bool:
    import dataclasses

    from trl import GRPOConfig

    return "vllm_server_host" in {f.name for f in dataclasses.fields(GRPOConfig)}


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_an_allowed_remote_server_is_probed_and_an_unallowed_one_never_sees_a_request(built_fixtures, tmp_path):
    """Both runs in one private namespace: without --allow-host the server at 10.254.0.7 sees no connection and the
    rule skips; with it, the rule probes it and passes on what it serves."""
    from conftest import trl_doctor_exe
    from trl_doctor.facts.vllm.server import installed_client_endpoints

    if not _has_server_mode():
        pytest.skip("the installed TRL has no vLLM server mode (0.14-0.15 run vLLM on a spare GPU)")
    endpoints = installed_client_endpoints()  # the server answers as the one the installed client expects
    template = _vllm_config(tmp_path, "http://10.254.0.7:PORT").read_text()
    check = [trl_doctor_exe(), "check", str(tmp_path / "run.yaml"), "--select", "vllm-server", "--no-smoke",
             "--format", "json"]
    out = in_namespace(tmp_path, "vllm" if endpoints.reads_models else "trl", {str(tmp_path / "run.yaml"): template},
                       {"default": check, "allowed": [*check, "--allow-host", "10.254.0.7:PORT"]})
    default, allowed = out["default"], out["allowed"]
    assert default["report"], default["stderr"]
    result = result_of(default["report"], "vllm-server")
    assert result["status"] == "skip" and default["asked"] == [], (result, default["asked"])
    assert "--allow-host 10.254.0.7:" in result["message"]
    assert allowed["report"], allowed["stderr"]
    result = result_of(allowed["report"], "vllm-server")
    assert allowed["code"] == 0 and result["status"] == "pass", result
    assert allowed["asked"][:2] == [endpoints.health, "/v1/models"], allowed["asked"]
    assert result["details"]["server host"].startswith("another machine, probed as allowed (10.254.0.7:")
    assert any(s["setting"] == "allow-host" for s in allowed["report"]["settings"])


REACHING_SCRIPT = textwrap.dedent("""
    # a GRPO script that asks another machine for something at start-up and scores with a judge served there
    import urllib.request

    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    try:
        urllib.request.urlopen("http://10.254.0.7:PORT/v1/models", timeout=2)
    except OSError as exc:
        print("the judge is not up:", exc)


    def judge(completions, **kwargs):  # an LLM judge on another machine
        urllib.request.urlopen("http://10.254.0.7:PORT/v1/models", timeout=2)
        return [1.0 for _ in completions]


    dataset = load_dataset("json", data_files=DATA, split="train")
    args = GRPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=4, max_completion_length=32,
                      report_to="none")
    GRPOTrainer(model=MODEL, reward_funcs=judge, args=args, train_dataset=dataset).train()
""")


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_a_scripts_reach_for_another_machine_is_refused_and_said(built_fixtures, tmp_path):
    """The launch's script asks 10.254.0.7 for something at start-up and its reward calls a judge there: the worker's
    guard refuses both (the server is asked nothing), the launch's notes say what the script asked for, and the
    reward rule, which cannot judge a reward that needs that machine, skips saying how to allow it."""
    from conftest import trl_doctor_exe

    script = REACHING_SCRIPT.replace("DATA", repr(str(FIXTURES / "data" / "chat_many.jsonl"))).replace(
        "MODEL", repr(str(FIXTURES / "models" / "qwen2-chat")))
    check = [trl_doctor_exe(), "check", "--no-smoke", "--select", "reward-functions", "--format", "json", "--",
             "python", "reach.py"]
    out = in_namespace(tmp_path, "vllm", {str(tmp_path / "reach.py"): script}, {"script": check})
    run = out["script"]
    assert run["report"], run["stderr"]
    assert run["asked"] == [], run["asked"]
    notes = run["report"]["launch"]["notes"]
    assert any("asked for a connection to 10.254.0.7:" in n and "not contacted" in n for n in notes), notes
    result = result_of(run["report"], "reward-functions")
    assert result["status"] == "skip" and result["message"].startswith("not judged here"), result
    assert "--allow-host 10.254.0.7:" in result["message"]
    assert any("10.254.0.7" in c for c in result["details"]["connections not made (another machine)"])


ALLOWED_NAME = textwrap.dedent("""
    import json, socket
    from trl_doctor.runtime import network
    real = socket.getaddrinfo
    def resolve(host, port, *args, **kwargs):  # the cluster's DNS: node-x is 198.51.100.9
        if host == "node-x":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.51.100.9", port or 0))]
        return real(host, port, *args, **kwargs)
    socket.getaddrinfo = resolve
    network.guard(network.parse_hosts(["node-x:8000"]))
    print(json.dumps([network.permitted("198.51.100.9", 8000), network.permitted("198.51.100.9", 22),
                      network.permitted("node-x", 8000), network.permitted("node-x", 22)]))
    network._hook("socket.connect", (None, ("198.51.100.9", 8000)))  # looks node-x up, then lets this through
    print(json.dumps([network.permitted("198.51.100.9", 8000), network.permitted("198.51.100.9", 22)]))
""")


def test_an_allowed_name_is_looked_up_only_when_needed_and_only_its_port_is_let_through():
    import os

    env = {k: v for k, v in os.environ.items() if k != NET_AUDIT_ENV}
    proc = subprocess.run([sys.executable, "-c", ALLOWED_NAME], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    before, after = (json.loads(line) for line in proc.stdout.splitlines())
    assert before == [False, False, True, False]  # the name at its port; its address not yet (not looked up)
    assert after == [True, False]


def test_names_of_this_machine_are_answered_without_the_system_resolver(tmp_path):
    """`*.localhost` is loopback (RFC 6761) and this machine's name is its own: the guard answers both itself, so
    the system resolver never sends them to DNS (`secret.localhost` as a query: data out) and an /etc/hosts entry or
    a DNS answer cannot point them at another machine. Run in a mount namespace of the test's own whose /etc/hosts
    maps evil.localhost to 10.254.0.5 (`unshare -rm`, a bind mount): without the guard the resolver says 10.254.0.5,
    with it 127.0.0.1."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("unprivileged mount namespaces are not allowed here")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.254.0.5 evil.localhost\n")
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent("""
        import socket, sys
        from trl_doctor.runtime import network
        before = socket.gethostbyname("evil.localhost")
        network.guard(())
        after = {info[4][0] for info in socket.getaddrinfo("evil.localhost", 80, socket.AF_INET)}
        print(before, sorted(after), socket.gethostbyname("secret.localhost"))
    """))
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount --bind {hosts} /etc/hosts && exec {sys.executable} "
                           f"{probe}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["10.254.0.5", "['127.0.0.1']", "127.0.0.1"], proc.stdout
