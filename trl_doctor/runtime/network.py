"""Where the doctor may open a network connection: this machine, and the hosts the user allowed. Nothing else.

A recipe, a launch script or a repository under check names hosts (a vLLM server's node, a tracker's URL): the
doctor never looks them up or connects to them unless the command line (`--allow-host HOST[:PORT]`) or the
project's config (`allow-hosts`) names them. So a pull request cannot make the CI gate's runner send requests into
its network, and a cluster recipe checked on a laptop sends nothing to the names it holds.

- `this_machine(host)`: whether a host as written is this machine, answered without a name look-up: loopback and
  wildcard addresses, `localhost`, the addresses of this machine's interfaces (read from /proc), its own host name
  and the /etc/hosts names of those addresses.
- `parse_hosts(entries)`: the allowed hosts, from `HOST`, `HOST:PORT`, `[v6]:PORT` or `scheme://HOST:PORT`.
- `guard(allowed)`: an audit hook (PEP 578) installed in the check's worker that refuses every socket connect and
  name look-up outside the two, for the doctor's own code and the user's code it runs (a script, a reward); each
  refusal is recorded (`take_refused()`) so the report names what was not contacted and how to allow it. An audit
  hook sees Python's sockets, not a C library's own (libcurl, NCCL): it keeps the doctor's promise and stops user
  code's accidents; it is not a sandbox.

Standard library only: the printing process imports this.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import socket
import sys
import unicodedata
from dataclasses import dataclass
from types import FrameType
from urllib.parse import urlsplit

WILDCARDS = ("", "0.0.0.0", "::")  # a client given these connects to this machine
ALLOW_OPTION = "--allow-host"


@dataclass(frozen=True)
class HostPort:
    """One allowed host: its name or address as written (lower case, no brackets), and a port or None (any)."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def allows(self, host: str, port: int | None) -> bool:
        return _norm(host) == self.host and (self.port is None or port is None or self.port == port)


