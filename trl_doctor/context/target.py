"""`--target NxMODEL`: the launch machine's GPUs, described from the data table trl_doctor/data/gpus.yaml, so that
the GPU verdicts judge the machine the job will run on from a laptop or a CPU CI runner.

Light (yaml only): the command line validates a target before any worker starts.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from trl_doctor.errors import InputError

TABLE = Path(__file__).resolve().parents[1] / "data" / "gpus.yaml"
MAX_GPUS = 64


def gpu_table() -> dict[str, dict[str, Any]]:
    import yaml

    return yaml.safe_load(TABLE.read_text(encoding="utf-8"))


def target_gpus(spec: str) -> list[dict[str, Any]]:
    """The GPUs `spec` ("8xH100-80GB", "1xT4", "A10G") describes, in NVML's shape (no driver: it is not this machine).
    Parsed once per process (the front door validates it, --static's launch fact reads it again): each call gets
    its own copies."""
    return [dict(gpu) for gpu in _parsed(spec)]


@lru_cache(maxsize=8)
def _parsed(spec: str) -> tuple[dict[str, Any], ...]:
    m = re.fullmatch(r"\s*(?:(\d+)\s*[xX×]\s*)?([A-Za-z0-9-]+)\s*", spec or "")
    table = gpu_table()
    by_key = {k.upper(): k for k in table}
    if m is None or m.group(2).upper() not in by_key:
        raise InputError(f"--target {spec!r}: expected COUNTxMODEL such as 8xH100-80GB; known models: "
                         f"{', '.join(table)}")
    count = int(m.group(1) or 1)
    if not 1 <= count <= MAX_GPUS:
        raise InputError(f"--target {spec!r}: the GPU count must be 1 to {MAX_GPUS}")
    key = by_key[m.group(2).upper()]
    gpu = table[key]
    mib = int(gpu["memory_mib"])
    return tuple({
        "index": i, "name": gpu["name"], "memory_total_mib": mib, "memory_free_mib": mib, "memory_used_mib": 0,
        "memory_total_bytes": mib * 2**20, "memory_free_bytes": mib * 2**20,
        "compute_capability": str(gpu["compute_capability"]), "driver": None, "driver_cuda": None, "uuid": None,
        "processes": 0, "target": f"{count}x{key}",
    } for i in range(count))
