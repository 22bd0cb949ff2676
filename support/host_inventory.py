"""What hardware a run ran on, for its manifest: the CPU model and the GPUs with their driver.

Read once per run (not sampled): the CPU model from ``/proc/cpuinfo`` (``model name``; on Arm
``Hardware`` or ``CPU part``), the GPUs through NVML (nvidia-ml-py's ``pynvml``): name, UUID,
memory in bytes, and the driver and CUDA driver versions. Where a fact cannot be read it is
``None`` and :func:`gpu_inventory`'s ``nvml`` says why (``"pynvml not importable: ..."``,
``"NVML unavailable: ..."``, ``"NVML found no GPU"``): absent, never guessed.
"""

from __future__ import annotations

import platform

CPUINFO = "/proc/cpuinfo"


def cpu_model(cpuinfo_path: str = CPUINFO) -> str | None:
    """The CPU's model name (``"AMD EPYC 7B13"``), or None when it cannot be read."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return platform.processor() or None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key in ("model name", "Hardware", "Model", "cpu model", "CPU part"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or None


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def gpu_inventory(nvml=None) -> dict:
    """The visible GPUs through NVML: ``{"gpus": [{"index", "name", "uuid", "memory_bytes"}],
    "driver_version", "cuda_driver_version", "nvml"}``; ``nvml`` is None when NVML answered, else
    the reason it did not (then ``gpus`` is [] and the versions None). ``nvml``: the pynvml
    module (or a stand-in); imported when None."""
    facts: dict = {"gpus": [], "driver_version": None, "cuda_driver_version": None, "nvml": None}
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except ImportError as exc:
        facts["nvml"] = f"pynvml not importable: {exc}"
        return facts
    except Exception as exc:  # noqa: BLE001 — pynvml raises NVMLError subclasses; any is the reason
        facts["nvml"] = f"NVML unavailable: {exc}"
        return facts
    try:
        facts["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            facts["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:  # noqa: BLE001 — older drivers: leave it out
            pass
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            facts["gpus"].append({"index": index, "name": _text(nvml.nvmlDeviceGetName(handle)),
                                  "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                                  "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total)})
    except Exception as exc:  # noqa: BLE001
        facts["nvml"] = f"NVML unavailable: {exc}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    if facts["nvml"] is None and not facts["gpus"]:
        facts["nvml"] = "NVML found no GPU"
    return facts