def parse_host(text: str) -> HostPort:
    """`gpu-node-5`, `10.0.0.2:8000`, `[fd00::2]:8000`, `fd00::2`, `http://10.0.0.2:8000/v1`; ValueError with what
    is wrong otherwise."""
    raw = str(text).strip()
    if not raw:
        raise ValueError("an empty host")
    hidden = next((c for c in raw if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")), None)
    if hidden is not None:  # urlsplit would drop a newline or tab unseen ('a\nb' taken as 'ab'); a bidi override hides
        raise ValueError(f"{text!r} holds the control or format character U+{ord(hidden):04X}: not a host name")
    if "://" not in raw:
        if raw.count(":") > 1 and not raw.startswith("["):  # a bare IPv6 address: no port
            return HostPort(_norm(raw), None)
        raw = "//" + raw
    try:
        parts = urlsplit(raw)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r} is not HOST or HOST:PORT ({exc})") from None
    bad_path = parts.path not in ("", "/") and "://" not in text
    if not host or "@" in parts.netloc or any(c.isspace() or c in "/?#" for c in host) or bad_path:
        raise ValueError(f"{text!r} is not HOST or HOST:PORT (e.g. gpu-node-5, 10.0.0.2:8000, [fd00::2]:8000)")
    return HostPort(_norm(host), port)


def parse_hosts(entries) -> tuple[HostPort, ...]:
    """Every entry parsed (see parse_host), duplicates dropped, in order."""
    out: list[HostPort] = []
    for entry in entries or ():
        hp = parse_host(entry)
        if hp not in out:
            out.append(hp)
    return tuple(out)


def allowed_entry(allowed, host: str, port: int | None) -> HostPort | None:
    """The allowed entry that names `host` (at `port`), or None."""
    return next((a for a in allowed if a.allows(host, port)), None)


def _norm(host) -> str:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    h = str(host).strip().lower().strip("[]").rstrip(".")
    try:
        return str(ipaddress.ip_address(h.split("%", 1)[0]))
    except ValueError:
        return h


def _ip(host: str):
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def this_machine(host) -> bool:
    """Whether `host` (a config's or a script's, as written) is this machine: no name is looked up."""
    h = _norm(host)
    if h in WILDCARDS or h == "localhost" or h.endswith(".localhost"):
        return True
    ip = _ip(h)
    if ip is not None:
        return ip.is_loopback or ip.is_unspecified or str(ip) in own_addresses()
    return h in own_names()


def loopback(host) -> bool:
    """127.0.0.0/8, ::1 (and their IPv4-mapped form), `localhost`: what tests may contact."""
    h = _norm(host)
    ip = _ip(h)
    return ip.is_loopback if ip is not None else h == "localhost" or h.endswith(".localhost")


@functools.lru_cache(maxsize=1)
def own_addresses() -> frozenset[str]:
    """This machine's interface addresses, read from /proc (Linux), never looked up: IPv4's local /32 entries of the
    routing table, IPv6's interface list. Empty where /proc has neither."""
    found: set[str] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii", errors="replace") as f:
            last = None
            for line in f:
                s = line.strip()
                if s.startswith("|--"):
                    last = s[3:].strip()
                elif s == "/32 host LOCAL" and last:
                    found.add(last)
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii", errors="replace") as f:
            for line in f:
                hexaddr = line.split()[0] if line.split() else ""
                if len(hexaddr) == 32:
                    found.add(str(ipaddress.IPv6Address(int(hexaddr, 16))))
    except (OSError, ValueError):
        pass
    return frozenset(_norm(a) for a in found)


@functools.lru_cache(maxsize=1)
def own_names() -> frozenset[str]:
    """This machine's names: its host name (and short name), and /etc/hosts names of its own or loopback addresses."""
    names: set[str] = {"localhost"}
    try:
        name = socket.gethostname().lower()  # the kernel's name for this machine: no look-up
        names |= {name, name.split(".", 1)[0]}
    except OSError:
        pass
    try:
        with open("/etc/hosts", encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        lines = []
    mine = own_addresses()
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        ip = _ip(_norm(fields[0]))
        if ip is not None and (ip.is_loopback or str(ip) in mine):
            names |= {n.lower().rstrip(".") for n in fields[1:]}
    return frozenset(n for n in names if n)


# -- the worker's guard ------------------------------------------------------------------------------------------

class RefusedConnection(PermissionError):
    """A connection to another machine that no --allow-host named."""


class RefusedLookup(socket.gaierror):
    """A name look-up of a host that is not this machine and that no --allow-host named."""


@dataclass(frozen=True)
class Refusal:
    """One refused connection or look-up: what, where to, and the innermost frame of the code that asked."""

    what: str  # "connect" or "look-up"
    host: str
    port: int | None
    where: str  # "path:line" of the code that asked, "" when not known

    def target(self) -> str:
        return str(HostPort(self.host, self.port))

    def words(self) -> str:
        at = f" (at {self.where})" if self.where else ""
        verb = "a connection to" if self.what == "connect" else "a look-up of"
        return f"{verb} {self.target()}{at}"


_state: dict = {"allowed": (), "addresses": frozenset(), "pending": (), "installed": False, "refused": []}


def guard(allowed=()) -> None:
    """Refuse, from now on in this process, every connect and name look-up that is neither this machine nor allowed.
    An allowed name is looked up only when something connects to an address no entry names (`_resolve_pending`)."""
    allowed = tuple(allowed)
    own_addresses(), own_names()  # read before the hook is in place
    pending = tuple(a for a in allowed if _ip(a.host) is None and not this_machine(a.host))
    _state.update(allowed=allowed, addresses=frozenset(), pending=pending, refused=[])
    if not _state["installed"]:
        _answer_own_names()
        sys.addaudithook(_hook)
        _state["installed"] = True


def _own_address_of(name: str, family: int) -> list[str]:
    """The addresses a name the guard takes for this machine stands for, answered here, never by the system resolver
    (which sends a name it does not find in /etc/hosts to DNS: `secret.localhost` would leave as a query, and a DNS
    server's answer for this machine's name could point anywhere): `localhost` and `*.localhost` are loopback (RFC
    6761); this machine's names are its /etc/hosts addresses of its own, else its interfaces', else loopback."""
    h = _norm(name)
    v4 = family in (socket.AF_UNSPEC, socket.AF_INET)
    v6 = family in (socket.AF_UNSPEC, socket.AF_INET6)
    if h == "localhost" or h.endswith(".localhost"):
        return (["127.0.0.1"] if v4 else []) + (["::1"] if v6 else [])
    listed = _hosts_file().get(h, [])
    own = [a for a in listed if (ip := _ip(a)) is not None and (ip.is_loopback or str(ip) in own_addresses())]
    found = own or sorted(a for a in own_addresses() if not _ip(a).is_loopback) or ["127.0.0.1", "::1"]
    return [a for a in found if (":" in a and v6) or (":" not in a and v4)]


@functools.lru_cache(maxsize=1)
def _hosts_file() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    try:
        with open("/etc/hosts", encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out.setdefault(name.lower().rstrip("."), []).append(_norm(fields[0]))
    return out


def _by_name(host) -> bool:
    """Whether a host is a name (not an address) the guard takes for this machine."""
    if not isinstance(host, (str, bytes)):
        return False
    h = _norm(host)
    return _ip(h) is None and h not in WILDCARDS and this_machine(h)


def _answer_own_names() -> None:
    """socket.getaddrinfo / gethostbyname(_ex) answer this machine's names themselves (`_own_address_of`)."""
    real_getaddrinfo, real_byname, real_byname_ex = socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if not _by_name(host):
            return real_getaddrinfo(host, port, family, type, proto, flags)
        out = []
        for address in _own_address_of(os.fsdecode(host) if isinstance(host, bytes) else host, family):
            try:
                out += real_getaddrinfo(address, port, family, type, proto, flags | socket.AI_NUMERICHOST)
            except socket.gaierror:
                continue
        if not out:
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: no address of this machine for it")
        return out

    def gethostbyname(host):
        if not _by_name(host):
            return real_byname(host)
        return next(iter(_own_address_of(host, socket.AF_INET)), "127.0.0.1")

    def gethostbyname_ex(host):
        if not _by_name(host):
            return real_byname_ex(host)
        return host, [], _own_address_of(host, socket.AF_INET) or ["127.0.0.1"]

    socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = getaddrinfo, gethostbyname, gethostbyname_ex


def _resolve_pending() -> None:
    """Look up the allowed names (once): the addresses they resolve to may be connected to, at the entry's port. Their
    look-ups are allowed, so the hook lets them through when it runs this."""
    entries, _state["pending"] = _state["pending"], ()
    addresses = set(_state["addresses"])
    for entry in entries:
        try:
            addresses |= {HostPort(_norm(info[4][0]), entry.port) for info in socket.getaddrinfo(entry.host, None)}
        except (OSError, UnicodeError):
            pass  # it does not resolve here: the connect that asked is refused, and says so
    _state["addresses"] = frozenset(addresses)


def guarded() -> tuple[str, ...] | None:
    """The hosts this process's guard lets through, as `--allow-host` takes them (for a child process to guard the
    same: capture/children.py); None where no guard is installed."""
    return tuple(str(a) for a in _state["allowed"]) if _state["installed"] else None


def take_refused() -> list[Refusal]:
    """The refusals since the last call (the worker adds them to the result of the rule that ran then)."""
    out, _state["refused"] = _state["refused"], []
    return out


def permitted(host, port=None) -> bool:
    """Whether the guard lets `host` (at `port`) through: this machine, an allowed entry, or an address of one."""
    if host is None:
        return True  # a passive look-up (for binding)
    h = _norm(host)
    if this_machine(h) or allowed_entry(_state["allowed"], h, port):
        return True
    return allowed_entry(_state["addresses"], h, port) is not None


_LOOKUPS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"}
_SENDS = {"socket.connect", "socket.sendto", "socket.sendmsg"}


def _hook(event: str, args: tuple) -> None:
    if not event.startswith("socket."):
        return
    if event in _SENDS:
        address = args[1] if len(args) > 1 else None
        if not (isinstance(address, tuple) and address and isinstance(address[0], (str, bytes))):
            return  # a Unix socket's path, a netlink address: this machine
        host, port, what = address[0], address[1] if len(address) > 1 else None, "connect"
    elif event in _LOOKUPS:  # an address given to getaddrinfo is the first step of a connect
        host, port = args[0], (args[1] if event == "socket.getaddrinfo" else None)
        what = "connect" if host is not None and _ip(_norm(host)) is not None else "look-up"
    elif event == "socket.getnameinfo":
        address = args[0] if args else None
        if not isinstance(address, tuple) or not address:
            return
        host, port, what = address[0], None, "look-up"
    else:
        return
    port = _port(port)
    if permitted(host, port):
        return
    if _state["pending"] and what == "connect":
        _resolve_pending()
        if permitted(host, port):
            return
    refusal = Refusal(what, _norm(host), port, _caller())
    _state["refused"].append(refusal)
    message = (f"trl-doctor contacts no other machine: {refusal.target()} is not this machine (allow it with "
               f"{ALLOW_OPTION} {refusal.target()})")
    if event in _SENDS:
        raise RefusedConnection(errno.EACCES, message)
    raise RefusedLookup(socket.EAI_NONAME, message)


def _port(port) -> int | None:
    """A port as the socket calls take it (an int, a service name, bytes), or None when it names none."""
    if isinstance(port, bytes):
        port = port.decode("ascii", "replace")
    if isinstance(port, str):
        return int(port) if port.isdigit() else None
    return port if isinstance(port, int) else None


def _caller() -> str:
    """`path:line` of the innermost frame outside the standard library and this module."""
    import sysconfig

    skip = tuple(p for p in {sysconfig.get_paths().get("stdlib"), os.path.dirname(__file__)} if p)
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(skip) and not path.startswith("<"):
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
