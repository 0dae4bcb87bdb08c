"""The test session's network audit (issue 42), independent of trl-doctor's own guard: a PEP 578 audit hook that
writes every socket connect and name look-up outside loopback (127.0.0.0/8, ::1, `localhost`) to the file named by
TRL_DOCTOR_TEST_NET_AUDIT, one line each, with the process and its command.

tests/conftest.py installs it in the pytest processes and puts this folder first on PYTHONPATH, so that Python
imports this file at the start of every process the tests start: the doctor's printing process, its worker (the fork
server's too), the user's scripts. A test that contacts another machine on purpose names it in
TRL_DOCTOR_TEST_NET_ALLOW (comma-separated hosts). The session fails when the file holds a line
(conftest.pytest_sessionfinish).

Package installers the tests' set-up runs are not audited: pip fetching the real TRL releases some tests read from
PyPI (tests/conftest.py: real_trl), virtualenv and pre-commit building hook environments. They are the test machine's
set-up, never the doctor or a process it starts."""

import ipaddress
import os
import sys

try:
    import socket as _socket

    _HOSTNAME = _socket.gethostname().lower()
except OSError:
    _HOSTNAME = "localhost"
_SENDS = ("socket.connect", "socket.sendto", "socket.sendmsg")
_LOOKUPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr")


def _loopback(host) -> bool:
    if host is None:  # a passive look-up, for binding
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    h = str(host).strip("[]").split("%", 1)[0].lower().rstrip(".")
    if h in os.environ.get("TRL_DOCTOR_TEST_NET_ALLOW", "").lower().split(","):
        return True
    if h == "localhost" or h.endswith(".localhost") or h == _HOSTNAME:
        return True  # this machine's own name (torchrun asks for its fully qualified form)
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


_SKIP = []  # [True] in a package installer (decided at its first socket event: sys.argv is not set yet at start-up)


def _hook(event, args):
    if not event.startswith("socket."):
        return
    log = os.environ.get("TRL_DOCTOR_TEST_NET_AUDIT")
    if not log:
        return
    if not _SKIP:
        _SKIP.append(_installer())
    if _SKIP[0]:
        return
    if event in _SENDS:
        address = args[1] if len(args) > 1 else None
        if not (isinstance(address, tuple) and address and isinstance(address[0], (str, bytes))):
            return  # a Unix socket's path (the fork server's), a netlink address
        host = address[0]
    elif event in _LOOKUPS:
        host = args[0]
    elif event == "socket.getnameinfo":
        host = args[0][0] if args and isinstance(args[0], tuple) and args[0] else None
    else:
        return
    if _loopback(host):
        return
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"pid {os.getpid()}: {event} {host!r} ({' '.join(sys.argv)[:300]})\n")


def _installer() -> bool:
    command = " ".join(sys.argv[:2])
    return "/pip/__main__.py" in command or "/virtualenv/" in command or command.endswith(" pip")


def install() -> None:
    if not getattr(sys, "_trl_doctor_test_net_audit", False):
        sys._trl_doctor_test_net_audit = True
        sys.addaudithook(_hook)


install()
