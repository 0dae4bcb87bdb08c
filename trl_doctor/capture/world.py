"""The launch's world size inside the capture: the script runs as rank 0 of the launch's N processes sees it.

Code that depends on the world size decides while the script runs to its trainer: a framework that maps each rank to
its own GPU (`device_map={"": f"cuda:{LOCAL_RANK}"}` when WORLD_SIZE > 1, as oumi's model builder does), TRL's
config checking its batch arithmetic against `world_size`, a script reading RANK to pick a seed. Run at world size 1
(the capture's one process) such code builds another job than the launch's. So, for a launch of N > 1 processes,
the capture sets what the launcher sets in rank 0's environment (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR/PORT) and starts a stand-in process group of N ranks that exchanges nothing (torch's fake backend:
collectives return at once, no other rank is waited for), so that accelerate's state, transformers' arguments and
TRL's config are built at world size N without starting the other N - 1 processes.

When the trainer is built (or the script ends) everything is put back before any rule or the smoke step runs: the
process group destroyed, accelerate's state reset (and started again at one process), the environment and torch's
thread count restored. Where the stand-in cannot be made (a torch without the fake backend, a process group the
script's own code started first), the script runs at world size 1 and the report says so.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

class NeedsOneProcess(Exception):
    """The script's set-up for the launch's ranks needs a GPU this machine lacks (a framework calling
    `torch.cuda.set_device(LOCAL_RANK)` and `torch.device(LOCAL_RANK)` before its process group): capture it again,
    in a fresh worker, at world size 1 (the message says why, and the report carries it)."""


# what torchrun / accelerate launch set in each process's environment (rank 0's values)
_RANK_ZERO = ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "ROLE_RANK")


def launcher_env(world: int, per_machine: int) -> dict[str, str]:
    """The environment rank 0 of a launch of `world` processes, `per_machine` on each machine, starts with."""
    env = {name: "0" for name in _RANK_ZERO}
    env.update(WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(per_machine), ROLE_WORLD_SIZE=str(world),
               GROUP_WORLD_SIZE=str(-(-world // max(1, per_machine))),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT") or "29500")
    return env


@contextmanager
def rank_zero_of(world: int, per_machine: int, has_cuda: bool) -> Iterator[str | None]:
    """Run the body as rank 0 of `world` processes; yields None when it does, else why it runs at world size 1."""
    if world <= 1:
        yield None
        return
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        yield "this torch is built without torch.distributed"
        return
    if dist.is_initialized():
        yield "a process group was already started"
        return
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend
    except Exception as exc:  # a torch without it: the script runs at one process, and the report says so
        yield f"torch {torch.__version__} has no stand-in process group ({type(exc).__name__}: {exc})"
        return
    env = launcher_env(world, per_machine)
    env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS") or str(torch.get_num_threads()))
    saved_env = {name: os.environ.get(name) for name in env}
    threads = torch.get_num_threads()
    os.environ.update(env)
    _reset_accelerate(None)  # a state started at one process before the script ran would hide the N
    original_init = dist.init_process_group
    try:
        dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=world)
    except Exception as exc:
        _restore_env(saved_env)
        yield f"the stand-in process group did not start ({type(exc).__name__}: {exc})"
        return

    def init_process_group(*args, **kwargs):  # the script's own start of the group: the stand-in is that group
        if not dist.is_initialized():
            return original_init(*args, **kwargs)
        return None

    dist.init_process_group = init_process_group
    try:
        yield None
    finally:
        dist.init_process_group = original_init
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass
        _restore_env(saved_env)
        torch.set_num_threads(threads)
        _reset_accelerate(has_cuda)


def _restore_env(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _reset_accelerate(has_cuda: bool | None) -> None:
    """accelerate's process state is one per process (a shared dict): reset it and (has_cuda not None) start it again
    at one process, so that the config objects the script built (whose `distributed_state` is that shared state) and
    the smoke step's own see one process, not the stand-in's N."""
    try:
        from accelerate.state import AcceleratorState, PartialState
    except Exception:
        return
    try:
        AcceleratorState._reset_state(True)
    except Exception:
        try:
            PartialState._reset_state()
        except Exception:
            return
    if has_cuda is None:
        return
    try:
        PartialState(cpu=not has_cuda)
    except Exception:
        pass
