"""One fork server for a call that checks several configs (`trl-doctor check a.yaml b.yaml ...`): the server imports
torch, transformers and TRL once, and every check's worker is forked from it, each still a fresh worker of its own
(trl_doctor.supervisor.forkserver). The call waits for the server before its first check: a first worker started
beside the server's imports paid them again at the same time (on 2 cores, 14.4 s for the first check and the server
ready only during the second, against 8.4 s for the server alone and 0.5 s a forked check). A server that dies or
does not serve within READY_S is not waited for: the checks start their workers from scratch. A call of one config,
--static (no worker), or a caller that already names a server (the test suite's) starts none.

The server serves only this process (--only-parent) and lives in a `trl-doctor-*` folder of its own
(trl_doctor.runtime.tmp: its working directory, its TMPDIR and its socket; never the user's folders), tagged as a
check's processes are. It is ended, and its folder removed, when the call ends however it ends; after a SIGKILL of
the call, the server leaves once it sees its parent gone, and the next check's sweep removes the folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

READY_S = 120.0  # the server's imports take 8 s on 2 idle cores


def warm_server(configs: int, static: bool = False) -> contextlib.AbstractContextManager:
    """A fork server named in this process's environment while the block runs, when `configs` workers will start
    and no server is named already; else nothing. --static imports nothing of the worker's side
    (tests/test_static.py): it returns before the fork server's module is imported."""
    if configs < 2 or static:
        return contextlib.nullcontext()
    from trl_doctor.supervisor.forkserver import ENV

    return contextlib.nullcontext() if os.environ.get(ENV) else _serving()


@contextlib.contextmanager
def _serving() -> Iterator[None]:
    """The call's own server, named in TRL_DOCTOR_FORKSERVER while the block runs; ended with its folder after."""
    from trl_doctor.runtime import tmp as _tmp
    from trl_doctor.runtime import tree as _tree
    from trl_doctor.supervisor.forkserver import ENV, serving
    from trl_doctor.supervisor.session import safe_python

    folder = _tmp.new_folder()
    sock = str(folder.path / "s")
    # what the imports make in TMPDIR (wandb's media and artifact folders) goes with the folder
    proc = subprocess.Popen([*safe_python("trl_doctor.supervisor.forkserver"), sock, "--only-parent"],
                            cwd=folder.path, env={**os.environ, "TMPDIR": str(folder.tmp), _tree.TAG_ENV: folder.tag},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    os.environ[ENV] = sock
    try:
        deadline = time.monotonic() + READY_S
        while not serving(sock) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        yield
    finally:
        os.environ.pop(ENV, None)
        # the server's group, and whatever still carries its tag: a process its workers forked without exec shows
        # the server's environment in /proc, not its check's
        _tree.end(proc.pid, folder.tag)
        proc.wait()
        _tmp.remove(folder.path)
