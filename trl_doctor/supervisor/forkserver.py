"""A warm fork server for check workers: one process imports torch, transformers and TRL once, then forks a
fresh worker for each check it is asked to run.

A single `trl-doctor check` of one config never needs it (its one worker imports the heavy stack once anyway). It
is for callers that run many checks: `trl-doctor check` of several configs starts one for the call
(trl_doctor.supervisor.warm), and the test suite one per session, so they pay the imports once, and each check
still runs in its own fresh process, exactly the worker code a single check runs.

Only a caller whose environment resolves the same Python and the same torch, transformers, TRL and datasets
as the server is served (a test that puts another TRL release first on PYTHONPATH gets a fresh process).
The forked worker takes the caller's environment variables, working directory and PYTHONPATH before it
imports anything else, so a stand-in pynvml or a plugin on the caller's path is the one the worker sees.

    python -P -m trl_doctor.supervisor.forkserver SOCKET_PATH [--only-parent]
        # serve until killed (or its parent is gone); TRL_DOCTOR_FORKSERVER=SOCKET_PATH uses it

The worker never sees TRL_DOCTOR_FORKSERVER (nor do the user's code and its processes), and with --only-parent the
server forks only for the process that started it (the connecting process's pid, from the socket's peer
credentials): the user's code cannot ask it for a process outside its check's tree.

(-P, as for a started worker: the folder it is started from is not put first on sys.path, so a `json.py` there
shadows nothing.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any, cast

ENV = "TRL_DOCTOR_FORKSERVER"
PRELOAD = ("torch", "transformers", "trl", "datasets")
_MAX_HEADER = 1 << 24


def _origins() -> dict[str, str | None]:
    out = {}
    for name in PRELOAD:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        out[name] = spec.origin if spec is not None else None
    return out


# The variables the preloaded libraries (or Python itself) read when they are imported or start: a caller whose
# values differ gets a fresh process. Everything else (ACCELERATE_*, TRL_DOCTOR_*, WANDB_*...) is read at run time,
# and the forked worker takes the caller's values before it runs anything (TORCHINDUCTOR_CACHE_DIR, which torch sets
# itself when inductor is imported, among them).
_AT_IMPORT_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH_", "PYTORCH_", "DATASETS_", "TOKENIZERS_",
                       "TRL_", "XDG_", "OMP_", "MKL_", "KMP_", "LD_", "CUDA_", "NCCL_", "PYTHON")
_AT_RUN_TIME = {"TRL_DOCTOR_FORKSERVER", "TRL_DOCTOR_FAKE_GPUS", "TRL_DOCTOR_PROGRESS", "TRL_DOCTOR_STREAM",
                "PYTHONPATH", "CUDA_VISIBLE_DEVICES"}


def _effective(env, set_by_imports=()) -> dict[str, str]:
    """The variables that decide how the preloaded libraries were imported, as the worker would run with them."""
    from trl_doctor.runtime.quiet import quiet

    out = quiet(dict(env))
    skip = _AT_RUN_TIME | set(set_by_imports)
    return {k: v for k, v in out.items()
            if k not in skip and (k.startswith(_AT_IMPORT_PREFIXES) or k == "HOME") and not k.startswith("TRL_DOCTOR_")}


def _info_path(sock_path: str) -> Path:
    return Path(sock_path + ".json")


def serving(sock_path: str) -> bool:
    """Whether the server on `sock_path` has done its imports and serves (it writes its description then)."""
    return _info_path(sock_path).exists()


# -- the caller's side ----------------------------------------------------------------------------------------

class _Handle:
    """A forked worker as the caller sees it: the same poll / kill / wait as subprocess.Popen."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn = conn
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.conn.setblocking(False)
            try:
                self._read_status()
            except (BlockingIOError, InterruptedError):
                pass
            finally:
                self._settle()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.conn.settimeout(timeout)
            try:
                self._read_status()
            except socket.timeout:
                import subprocess

                # socket.timeout comes only with a timeout set
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", cast(float, timeout)) from None
            finally:
                self._settle()
        return self.returncode if self.returncode is not None else -9

    def _read_status(self) -> None:
        data = self.conn.recv(64)  # the server sends the exit status when it has reaped the worker
        self.returncode = int(data.decode().strip() or -9) if data else -9

    def _settle(self) -> None:
        """Close the connection once the status is known; else back to blocking reads."""
        if self.returncode is not None:
            self.conn.close()
        else:
            self.conn.settimeout(None)


