"""trl-doctor's scout, at the start of every Python process a launch starts while `trl-doctor check -- LAUNCH` runs it
(trl_doctor/capture/children.py puts this folder first on the launch's PYTHONPATH, and for a child started with -I or
-E, which ignore PYTHONPATH, a .pth in the check's own layer over site-packages runs this file; trl_doctor/capture/
child.py says what a scout does). Then the sitecustomize this one hides, if any, runs as it would have.

A process that cannot be made a scout (an interpreter that cannot import trl-doctor) does not run: it reports why and
ends, since run unguarded it could be the job."""

import os
import sys


def _scout() -> None:
    if not os.environ.get("TRL_DOCTOR_CHILD_CHANNEL"):
        return
    root = os.environ.get("TRL_DOCTOR_CHILD_ROOT")
    added = bool(root) and root not in sys.path
    if added:
        assert root is not None  # added only when set
        sys.path.append(root)
    try:
        from trl_doctor.capture import child
    except BaseException as exc:  # noqa: BLE001 - any failure: this process must not run unguarded
        _refuse(exc)
    finally:
        if added and root in sys.path:
            sys.path.remove(root)
    child.install()


def _refuse(exc: BaseException) -> None:
    import json
    import time

    channel = os.environ["TRL_DOCTOR_CHILD_CHANNEL"]
    record = {"version": 1, "event": "failed", "pid": os.getpid(), "ppid": os.getppid(), "time": time.time(),
              "argv": list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]),
              "executable": sys.executable, "cwd": os.getcwd(), "env": {},
              "error": {"type": "ScoutError", "where": None, "raised": None,
                        "message": f"this Python ({sys.version.split()[0]}, {sys.executable}) cannot import trl-doctor "
                                   f"to be checked ({type(exc).__name__}: {exc}); it was not run"}}
    try:
        path = os.path.join(channel, f"failed-{os.getpid()}-{time.monotonic_ns()}.json")
        with open(path + ".part", "w", encoding="utf-8") as f:
            json.dump(record, f, default=repr)
        os.replace(path + ".part", path)
    finally:
        os._exit(86)


def _next() -> None:
    """The sitecustomize further along the path (a virtualenv's, a test session's), as Python would have run it."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_scout()
if __name__ == "sitecustomize":  # not when the site-packages .pth runs this file (a child started with -I or -E)
    _next()
