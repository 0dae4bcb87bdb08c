"""The worker's own network namespace (trl_doctor/runtime/netns.py): what the OS holds that the in-process guard cannot.

"Another machine" is an address of the test's own network namespace (`unshare -rmn`; `ip route add local
10.254.0.0/24 dev lo`): a server at 10.254.0.7 and a DNS server at 10.254.0.53 (the namespace's /etc/resolv.conf,
bind-mounted, names it; it answers judge.example with 10.254.0.7). The user's reward function reaches for them three
ways the audit hook never sees: a child process (by the name judge.example), a C-level connect (libc's own socket and
connect through ctypes) and the system resolver (`getent`). The same check with `--allow-host judge.example:PORT`
carries that one host in; with TRL_DOCTOR_NETWORK_NAMESPACE=0 (the control) the guard alone is in force and all
three get through, so the test fails if the namespace is not made.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES, trl_doctor_exe

REWARDS = textwrap.dedent('''
    import ctypes, os, shutil, socket, subprocess, sys

    REMOTE, LOCAL = ("10.254.0.7", int(os.environ["NS_REMOTE_PORT"])), ("127.0.0.1", int(os.environ["NS_LOCAL_PORT"]))
    JUDGE = "judge.example"  # the test's DNS server answers 10.254.0.7
    CHILD = "import socket, sys\\ntry:\\n socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).sendall(b'child')\\nexcept OSError as e: print(e)"

    def _c_level(host, port, data):
        """libc's socket, connect and send: no Python socket, so no audit event."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        raw = socket.AF_INET.to_bytes(2, sys.byteorder) + port.to_bytes(2, "big") + socket.inet_aton(host) + bytes(8)
        ok = libc.connect(fd, ctypes.create_string_buffer(raw, 16), 16) == 0 and libc.send(fd, data, len(data), 0) > 0
        libc.close(fd)
        return "sent" if ok else f"errno {ctypes.get_errno()}"

    def reach_out(completions, **kwargs):
        said = [subprocess.run([sys.executable, "-c", CHILD, JUDGE, str(REMOTE[1])], capture_output=True,
                               text=True, timeout=20).stdout.strip()]
        said.append(_c_level(*REMOTE, b"c-level"))
        lookup = [shutil.which("getent") or "", "hosts", "model-store.example"]
        if not lookup[0]:
            lookup = [sys.executable, "-c", "import socket; socket.getaddrinfo('model-store.example', 80)"]
        said.append(str(subprocess.run(lookup, capture_output=True, timeout=20).returncode))
        with socket.create_connection(LOCAL, timeout=5) as s:  # this machine's server: carried in by the door
            s.sendall(("reached this machine; " + " | ".join(said)).encode())
            assert s.recv(2) == b"ok"  # as a client does: the answer, so the words have arrived
        return [0.0 for _ in completions]