def spawn(request: Any, channel_fd: int, log_fd: int, env: dict[str, str] | None = None) -> _Handle | None:
    """Fork a worker for `request` from the server named in TRL_DOCTOR_FORKSERVER, or None (start a process). The
    worker takes `env` (default: this process's environment)."""
    env = dict(os.environ) if env is None else env
    path = env.get(ENV)
    if not path:
        return None
    try:
        info = json.loads(_info_path(path).read_text())
    except (OSError, ValueError):
        return None
    if info.get("executable") != os.path.realpath(sys.executable) or info.get("origins") != _origins():
        return None  # another Python or another release of the heavy stack: a fresh process reads the right one
    if _effective(env, info.get("set_by_imports", ())) != info.get("environment"):
        return None  # libraries read some variables (HF_HOME, HF_MODULES_CACHE...) once, when they are imported
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        header = json.dumps({"request": request.to_json(), "env": without_server(env), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [len(header).to_bytes(8, "big") + header], [channel_fd, log_fd])
        pid = int(_readline(conn))
    except (OSError, ValueError):
        conn.close()
        return None
    return _Handle(conn, pid)


def without_server(env: dict[str, str]) -> dict[str, str]:
    """`env` as a worker gets it: without the fork server's socket."""
    return {k: v for k, v in env.items() if k != ENV}


def _readline(conn: socket.socket) -> str:
    out = b""
    while not out.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise OSError("the fork server closed the connection")
        out += chunk
    return out.decode()


# -- the server's side -----------------------------------------------------------------------------------------

def _warm_up() -> None:
    """What every check's worker pays first, paid once here: the stack's imports; the GRPO trainer, imported as a
    worker imports it, and the parser of `trl grpo` that reads a config's keys (trl 0.27's trl/scripts/grpo.py
    imports 0.25 s more: every forked worker of the network audit's sweep paid it); a weight initialised on the meta
    device, as the model facts do first (torch imports torch._dynamo there, 1-1.5 s that trl 0.15's imports leave
    out); every built-in rule and the facts they import (0.1-0.2 s)."""
    import torch

    from trl_doctor.facts.trl.installed import trainer_class
    from trl_doctor.facts.trl.parsing import trl_parser
    from trl_doctor.registry import builtin_rules

    for name in PRELOAD:
        __import__(name)
    trainer_class("grpo")
    trl_parser("grpo")
    with torch.device("meta"):
        torch.nn.Embedding(2, 2)
    builtin_rules()


def serve(path: str, only_parent: bool = False) -> None:
    """Serve forks on `path` until this process's parent is gone; with `only_parent`, for no other process."""
    from trl_doctor.runtime.quiet import quiet_environment

    parent = os.getppid()  # before the imports: a parent gone meanwhile is seen at the first timeout
    quiet_environment()
    before = dict(os.environ)
    _warm_up()

    # what the imports set themselves (torch sets TORCHINDUCTOR_CACHE_DIR): a caller that imported them too has it
    set_by_imports = sorted(k for k, v in os.environ.items() if before.get(k) != v)

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    _info_path(path).write_text(json.dumps({"executable": os.path.realpath(sys.executable), "origins": _origins(),
                                            "environment": _effective(before, set_by_imports),
                                            "set_by_imports": set_by_imports, "pid": os.getpid()}))
    server.settimeout(2.0)
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            if os.getppid() != parent:  # whoever started it is gone (a test session killed midway): so is it
                return
            continue
        conn.settimeout(None)
        if only_parent and _peer_pid(conn) != parent:
            conn.close()
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(conn, _MAX_HEADER + 8, 2)
            size = int.from_bytes(msg[:8], "big")
            while len(msg) < size + 8:
                msg += conn.recv(size + 8 - len(msg))
            header = json.loads(msg[8:].decode())
        except (OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            _child(header, *fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        threading.Thread(target=_reap, args=(conn, pid), daemon=True).start()


def _peer_pid(conn: socket.socket) -> int | None:
    """The pid of the process at the other end of `conn` (SO_PEERCRED), None where the system cannot say."""
    import struct

    try:
        return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
    except (OSError, AttributeError):
        return None


def _reap(conn: socket.socket, pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:
        pass
    finally:
        conn.close()


def _keep(channel_fd: int, log_fd: int) -> None:
    """Fork the worker itself and stay as its keeper: a forked worker's environment (/proc/PID/environ) is the
    server's, so a daemon it double-forks carries no check tag (trl_doctor.runtime.tree). The keeper is a subreaper: when the
    worker ends, however it ends, its orphans are the keeper's children, which it kills before it exits with the
    worker's own status (a signal that killed the worker kills the keeper)."""
    import signal

    from trl_doctor.runtime import tree as _tree

    pid = os.fork()
    if pid == 0:
        return  # the worker
    os.close(channel_fd)
    os.close(log_fd)
    _, status = os.waitpid(pid, 0)
    for _ in range(_tree.END_ROUNDS):
        left = _tree.descendants(os.getpid())
        if not left:
            break
        for child in left:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL's action cannot be changed (nor needs to be)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 1)


def _child(header: dict, channel_fd: int, log_fd: int) -> None:
    """Become the caller's worker: its environment, folder and path first, then the worker's own code."""
    code = 1
    from trl_doctor.worker import main as _worker

    try:
        os.setsid()  # a session and process group of its own, as a started worker has
        _worker.own_tree()  # the keeper's
        _keep(channel_fd, log_fd)
        _worker.own_tree()  # the worker's (a fork does not inherit it)
        os.environ.clear()
        os.environ.update(header["env"])
        import tempfile

        tempfile.tempdir = None  # read TMPDIR again: the check's own folder
        os.chdir(header["cwd"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [p for p in extra if p not in sys.path]
        sys.modules.pop("pynvml", None)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        if log_fd > 2:
            os.close(log_fd)
        from trl_doctor.protocol import Request

        send = _worker.open_channel(channel_fd)
        request = Request.from_json(header["request"])
        _worker.isolate(request)
        _worker.serve(request, send)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _worker.end_own_tree()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # the user's code closed it: the exit status must still be the worker's own
                pass
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], only_parent="--only-parent" in sys.argv[2:])
