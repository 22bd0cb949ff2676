"""GPU signals through NVML (nvidia-ml-py's ``pynvml``).

Per device index ``i``: utilisation, memory used and total, SM and memory
clocks, temperature, power, the clocks-event (throttle) reasons bitmask (also
decoded into one 0/1 series per reason) and the cumulative violation time per
performance policy (``nvmlDeviceGetViolationStatus``: how long clocks were
held below the requested ones for power, thermal, ... reasons; ns counters).
A metric the device does not support is found at probe time and left out.
Without a GPU or driver, ``probe()`` returns the NVML error as the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tailscope.signals.sampler import COUNTER, GAUGE, SeriesMeta

#: NVML clocks-event (formerly "throttle") reason bits and their series names.
CLOCKS_EVENT_REASONS = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


#: NVML performance policies of nvmlDeviceGetViolationStatus: constant name → series suffix.
VIOLATION_POLICIES = {
    "NVML_PERF_POLICY_POWER": "power",
    "NVML_PERF_POLICY_THERMAL": "thermal",
    "NVML_PERF_POLICY_SYNC_BOOST": "sync_boost",
    "NVML_PERF_POLICY_BOARD_LIMIT": "board_limit",
    "NVML_PERF_POLICY_LOW_UTILIZATION": "low_utilization",
    "NVML_PERF_POLICY_RELIABILITY": "reliability",
    "NVML_PERF_POLICY_TOTAL_APP_CLOCKS": "total_app_clocks",
    "NVML_PERF_POLICY_TOTAL_BASE_CLOCKS": "total_base_clocks",
}


def decode_clocks_event_reasons(mask: int) -> list[str]:
    """Names of the reason bits set in ``mask``, lowest bit first; unknown bits as ``bit_0xNNN``."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCKS_EVENT_REASONS.get(bit, f"bit_{bit:#x}"))
        bit <<= 1
    return names


def _clocks_event_reader(nvml) -> Callable:
    """nvmlDeviceGetCurrentClocksEventReasons, or the older ...ThrottleReasons name."""
    reader = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    return reader or nvml.nvmlDeviceGetCurrentClocksThrottleReasons


def _metric_readers(nvml) -> dict[str, tuple[SeriesMeta, Callable]]:
    """Suffix → (meaning, function(handle) → value in the stated unit)."""
    return {
        "util_pct": (SeriesMeta("%", GAUGE, "GPU utilisation (kernel running) over the last sample period"),
                     lambda h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
        "mem_used_bytes": (SeriesMeta("bytes", GAUGE, "device memory used"),
                           lambda h: float(nvml.nvmlDeviceGetMemoryInfo(h).used)),
        "sm_clock_mhz": (SeriesMeta("MHz", GAUGE, "SM clock"),
                         lambda h: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
        "temp_c": (SeriesMeta("degC", GAUGE, "GPU core temperature"),
                   lambda h: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))),
        "power_w": (SeriesMeta("W", GAUGE, "board power draw"),
                    lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
        "mem_total_bytes": (SeriesMeta("bytes", GAUGE, "device memory total"),
                            lambda h: float(nvml.nvmlDeviceGetMemoryInfo(h).total)),
        "mem_clock_mhz": (SeriesMeta("MHz", GAUGE, "memory clock"),
                          lambda h: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))),
        "clocks_event_reasons": (SeriesMeta("bitmask", GAUGE, "NVML clocks-event reasons bitmask"),
                                 lambda h: float(_clocks_event_reader(nvml)(h))),
        **_violation_readers(nvml),
    }


def _violation_readers(nvml) -> dict[str, tuple[SeriesMeta, Callable]]:
    """``violation.<policy>_ns`` → cumulative violation time (ns) of that policy."""
    readers = {}
    for constant, suffix in VIOLATION_POLICIES.items():
        policy = getattr(nvml, constant, None)
        if policy is None:
            continue
        readers[f"violation.{suffix}_ns"] = (
            SeriesMeta("ns", COUNTER, f"time clocks were held down by the {suffix} policy (nvmlDeviceGetViolationStatus)"),
            lambda h, policy=policy: float(nvml.nvmlDeviceGetViolationStatus(h, policy).violationTime),
        )
    return readers


class GpuSampler:
    """NVML metrics of every visible GPU. ``nvml`` is the pynvml module (or a fake)."""

    name = "gpu"

    def __init__(self, nvml=None):
        self._nvml = nvml
        self._handles: list = []
        self._readers: list[dict[str, Callable]] = []  # per device: suffix → reader

    def probe(self) -> str | None:
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nvml = self._nvml
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except ImportError as exc:
            return f"pynvml not importable: {exc}"
        except Exception as exc:  # noqa: BLE001 — pynvml raises NVMLError subclasses; report any as the reason
            return f"NVML unavailable: {exc}"
        if not self._handles:
            return "NVML found no GPU"
        self._readers = [self._supported_readers(handle) for handle in self._handles]
        return None

    def _supported_readers(self, handle) -> dict[str, Callable]:
        supported = {}
        for suffix, (_, reader) in _metric_readers(self._nvml).items():
            try:
                reader(handle)
            except Exception:  # noqa: BLE001 — NVMLError_NotSupported and friends: leave the metric out
                continue
            supported[suffix] = reader
        return supported

    def series(self) -> dict[str, SeriesMeta]:
        metas = {suffix: meta for suffix, (meta, _) in _metric_readers(self._nvml).items()} if self._nvml else {}
        out = {}
        for index, readers in enumerate(self._readers):
            for suffix in readers:
                out[f"gpu{index}.{suffix}"] = metas[suffix]
            if "clocks_event_reasons" in readers:
                for name in CLOCKS_EVENT_REASONS.values():
                    out[f"gpu{index}.clocks_event.{name}"] = SeriesMeta(
                        "bool", GAUGE, f"1 while NVML reports clocks reduced for {name}"
                    )
        return out

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        out = []
        for index, (handle, readers) in enumerate(zip(self._handles, self._readers)):
            for suffix, reader in readers.items():
                value = reader(handle)
                out.append((f"gpu{index}.{suffix}", value))
                if suffix == "clocks_event_reasons":
                    mask = int(value)
                    out.extend(
                        (f"gpu{index}.clocks_event.{name}", 1.0 if mask & bit else 0.0)
                        for bit, name in CLOCKS_EVENT_REASONS.items()
                    )
        return out