''')

NAMESPACE = textwrap.dedent('''
    # runs inside `unshare -rmn`: servers of "another machine" (10.254.0.7 TCP, 10.254.0.53 DNS) and of this machine
    # (127.0.0.1), then the doctor's runs; prints what each server saw per run as JSON
    import json, os, socket, subprocess, sys, threading, time
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "route", "add", "local", "10.254.0.0/24", "dev", "lo"], check=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "resolv.conf"), "w") as f:
        f.write("nameserver 10.254.0.53\\noptions timeout:1 attempts:1\\n")
    subprocess.run(["mount", "--bind", os.path.join(here, "resolv.conf"), "/etc/resolv.conf"], check=True)
    seen = {"remote": [], "dns": [], "local": []}

    def tcp(host, name):
        s = socket.socket(); s.bind((host, 0)); s.listen(16)
        def loop():
            while True:
                c, _ = s.accept(); c.settimeout(5)
                try:
                    seen[name].append(c.recv(4096).decode(errors="replace"))
                    c.sendall(b"ok")
                except OSError as exc:
                    seen[name].append(f"connected ({exc})")
                c.close()
        threading.Thread(target=loop, daemon=True).start()
        return s.getsockname()[1]

    def dns():
        """A DNS server of another machine: judge.example is 10.254.0.7, any other name is NXDOMAIN."""
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.254.0.53", 53))
        while True:
            data, peer = u.recvfrom(4096)
            i, labels = 12, []
            while data[i]:
                labels.append(data[i + 1:i + 1 + data[i]].decode()); i += 1 + data[i]
            name, qtype = ".".join(labels), int.from_bytes(data[i + 1:i + 3], "big")
            seen["dns"].append(name)
            question, found = data[12:i + 5], name == "judge.example" and qtype == 1
            header = data[:2] + (b"\\x81\\x80" if found else b"\\x81\\x83") + b"\\x00\\x01" + \
                (b"\\x00\\x01" if found else b"\\x00\\x00") + b"\\x00\\x00\\x00\\x00"
            answer = b"\\xc0\\x0c\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x3c\\x00\\x04" + socket.inet_aton("10.254.0.7") if found else b""
            u.sendto(header + question + answer, peer)

    threading.Thread(target=dns, daemon=True).start()
    env = {**os.environ, "NS_REMOTE_PORT": str(tcp("10.254.0.7", "remote")),
           "NS_LOCAL_PORT": str(tcp("127.0.0.1", "local")), "TRL_DOCTOR_FORKSERVER": ""}
    out = {}
    allow = ["--allow-host", "judge.example:" + env["NS_REMOTE_PORT"]]
    for name, extra, more in (("namespace", {}, []), ("allowed", {}, allow),
                              ("guard only", {"TRL_DOCTOR_NETWORK_NAMESPACE": "0"}, [])):
        for v in seen.values():
            v.clear()
        proc = subprocess.run(sys.argv[1:] + more, capture_output=True, text=True, env={**env, **extra}, cwd=here)
        time.sleep(0.5)
        out[name] = {"code": proc.returncode, "report": json.loads(proc.stdout) if proc.stdout else None,
                     "stderr": proc.stderr[-2000:], "seen": {k: list(v) for k, v in seen.items()}}
    print(json.dumps(out))
