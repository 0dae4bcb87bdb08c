"""The environment as a bug report needs it: package versions (read from metadata, without importing the
packages) and the GPUs (read through NVML, which answers in milliseconds and needs no CUDA context).

Plain functions, read afresh at each call (`trl-doctor env`, a report's header). A check reads the GPUs once,
as a fact of its context: `trl_doctor.facts.launch.launcher.nvml_gpus(ctx)`."""

from __future__ import annotations

import platform
import sys
from typing import Any

PACKAGES = ("trl", "transformers", "torch", "accelerate", "datasets", "peft", "vllm", "deepspeed", "tokenizers")


def package_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def torch_cuda_version() -> str | None:
    """torch's CUDA build, read from torch/version.py so that torch is not imported."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    try:
        m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]?([\w.]+)", path.read_text(), re.M)
    except OSError:
        return None
    return None if m is None or m.group(1) == "None" else m.group(1)


def gpus() -> tuple[list[dict[str, Any]], str | None]:
    """(list of GPUs, None) or ([], reason) when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return [], "the pynvml module (package nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return [], f"no NVIDIA driver ({type(exc).__name__}: {exc})"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        except Exception:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            out.append(
                {
                    "index": i,
                    "name": _text(pynvml.nvmlDeviceGetName(h)),
                    "memory_total_mib": mem.total // 2**20,
                    "memory_free_mib": mem.free // 2**20,
                    "memory_used_mib": mem.used // 2**20,
                    "memory_total_bytes": int(mem.total),
                    "memory_free_bytes": int(mem.free),  # free now: other processes' memory is already taken off
                    "compute_capability": f"{major}.{minor}",
                    "driver": driver,
                    "driver_cuda": f"{cuda // 1000}.{(cuda % 1000) // 10}",
                    "uuid": _optional(lambda h=h: _text(pynvml.nvmlDeviceGetUUID(h))),
                    # compute processes on the GPU (None when NVML may not list them, as in some containers)
                    "processes": _optional(lambda h=h: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))),
                }
            )
        return out, None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _optional(read: Any) -> Any:
    try:
        return read()
    except Exception:  # an NVML query this driver or container does not answer
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def environment() -> dict[str, Any]:
    versions = {name: package_version(name) for name in PACKAGES}
    gpu_list, why = gpus()
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "packages": versions,
        "torch_cuda": torch_cuda_version(),
        "gpus": gpu_list,
    }
    if why:
        env["gpu_note"] = why
    return env
