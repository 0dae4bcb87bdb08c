"""The worker's own network namespace: the operating system holds what the in-process guard cannot.

The guard (trl_doctor.runtime.network) is an audit hook: it sees Python's sockets in the worker's own process only. A
process the user's code starts, a C library's own connect (libcurl, NCCL) and the system resolver's DNS query pass
it. So on Linux, where unprivileged user namespaces are allowed, the worker moves itself, before it runs anything of
the user's, into a network namespace of its own (unshare(CLONE_NEWUSER | CLONE_NEWNET); its user id mapped to
itself, so files and `getuid()` stay the user's): the namespace holds a loopback device and nothing else, so every
process of the check, whatever starts it and whatever code it runs, has no route to another machine. A DNS query to
a resolver elsewhere finds no route; one to a resolver on this machine (127.0.0.53) finds nothing listening.

This machine's own servers stay reachable, as the guard promises: the TCP ports listening on this machine's loopback
and its own IPv4 addresses when the check starts (read from /proc/net/tcp and tcp6) listen inside the namespace too,
and each connection to one is carried to the real server by the door, a small process forked before the move that
stays outside. The door connects to nothing else: a loopback or own address, at a port listed at the start, never
a DNS port. A server that starts listening outside after the check started is not reachable from inside.

Where the namespace cannot be made (not Linux, user namespaces disabled or denied by a seccomp or AppArmor policy,
`--allow-host` naming another machine, which only the host's network reaches, or TRL_DOCTOR_NETWORK_NAMESPACE=0),
the guard alone is in force, and `probe()` says so with the reason, for the report.

Standard library only: the printing process probes with it.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import selectors
import socket
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

ENV = "TRL_DOCTOR_NETWORK_NAMESPACE"  # "0": the in-process guard only
HOLD_ENV = "TRL_DOCTOR_HOLD"  # "0": the user's folders are not held (what the check writes there stays)
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _SIOCSIFADDR, _IFF_UP = 0x8913, 0x8914, 0x8916, 0x1
_PR_SET_PDEATHSIG = 1
_DNS_PORTS = frozenset({53, 853, 5353})
_DOOR_TIMEOUT = 10.0
NOT_COVERED = ("processes the user's code starts, C libraries' own connections and the system resolver's DNS "
               "queries are not held")


@dataclass(frozen=True)
class Isolation:
    """Whether the check's processes run in a network namespace of their own, and if not, why."""

    namespace: bool
    why: str = ""
    cause: str = "system"  # what decided it: "system", "environment" (ENV) or "allow-host"
    forwarded: tuple[tuple[str, int], ...] = ()  # (address, port) of this machine's servers reachable from inside
    held: tuple[str, ...] = ()  # folders whose writes land in the check's own layer (trl_doctor.runtime.hold)
    not_held: tuple[tuple[str, str], ...] = ()  # (folder, why not) of the folders asked for

    def words(self) -> str:
        if self.namespace:
            return (f"own network namespace: no route to another machine for any process of the check; "
                    f"{len(self.forwarded)} server port(s) of this machine reachable")
        return f"in-process guard only ({self.why}): {NOT_COVERED}"


_state: dict = {"isolation": None}  # this process's, once `isolate` ran; "probe": the probe's answer, once asked


# -- whether it can be made ----------------------------------------------------------------------------------------

def _refusal(allowed) -> Isolation | None:
    """The guard alone, and why, when no namespace is to be made for these allowed hosts; None: it may be tried."""
    from trl_doctor.runtime.network import this_machine

    if os.environ.get(ENV, "").strip().lower() in ("0", "no", "false", "off"):
        return Isolation(False, f"{ENV}=0", "environment")
    if not os.path.exists("/proc/self/ns/net"):
        return Isolation(False, "this system has no network namespaces")
    for entry in allowed or ():
        if this_machine(entry.host):
            continue
        if entry.port is None:
            return Isolation(False, f"allowed host {entry} names no port: only HOST:PORT is carried into the check's "
                                    "network namespace", "allow-host")
        if ":" in entry.host:
            return Isolation(False, f"allowed host {entry} is an IPv6 address: only IPv4 hosts are carried into the "
                                    "check's network namespace", "allow-host")
    return None