''')


def _namespace_why_not() -> str | None:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "unshare or ip (iproute2) is not installed"
    proc = subprocess.run(["unshare", "-rmn", "sh", "-c", "ip link set lo up && ip route add local 10.254.0.0/24 dev lo"
                           " && mount --bind /dev/null /etc/resolv.conf"], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"no private user, mount and network namespace here: {proc.stderr.strip()}"


@pytest.mark.boundary  # a real process boundary, seconds long: CI's boundary step
def test_children_c_code_and_dns_reach_no_other_machine_yet_this_machines_servers_answer(built_fixtures, tmp_path):
    why = _namespace_why_not()
    if why:
        pytest.skip(why)
    (tmp_path / "rewards.py").write_text(REWARDS)
    (tmp_path / "ns.py").write_text(NAMESPACE)
    config = tmp_path / "config.yaml"
    config.write_text(f"model_name_or_path: {FIXTURES / 'models' / 'qwen2-chat'}\n"
                      f"dataset_path: {FIXTURES / 'data' / 'chat.jsonl'}\nreward_funcs: [rewards.reach_out]\n"
                      "num_generations: 2\nper_device_train_batch_size: 2\nmax_completion_length: 16\n")
    command = [trl_doctor_exe(), "check", "--no-smoke", "--select", "reward-functions", "--format", "json", str(config)]
    reach = "10.254.0.7,10.254.0.53,judge.example,model-store.example"  # the session's network audit: the test's own
    env = {**os.environ, "TRL_DOCTOR_TEST_NET_ALLOW": reach}
    proc = subprocess.run(["unshare", "-rmn", sys.executable, str(tmp_path / "ns.py"), *command], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])

    held, control = runs["namespace"], runs["guard only"]
    assert held["code"] == 0 and held["report"]["results"][0]["status"] == "pass", held
    assert held["seen"]["remote"] == [] and held["seen"]["dns"] == [], held["seen"]
    assert len(held["seen"]["local"]) == 1 and held["seen"]["local"][0].startswith("reached this machine"), held["seen"]
    assert "errno 101" in held["seen"]["local"][0]  # the C-level connect: ENETUNREACH, no route
    assert not any(s["setting"] == "network" for s in held["report"]["settings"]), held["report"]["settings"]

    # an allowed host is carried in by the door, for every process: looked up once, outside, before the move; the
    # names it answers are in the namespace's /etc/hosts, and a name not allowed still reaches no DNS server
    allowed = runs["allowed"]
    assert allowed["code"] == 0 and allowed["report"]["results"][0]["status"] == "pass", allowed
    assert sorted(allowed["seen"]["remote"]) == ["c-level", "child"], allowed["seen"]
    assert set(allowed["seen"]["dns"]) == {"judge.example"}, allowed["seen"]
    assert not any(s["setting"] == "network" for s in allowed["report"]["settings"]), allowed["report"]["settings"]

    # the control: the guard alone lets all three through, and the report says what it does not cover
    assert sorted(control["seen"]["remote"]) == ["c-level", "child"], control["seen"]
    assert "model-store.example" in control["seen"]["dns"], control["seen"]
    network = [s for s in control["report"]["settings"] if s["setting"] == "network"]
    assert network and network[0]["value"].startswith("in-process guard only (TRL_DOCTOR_NETWORK_NAMESPACE=0)")
    assert "processes the user's code starts" in network[0]["value"] and network[0]["source"] == "environment"


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    return s


def test_the_door_connects_to_this_machines_listed_servers_only():
    """The door (the process outside the namespace) serves a listed loopback port, and refuses another machine, a
    port not listed at the start and DNS's port, whatever the inside asks."""
    from trl_doctor.runtime import netns

    server = _listener()
    port = server.getsockname()[1]
    inside, outside = socket.socketpair()
    pid = netns._start_door(outside, inside, {port, 53}, set())
    outside.close()
    try:
        def ask(line: str) -> tuple[bytes, list[int]]:
            inside.sendall(line.encode() + b"\n")
            message, fds, _, _ = socket.recv_fds(inside, 512, 1)
            return message, fds

        message, fds = ask(f"127.0.0.1 {port}")
        assert message.startswith(b"K") and len(fds) == 1
        assert os.get_blocking(fds[0])  # a connect timeout's O_NONBLOCK would travel with it: the carry's recv fails
        with socket.socket(fileno=fds[0]) as carried:
            carried.sendall(b"hello")
            conn, _ = server.accept()
            assert conn.recv(5) == b"hello"
            conn.sendall(b"world")
            assert carried.recv(5) == b"world"
            conn.close()
        for line in (f"10.254.0.7 {port}", f"127.0.0.1 {port + 1 if port < 65535 else port - 1}", "8.8.8.8 53",
                     "not-an-address 80"):
            message, fds = ask(line)
            assert message.startswith(b"E ") and fds == [], (line, message)
    finally:
        netns._stop_door(pid, inside)
        server.close()


def test_the_listening_ports_are_read_as_the_kernel_lists_them():
    """/proc/net/tcp's little-endian words: a loopback listener of this test is found at its address and port;
    DNS's ports never are."""
    from trl_doctor.runtime import netns

    server = _listener()
    try:
        port = server.getsockname()[1]
        found = netns._listening(set())
        assert ("127.0.0.1", port, socket.AF_INET) in found, found
        assert not any(p in (53, 853) for _, p, _ in found)
    finally:
        server.close()


def test_the_guard_alone_is_said_with_its_reason():
    """Where no namespace is made, the Isolation says why and what the guard leaves open; an allowed host of another
    machine named without a port (or by an IPv6 address) is one reason, the environment's switch another."""
    from trl_doctor.runtime import netns
    from trl_doctor.runtime.network import parse_hosts

    remote = netns.probe(parse_hosts(["10.0.0.2"]))  # no port: which ones to carry in cannot be known
    assert not remote.namespace and remote.cause == "allow-host" and "10.0.0.2 names no port" in remote.why
    assert "C libraries' own connections" in remote.words()
    assert netns.probe(parse_hosts(["[2001:db8::7]:8000"])).cause == "allow-host"
    assert netns.probe(parse_hosts(["10.0.0.2:8000"])).cause != "allow-host"  # carried in by the door
    assert netns.probe(parse_hosts(["localhost:8000"])).cause != "allow-host"  # this machine: no reason to give up
    os.environ[netns.ENV] = "0"
    try:
        off = netns.probe()
    finally:
        del os.environ[netns.ENV]
    assert not off.namespace and off.cause == "environment"
