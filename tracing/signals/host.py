"""Host-wide signals from /proc: CPU time, context switches, load, memory, vmstat.

Each sampler reads its file once per tick. Parsers are pure functions over the
file text so they can be tested against recorded content.
"""

from __future__ import annotations

from typing import Iterable

from .base import CLOCK_TICKS_PER_S, COUNTER, GAUGE, SeriesMeta, find_line_int, probe_readable, read_text

PROC_STAT = "/proc/stat"
PROC_LOADAVG = "/proc/loadavg"
PROC_MEMINFO = "/proc/meminfo"
PROC_VMSTAT = "/proc/vmstat"

# /proc/stat cpu line fields (clock ticks), in order.
_USER, _NICE, _SYSTEM, _IDLE, _IOWAIT, _IRQ, _SOFTIRQ, _STEAL = range(8)


def parse_proc_stat(text: str) -> tuple[dict[str, float], list[float], int | None]:
    """Parse /proc/stat.

    Returns ``(totals, per_cpu_busy, ctxt)``: ``totals`` maps user, system,
    iowait, steal, idle to cumulative **seconds** over all CPUs (user includes
    nice; system includes irq and softirq); ``per_cpu_busy`` is each CPU's
    cumulative busy seconds (all time except idle and iowait), in CPU order;
    ``ctxt`` is the cumulative context-switch count (None if absent).
    """
    totals: dict[str, float] = {}
    per_cpu: list[float] = []
    ctxt = None
    tick = 1.0 / CLOCK_TICKS_PER_S
    for line in text.splitlines():
        if line.startswith("cpu"):
            fields = [int(v) for v in line.split()[1:9]]
            fields += [0] * (8 - len(fields))
            if line.startswith("cpu "):
                totals = {
                    "user": (fields[_USER] + fields[_NICE]) * tick,
                    "system": (fields[_SYSTEM] + fields[_IRQ] + fields[_SOFTIRQ]) * tick,
                    "iowait": fields[_IOWAIT] * tick,
                    "steal": fields[_STEAL] * tick,
                    "idle": fields[_IDLE] * tick,
                }
            else:
                per_cpu.append((sum(fields) - fields[_IDLE] - fields[_IOWAIT]) * tick)
        elif line.startswith("ctxt "):
            ctxt = int(line.split()[1])
    return totals, per_cpu, ctxt


class HostCpuSampler:
    """Host CPU time by mode, per-CPU busy time and context switches (/proc/stat)."""

    name = "host_cpu"

    def __init__(self, path: str = PROC_STAT):
        self.path = path
        self._n_cpus = 0

    def probe(self) -> str | None:
        reason = probe_readable(self.path)
        if reason is None:
            self._n_cpus = len(parse_proc_stat(read_text(self.path))[1])
        return reason

    def series(self) -> dict[str, SeriesMeta]:
        out = {
            f"host.cpu.{mode}_s": SeriesMeta("s", COUNTER, f"CPU time in {mode} mode, all CPUs ({self.path})")
            for mode in ("user", "system", "iowait", "steal", "idle")
        }
        for cpu in range(self._n_cpus):
            out[f"host.cpu{cpu}.busy_s"] = SeriesMeta("s", COUNTER, f"CPU {cpu} busy time (not idle/iowait)")
        out["host.ctxt"] = SeriesMeta("count", COUNTER, "context switches, all CPUs")
        return out

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        totals, per_cpu, ctxt = parse_proc_stat(read_text(self.path))
        out = [(f"host.cpu.{mode}_s", value) for mode, value in totals.items()]
        out.extend((f"host.cpu{cpu}.busy_s", busy) for cpu, busy in enumerate(per_cpu))
        if ctxt is not None:
            out.append(("host.ctxt", float(ctxt)))
        return out


class LoadAvgSampler:
    """1, 5 and 15 minute load averages (/proc/loadavg)."""

    name = "host_load"

    def __init__(self, path: str = PROC_LOADAVG):
        self.path = path

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {
            f"host.load.{w}": SeriesMeta("tasks", GAUGE, f"{w} load average (runnable + uninterruptible)")
            for w in ("1m", "5m", "15m")
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        one, five, fifteen = read_text(self.path).split()[:3]
        return [("host.load.1m", float(one)), ("host.load.5m", float(five)), ("host.load.15m", float(fifteen))]


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse /proc/meminfo into bytes per field (``kB`` values are multiplied by 1024)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


class MemorySampler:
    """Host memory used/available and swap used (/proc/meminfo), in bytes."""

    name = "host_memory"

    def __init__(self, path: str = PROC_MEMINFO):
        self.path = path

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {
            "host.mem.used_bytes": SeriesMeta("bytes", GAUGE, "MemTotal - MemAvailable"),
            "host.mem.available_bytes": SeriesMeta("bytes", GAUGE, "MemAvailable"),
            "host.swap.used_bytes": SeriesMeta("bytes", GAUGE, "SwapTotal - SwapFree"),
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        info = parse_meminfo(read_text(self.path))
        available = info.get("MemAvailable", info.get("MemFree", 0))
        return [
            ("host.mem.used_bytes", float(info.get("MemTotal", 0) - available)),
            ("host.mem.available_bytes", float(available)),
            ("host.swap.used_bytes", float(info.get("SwapTotal", 0) - info.get("SwapFree", 0))),
        ]


VMSTAT_COUNTERS = {
    "pswpin": ("pages", "pages swapped in"),
    "pswpout": ("pages", "pages swapped out"),
    "pgmajfault": ("count", "major page faults (needed disk I/O)"),
}


class VmstatSampler:
    """Swap-in/out and major-fault counters (/proc/vmstat)."""

    name = "host_vmstat"

    def __init__(self, path: str = PROC_VMSTAT):
        self.path = path

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {f"host.vm.{key}": SeriesMeta(unit, COUNTER, desc) for key, (unit, desc) in VMSTAT_COUNTERS.items()}

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        text = read_text(self.path)
        out = []
        for key in VMSTAT_COUNTERS:
            value = find_line_int(text, key + " ")
            if value is not None:
                out.append((f"host.vm.{key}", float(value)))
        return out