def _carried(allowed) -> dict[tuple[str, int], set[str]]:
    """{(IPv4 address, port): the allowed names that resolve to it} of the allowed hosts of another machine, which the
    door connects to for the inside; a name is looked up here, before the move (it is allowed), once."""
    from trl_doctor.runtime.network import _ip, this_machine

    out: dict[tuple[str, int], set[str]] = {}
    for entry in allowed or ():
        if this_machine(entry.host) or entry.port is None:
            continue
        if _ip(entry.host) is not None:
            out.setdefault((entry.host, entry.port), set())
            continue
        try:
            infos = socket.getaddrinfo(entry.host, entry.port, socket.AF_INET, socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue  # it does not resolve here: inside, as outside, the connect fails
        for info in infos:
            out.setdefault((str(info[4][0]), entry.port), set()).add(entry.host)
    return out


def probe(allowed=()) -> Isolation:
    """Whether a worker started now would get its namespace: tried in a child Python (`python -I -S netns.py
    --probe`, standard library only, about 20 ms) that makes one and exits; the answer is kept for this process."""
    refused = _refusal(allowed)
    if refused is not None:
        return refused
    if "probe" not in _state:
        import subprocess
        import sys

        try:
            proc = subprocess.run([sys.executable, "-I", "-S", __file__, "--probe"], capture_output=True, text=True,
                                  timeout=20, stdin=subprocess.DEVNULL)
            said = proc.stdout.strip() or f"the probe ended with status {proc.returncode}"
        except (OSError, subprocess.SubprocessError) as exc:
            said = f"the probe could not run ({exc})"
        _state["probe"] = said
    said = _state["probe"]
    return Isolation(True) if said == "ok" else Isolation(False, said)


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.EPERM, errno.EACCES):
        return f"the system denies unprivileged user namespaces ({exc.strerror or exc})"
    if exc.errno == errno.ENOSPC:
        return "the user namespace limit is reached (user.max_user_namespaces)"
    if exc.errno == errno.EINVAL:
        return f"unshare refused ({exc.strerror or exc})"
    return f"{exc.strerror or exc}"


# -- the move ------------------------------------------------------------------------------------------------------

def isolate(allowed=(), hold=(), layer=None) -> Isolation:
    """Move this process (single-threaded, before any user code) into a network namespace of its own, with this
    machine's listening servers carried in, and hold the folders `hold` (trl_doctor.runtime.hold: their writes land in
    upper layers under `layer`); the Isolation in force either way. Once per process."""
    if _state["isolation"] is not None:
        return _state["isolation"]
    from trl_doctor.runtime import hold as _hold
    from trl_doctor.runtime.network import own_addresses, own_names

    own_addresses(), own_names()  # this machine's, read before the move (the guard's answers stay this machine's)
    refused = _refusal(allowed)
    if not os.path.exists("/proc/self/ns/user"):  # not Linux (or a kernel without them): neither can be made
        return _settle(refused or Isolation(False, "this system has no user namespaces"))
    holding = bool(hold) and layer is not None and os.environ.get(HOLD_ENV, "").strip() != "0"
    if refused is not None and not holding:
        return _settle(refused)
    inside = door = None
    own_v4: list[str] = []
    listening: list[tuple[str, int, int]] = []
    carried: dict[tuple[str, int], set[str]] = {}
    if refused is None:
        own_v4 = sorted(a for a in own_addresses() if ":" not in a and not ipaddress.ip_address(a).is_loopback)
        listening = _listening(set(own_v4))
        carried = _carried(allowed)
        inside, outside = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        door = _start_door(outside, inside, {port for _, port, _ in listening}, set(own_v4), frozenset(carried))
        outside.close()
    try:
        _user_namespace()
        if refused is None:
            _network_namespace()
    except OSError as exc:
        if door is not None and inside is not None:
            _stop_door(door, inside)
        why = _reason(exc)
        return _settle(Isolation(False, why, not_held=tuple((f, why) for f in _hold.outermost(hold))))
    not_held = _hold.mount(hold, layer) if holding else {}
    held = tuple(_hold.held())
    if refused is not None:
        return _settle(Isolation(False, refused.why, refused.cause, held=held, not_held=tuple(not_held.items())))
    for index, address in enumerate(own_v4 + sorted({ip for ip, _ in carried} - set(own_v4))):
        _add_address(f"lo:{index % 1000}", address)
    names = {name: ip for (ip, _), named in carried.items() for name in named}
    if names and layer is not None:
        _hold.hosts_file_with(names, Path(layer))
    listeners = _listen(sorted(set(listening) | {(ip, port, socket.AF_INET) for ip, port in carried}))
    threading.Thread(target=_forward, args=(listeners, inside), name="trl-doctor-netns", daemon=True).start()
    return _settle(Isolation(True, forwarded=tuple(sorted({(a, p) for a, p, _ in listeners})), held=held,
                             not_held=tuple(not_held.items())))


def _settle(isolation: Isolation) -> Isolation:
    _state["isolation"] = isolation
    return isolation


def _libc():
    """The C library, errno kept (this module also runs alone as the probe: no import of the package here)."""
    return ctypes.CDLL(None, use_errno=True)


def _unshare() -> None:
    """A user namespace mapping this user to itself, then a network namespace it owns (the probe's)."""
    _user_namespace()
    _network_namespace()


def _network_namespace() -> None:
    """A network namespace of this process's own user namespace, its loopback up."""
    if _libc().unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    _loopback_up()


