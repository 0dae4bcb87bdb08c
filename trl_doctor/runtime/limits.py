"""The worker's memory limit: user code (a reward module that allocates without end), a dataset or a model config
can ask for more memory than the machine has. Without a limit the kernel's out-of-memory killer picks a process,
which may be the user's editor, or the whole machine swaps; with one, the allocation fails inside the worker as a
MemoryError, which the rule that ran it reports, and the check goes on.

The limit is RLIMIT_AS (address space), set in the worker only, and only where it is safe: not when the worker
may use CUDA (the CUDA driver reserves tens of GB of address space it never backs with memory). The default is 85%
of the machine's physical memory, at least 4 GiB; `--max-memory GIB` sets it, `--max-memory 0` turns it off."""

from __future__ import annotations

import os

MIN_BYTES = 4 * 2**30
SHARE = 0.85


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(max_memory_gib: float | None, uses_cuda: bool) -> int | None:
    """The address-space limit for the worker in bytes, or None for no limit."""
    if uses_cuda or max_memory_gib == 0:
        return None
    if max_memory_gib is not None:
        return max(int(max_memory_gib * 2**30), MIN_BYTES)
    total = physical_memory()
    return None if total is None else max(int(total * SHARE), MIN_BYTES)


def apply_memory_limit(limit: int | None) -> None:
    """Lower this process's RLIMIT_AS to `limit` (never raise it); a no-op where the platform has none."""
    if limit is None:
        return
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or limit < soft:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def describe(limit: int | None) -> str:
    return "none" if limit is None else f"{limit / 2**30:.1f} GiB of address space (--max-memory)"
