"""A stand-in for nvidia-ml-py's `pynvml`, for tests on machines without a GPU (CI).

Put this folder first on PYTHONPATH of a `trl-doctor` subprocess and describe the GPUs in
TRL_DOCTOR_FAKE_GPUS, as JSON text or the path of a JSON file:

    {"driver": "580.95.05", "cuda_driver": "13.0",
     "gpus": [{"name": "NVIDIA A10G", "total_mib": 23028, "free_mib": 22400, "compute_capability": "8.6",
               "processes": 0}]}

or {"error": "driver_not_loaded"} (or "library_not_found") for a machine whose NVML cannot start.
Only the functions trl-doctor calls exist; they return what the real ones return (str names, byte counts,
the CUDA driver version as 1000 × major + 10 × minor). The doctor's code does not know about this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801 (pynvml's own names)
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_DRIVER_NOT_LOADED)


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


_ERRORS = {"driver_not_loaded": NVMLError_DriverNotLoaded, "library_not_found": NVMLError_LibraryNotFound}
_state = {"initialised": 0}


def _spec() -> dict:
    text = os.environ.get("TRL_DOCTOR_FAKE_GPUS", "").strip()
    if not text:
        return {"error": "library_not_found"}
    if not text.startswith("{"):
        text = Path(text).read_text()
    return json.loads(text)


def _need_init() -> dict:
    if not _state["initialised"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _spec()


def nvmlInit() -> None:  # noqa: N802
    spec = _spec()
    if "error" in spec:
        raise _ERRORS[spec["error"]]()
    _state["initialised"] += 1


def nvmlShutdown() -> None:  # noqa: N802
    _need_init()
    _state["initialised"] -= 1


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    return str(_need_init().get("driver", "580.95.05"))


def nvmlSystemGetCudaDriverVersion() -> int:  # noqa: N802
    major, minor = str(_need_init().get("cuda_driver", "13.0")).split(".")[:2]
    return int(major) * 1000 + int(minor) * 10


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_need_init().get("gpus", []))


def nvmlDeviceGetHandleByIndex(index: int) -> SimpleNamespace:  # noqa: N802
    gpus = _need_init().get("gpus", [])
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return SimpleNamespace(index=index, spec=gpus[index])


def nvmlDeviceGetName(handle) -> str:  # noqa: N802
    return handle.spec["name"]


def nvmlDeviceGetUUID(handle) -> str:  # noqa: N802
    return handle.spec.get("uuid", f"GPU-00000000-0000-0000-0000-{handle.index:012d}")


def nvmlDeviceGetMemoryInfo(handle) -> SimpleNamespace:  # noqa: N802
    total = int(handle.spec["total_mib"]) * 2**20
    free = int(handle.spec["free_mib"]) * 2**20
    return SimpleNamespace(total=total, free=free, used=total - free)


def nvmlDeviceGetCudaComputeCapability(handle) -> tuple[int, int]:  # noqa: N802
    major, minor = str(handle.spec["compute_capability"]).split(".")
    return int(major), int(minor)


def nvmlDeviceGetComputeRunningProcesses(handle) -> list:  # noqa: N802
    return [SimpleNamespace(pid=1000 + i, usedGpuMemory=None) for i in range(int(handle.spec.get("processes", 0)))]