def _user_namespace() -> None:
    """A user namespace mapping this user (and group) to itself: files and getuid() stay the user's."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            with open(path, "w") as f:
                f.write(text)
        except FileNotFoundError:
            continue  # setgroups: kernels before 3.19


def _loopback_up() -> None:
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _add_address(label: str, address: str) -> None:
    """This machine's own IPv4 address on the namespace's loopback too (an alias), so a server of this machine
    reached by that address is carried in as well. A failure leaves that address unreachable, nothing else."""
    import fcntl

    sockaddr = struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(address))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), _SIOCSIFADDR, struct.pack("16s16s", label.encode(), sockaddr))
    except OSError:
        pass


# -- this machine's servers ----------------------------------------------------------------------------------------

def _listening(own_v4: set[str]) -> list[tuple[str, int, int]]:
    """(address, port, family) of the TCP sockets listening on this machine's loopback, wildcard or own IPv4
    addresses, DNS's ports left out."""
    out = set()
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/net/{name}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # TCP_LISTEN
                continue
            hexaddr, hexport = fields[1].split(":")
            address, port = _address(hexaddr), int(hexport, 16)
            ip = ipaddress.ip_address(address)
            if port in _DNS_PORTS or not (ip.is_loopback or ip.is_unspecified or address in own_v4):
                continue
            out.add((address, port, family))
    return sorted(out)


def _address(hexaddr: str) -> str:
    """/proc/net/tcp's address: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _listen(listening) -> list[tuple[str, int, socket.socket]]:
    """The inside listeners, one per server listening outside; one that cannot bind is left out."""
    out = []
    v4_wild = {port for address, port, _ in listening if address == "0.0.0.0"}
    for address, port, family in listening:
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if address != "::" or port in v4_wild else 0)
            s.bind((address, port))
            s.listen(64)
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        out.append((address, port, s))
    return out


# -- the door: one process outside, connecting for the inside ------------------------------------------------------

def _start_door(outside: socket.socket, inside: socket.socket, ports: set[int], own_v4: set[str],
                carried: frozenset[tuple[str, int]] = frozenset()) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # pragma: no cover - the door's own process
        keep = outside.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        _libc().prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
        _door(outside, ports, own_v4, carried)
    finally:
        os._exit(0)


def _door(conn: socket.socket, ports: set[int], own_v4: set[str],
          carried: frozenset[tuple[str, int]]) -> None:  # pragma: no cover - the door's process
    """Serve `ADDRESS PORT\\n` requests: a connected socket passed back (SCM_RIGHTS), or `E why`. It connects to this
    machine's servers listed at the start and to the allowed hosts' (address, port) pairs, nothing else."""
    buffered = b""
    while True:
        while b"\n" not in buffered:
            chunk = conn.recv(512)
            if not chunk:
                return
            buffered += chunk
        line, buffered = buffered.split(b"\n", 1)
        try:
            host, port_text = line.decode("ascii").rsplit(" ", 1)
            port = int(port_text)
            ip = ipaddress.ip_address(host)
            mapped = getattr(ip, "ipv4_mapped", None)
            ip = mapped or ip
            mine = port in ports and (ip.is_loopback or ip.is_unspecified or str(ip) in own_v4)
            if not mine and (str(ip), port) not in carried:
                raise PermissionError(f"{host}:{port} is neither one of this machine's servers nor an allowed host")
            out = socket.create_connection((str(ip), port), timeout=_DOOR_TIMEOUT)
            out.settimeout(None)  # a timeout is O_NONBLOCK on the descriptor, which travels with it
        except (OSError, ValueError) as exc:
            conn.sendall(b"E " + str(exc).encode("utf-8", "replace")[:200] + b"\n")
            continue
        socket.send_fds(conn, [b"K\n"], [out.fileno()])
        out.close()


def _stop_door(pid: int, conn: socket.socket) -> None:
    conn.close()
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except OSError:
        pass


def _forward(listeners, door: socket.socket) -> None:
    """Accept on the inside listeners; carry each connection to its server outside through the door."""
    lock = threading.Lock()
    selector = selectors.DefaultSelector()
    for _, _, s in listeners:
        selector.register(s, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            try:
                client, _ = key.fileobj.accept()  # type: ignore[union-attr]
            except OSError:
                continue
            threading.Thread(target=_carry, args=(client, door, lock), daemon=True).start()


def _carry(client: socket.socket, door: socket.socket, lock: threading.Lock) -> None:
    client.setblocking(True)
    host, port = client.getsockname()[:2]
    with lock:
        try:
            door.sendall(f"{host} {port}\n".encode("ascii"))
            message, fds, _, _ = socket.recv_fds(door, 512, 1)
        except OSError:
            message, fds = b"", []
    if not message.startswith(b"K") or not fds:
        client.close()
        return
    server = socket.socket(fileno=fds[0])
    server.setblocking(True)
    back = threading.Thread(target=_pump, args=(server, client), daemon=True)
    back.start()
    _pump(client, server)
    back.join()
    client.close()
    server.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass


if __name__ == "__main__":  # the probe: `python -I -S netns.py --probe` prints "ok" or why not
    try:
        _unshare()
        print("ok")
    except OSError as _exc:
        print(_reason(_exc))
