"""The launch: how many training processes it starts and where that number comes from, the GPUs the job
can see (NVML, after CUDA_VISIBLE_DEVICES), and the accelerate settings it is started with.

Read without torch: NVML answers in milliseconds and needs no CUDA context.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .._env import gpus, package_version, torch_cuda_version
from .trl import trl_root

__all__ = ["gpus", "package_version", "torch_cuda_version", "visible_gpus", "launch_processes", "is_geometry_error", "job_gpus"]

_GEOMETRY_WORDS = ("batch", "generations", "steps_per_generation", "mini_batch", "rloo_k")


def is_geometry_error(text: str) -> bool:
    """Whether TRL's error text is about the batch arithmetic (a process count can explain it)."""
    return any(w in text for w in _GEOMETRY_WORDS)


def visible_gpus(found: list[dict], env_value: str | None) -> tuple[list[dict], str | None]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves visible (indices in NVML's order, or GPU- UUID prefixes), and a note."""
    if env_value is None:
        return found, None
    if not env_value.strip():
        return [], "CUDA_VISIBLE_DEVICES is set and empty: no GPU is visible to the job"
    out: list[dict] = []
    for item in (x.strip() for x in env_value.split(",")):
        if re.fullmatch(r"-?\d+", item):
            hit = [g for g in found if g["index"] == int(item)]
        elif item.startswith("GPU-"):
            hit = [g for g in found if (g.get("uuid") or "").startswith(item)]
        else:
            return found, f"CUDA_VISIBLE_DEVICES={env_value!r} (MIG or another form) is not applied: all GPUs counted"
        if not hit or hit[0] in out:
            break  # CUDA stops at the first entry that names no device
        out.append(hit[0])
    names = ", ".join(str(g["index"]) for g in out) or "none"
    return out, f"CUDA_VISIBLE_DEVICES={env_value!r}: NVML GPUs {names} (assuming CUDA_DEVICE_ORDER=PCI_BUS_ID order)"



def launch_processes(ctx) -> tuple[int, dict]:
    """(training processes, {"words": where the number comes from, "note": optional}) for this launch."""
    opt = getattr(ctx.options, "num_processes", None)
    if opt:
        return int(opt), {"words": "--num-processes"}
    raw = ctx.config.raw
    n = _positive_int(raw.get("num_processes"))
    if n:
        return n, {"words": "`num_processes` in the config, passed to accelerate launch"}
    notes = []
    for key in ("accelerate_config", "config_file"):
        ref = raw.get(key)
        if not isinstance(ref, str) or not ref:
            continue
        path = _accelerate_config_path(ref, ctx.config.base_dir)
        if path is None:
            notes.append(f"`{key}: {ref}` names no file (nor a TRL built-in accelerate config): not read")
            continue
        n, why = _accelerate_num_processes(path)
        if n:
            return n, {"words": f"`{key}: {ref}` sets num_processes {n}", "note": f"{key}: {path}"}
        notes.append(f"`{key}: {ref}` ({path}): {why}")
    default = _default_accelerate_config()
    if default is not None:
        n, why = _accelerate_num_processes(default)
        if n:
            return n, {"words": f"num_processes in accelerate's default config {default}", "note": "; ".join(notes) or None}
        notes.append(f"{default}: {why}")
    visible, reason = job_gpus()
    if visible:
        return len(visible), {"words": f"{len(visible)} visible GPU{'s' if len(visible) != 1 else ''}: accelerate launch "
                                       "starts one process per GPU", "note": "; ".join(notes) or None}
    notes.append(f"no GPU here ({reason}); pass --num-processes N (or set num_processes) for the training machine")
    return 1, {"words": "no GPU visible, no num_processes given", "note": "; ".join(notes)}


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def _accelerate_config_path(ref: str, base: Path) -> Path | None:
    p = Path(ref).expanduser()
    p = p if p.is_absolute() else base / p
    if p.is_file():
        return p.resolve()
    root = trl_root()
    builtin = root / "accelerate_configs" / f"{ref}.yaml" if root else None
    return builtin if builtin is not None and builtin.is_file() else None


def _accelerate_num_processes(path: Path) -> tuple[int | None, str]:

    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return None, f"cannot read it ({type(exc).__name__})"
    if not isinstance(data, dict):
        return None, "not a mapping"
    n = _positive_int(data.get("num_processes"))
    return (n, "") if n else (None, f"num_processes is {data.get('num_processes')!r}")


def _default_accelerate_config() -> Path | None:
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    folder = Path(home).expanduser() / "accelerate"
    for name in ("default_config.yaml", "default_config.json"):
        if (folder / name).is_file():
            return folder / name
    return None


def job_gpus() -> tuple[list[dict], str | None]:
    """The GPUs the job sees (NVML after CUDA_VISIBLE_DEVICES), and why there are none, when there are none."""
    found, why = gpus()
    visible, note = visible_gpus(found, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return visible, why or note or "NVML reports no GPU"
