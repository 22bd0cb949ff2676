"""Host-wide signals from /proc: CPU time, context switches, load, memory, vmstat, disks.

Each sampler reads its file once per tick. Parsers are pure functions over the
file text so they can be tested against recorded content.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tailscope.signals.sampler import (
    CLOCK_TICKS_PER_S,
    COUNTER,
    GAUGE,
    OpenFiles,
    SeriesMeta,
    find_line_int,
    probe_readable,
)
from tailscope.support.procfs import read_text

PROC_STAT = "/proc/stat"
PROC_LOADAVG = "/proc/loadavg"
PROC_MEMINFO = "/proc/meminfo"
PROC_VMSTAT = "/proc/vmstat"
PROC_DISKSTATS = "/proc/diskstats"
SYS_BLOCK = "/sys/block"

# /proc/stat cpu line fields (clock ticks), in order.
_USER, _NICE, _SYSTEM, _IDLE, _IOWAIT, _IRQ, _SOFTIRQ, _STEAL = range(8)


def parse_proc_stat(text: str) -> tuple[dict[str, float], list[dict[str, float]], dict[str, int]]:
    """Parse /proc/stat.

    Returns ``(totals, per_cpu, counts)``. ``totals`` maps user, system,
    iowait, steal, idle to cumulative **seconds** over all CPUs (user includes
    nice; system includes irq and softirq). ``per_cpu`` has one dict per CPU,
    in CPU order, with the same modes plus ``busy`` (all time except idle and
    iowait), in cumulative seconds. ``counts`` holds ``ctxt`` (cumulative
    context switches), ``procs_running`` and ``procs_blocked`` (instantaneous)
    when present.
    """
    totals: dict[str, float] = {}
    per_cpu: list[dict[str, float]] = []
    counts: dict[str, int] = {}
    tick = 1.0 / CLOCK_TICKS_PER_S
    for line in text.splitlines():
        if line.startswith("cpu"):
            fields = [int(v) for v in line.split()[1:9]]
            fields += [0] * (8 - len(fields))
            modes = {
                "user": (fields[_USER] + fields[_NICE]) * tick,
                "system": (fields[_SYSTEM] + fields[_IRQ] + fields[_SOFTIRQ]) * tick,
                "iowait": fields[_IOWAIT] * tick,
                "steal": fields[_STEAL] * tick,
                "idle": fields[_IDLE] * tick,
            }
            if line.startswith("cpu "):
                totals = modes
            else:
                modes["busy"] = (sum(fields) - fields[_IDLE] - fields[_IOWAIT]) * tick
                del modes["idle"]
                per_cpu.append(modes)
        elif line.startswith(("ctxt ", "procs_running ", "procs_blocked ")):
            key, value = line.split()[:2]
            counts[key] = int(value)
    return totals, per_cpu, counts


PER_CPU_MODES = ("user", "system", "iowait", "steal", "busy")


class HostCpuSampler:
    """Host CPU time by mode (all CPUs and per CPU), context switches and the
    number of runnable / blocked tasks (/proc/stat)."""

    name = "host_cpu"

    def __init__(self, path: str = PROC_STAT):
        self.path = path
        self._n_cpus = 0
        self._files = OpenFiles()

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
            for mode in PER_CPU_MODES:
                what = "busy time (not idle/iowait)" if mode == "busy" else f"time in {mode} mode"
                out[f"host.cpu{cpu}.{mode}_s"] = SeriesMeta("s", COUNTER, f"CPU {cpu} {what}")
        out["host.ctxt"] = SeriesMeta("count", COUNTER, "context switches, all CPUs")
        out["host.procs_running"] = SeriesMeta("tasks", GAUGE, "runnable tasks (running or waiting for a CPU)")
        out["host.procs_blocked"] = SeriesMeta("tasks", GAUGE, "tasks blocked on I/O")
        return out

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        totals, per_cpu, counts = parse_proc_stat(self._files.read(self.path))
        out = [(f"host.cpu.{mode}_s", value) for mode, value in totals.items()]
        for cpu, modes in enumerate(per_cpu):
            out.extend((f"host.cpu{cpu}.{mode}_s", modes[mode]) for mode in PER_CPU_MODES)
        if "ctxt" in counts:
            out.append(("host.ctxt", float(counts["ctxt"])))
        for key in ("procs_running", "procs_blocked"):
            if key in counts:
                out.append((f"host.{key}", float(counts[key])))
        return out


class LoadAvgSampler:
    """1, 5 and 15 minute load averages (/proc/loadavg)."""

    name = "host_load"

    def __init__(self, path: str = PROC_LOADAVG):
        self.path = path
        self._files = OpenFiles()

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {
            f"host.load.{w}": SeriesMeta("tasks", GAUGE, f"{w} load average (runnable + uninterruptible)")
            for w in ("1m", "5m", "15m")
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        one, five, fifteen = self._files.read(self.path).split()[:3]
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
        self._files = OpenFiles()

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {
            "host.mem.used_bytes": SeriesMeta("bytes", GAUGE, "MemTotal - MemAvailable"),
            "host.mem.available_bytes": SeriesMeta("bytes", GAUGE, "MemAvailable"),
            "host.swap.used_bytes": SeriesMeta("bytes", GAUGE, "SwapTotal - SwapFree"),
            "host.swap.total_bytes": SeriesMeta("bytes", GAUGE, "SwapTotal (0: no swap configured)"),
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        text = self._files.read(self.path)
        info = {key: 1024 * (find_line_int(text, key + ":") or 0)
                for key in ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")}
        if find_line_int(text, "MemAvailable:") is None:  # kernels before 3.14
            info["MemAvailable"] = 1024 * (find_line_int(text, "MemFree:") or 0)
        available = info["MemAvailable"]
        return [
            ("host.mem.used_bytes", float(info.get("MemTotal", 0) - available)),
            ("host.mem.available_bytes", float(available)),
            ("host.swap.used_bytes", float(info.get("SwapTotal", 0) - info.get("SwapFree", 0))),
            ("host.swap.total_bytes", float(info.get("SwapTotal", 0))),
        ]


VMSTAT_COUNTERS = {
    "pswpin": ("pages", "pages swapped in"),
    "pswpout": ("pages", "pages swapped out"),
    "pgmajfault": ("count", "major page faults (needed disk I/O)"),
    "oom_kill": ("count", "processes killed by the OOM killer"),
}


class VmstatSampler:
    """Swap-in/out, major-fault and OOM-kill counters (/proc/vmstat)."""

    name = "host_vmstat"

    def __init__(self, path: str = PROC_VMSTAT):
        self.path = path
        self._files = OpenFiles()

    def probe(self) -> str | None:
        return probe_readable(self.path)

    def series(self) -> dict[str, SeriesMeta]:
        return {f"host.vm.{key}": SeriesMeta(unit, COUNTER, desc) for key, (unit, desc) in VMSTAT_COUNTERS.items()}

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        text = self._files.read(self.path)
        out = []
        for key in VMSTAT_COUNTERS:
            value = find_line_int(text, key + " ")
            if value is not None:
                out.append((f"host.vm.{key}", float(value)))
        return out


#: /proc/diskstats fields after (major, minor, name), 0-based: reads completed, sectors read,
#: writes completed, sectors written, I/Os in flight, ms doing I/O, weighted ms, flushes completed.
_READS, _SECTORS_READ, _WRITES, _SECTORS_WRITTEN, _IN_FLIGHT, _IO_MS, _WEIGHTED_MS, _FLUSHES = 0, 2, 4, 6, 8, 9, 10, 15
SECTOR_BYTES = 512  # diskstats sectors are always 512 bytes
#: Block devices that are not disks (their I/O is memory, or stacked on a disk already counted).
VIRTUAL_DISK_PREFIXES = ("loop", "ram", "zram", "dm-", "md", "nbd", "sr")
DISK_SERIES = {
    "reads": ("count", COUNTER, "read requests completed, all disks"),
    "writes": ("count", COUNTER, "write requests completed, all disks"),
    "read_bytes": ("bytes", COUNTER, "bytes read from disk, all disks"),
    "write_bytes": ("bytes", COUNTER, "bytes written to disk, all disks"),
    "flushes": ("count", COUNTER, "cache-flush requests completed (fsync, journal commits), all disks"),
    "busy_s": ("s", COUNTER, "time the disks had I/O in flight (io_ticks), summed over disks"),
    "queue_s": ("s", COUNTER, "request time summed over requests (weighted io_ticks): its rate is the mean "
                "number of requests in the disks' queues"),
    "in_flight": ("requests", GAUGE, "I/O requests in flight, all disks"),
}


def parse_diskstats(text: str, devices: Iterable[str] | None = None) -> dict[str, float]:
    """Sum /proc/diskstats over ``devices`` (None: every device) into ``DISK_SERIES`` keys.

    Bytes from 512-byte sectors, times in seconds; ``flushes`` only when the
    kernel reports them (5.5+: 17 fields after the name). Devices absent from the text are skipped.
    """
    wanted = None if devices is None else set(devices)
    out = {key: 0.0 for key in DISK_SERIES if key != "flushes"}
    flushes = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14 or (wanted is not None and parts[2] not in wanted):
            continue
        fields = [int(v) for v in parts[3:]]
        out["reads"] += fields[_READS]
        out["writes"] += fields[_WRITES]
        out["read_bytes"] += fields[_SECTORS_READ] * SECTOR_BYTES
        out["write_bytes"] += fields[_SECTORS_WRITTEN] * SECTOR_BYTES
        out["in_flight"] += fields[_IN_FLIGHT]
        out["busy_s"] += fields[_IO_MS] / 1000.0
        out["queue_s"] += fields[_WEIGHTED_MS] / 1000.0
        if len(fields) > _FLUSHES:
            flushes = (flushes or 0.0) + fields[_FLUSHES]
    if flushes is not None:
        out["flushes"] = flushes
    return out


def physical_disks(sys_block: str = SYS_BLOCK) -> list[str]:
    """Whole disks under /sys/block, without loop, RAM, device-mapper and other virtual devices."""
    try:
        names = sorted(os.listdir(sys_block))
    except OSError:
        return []
    return [name for name in names if not name.startswith(VIRTUAL_DISK_PREFIXES)]


class DiskSampler:
    """Disk I/O summed over the host's whole disks (/proc/diskstats): requests, bytes,
    flushes, busy time and queue time. Partitions and virtual devices are left out, so
    nothing is counted twice."""

    name = "host_disk"

    def __init__(self, path: str = PROC_DISKSTATS, sys_block: str = SYS_BLOCK):
        self.path = path
        self.sys_block = sys_block
        self._devices: list[str] = []
        self._has_flushes = False
        self._files = OpenFiles()

    def probe(self) -> str | None:
        reason = probe_readable(self.path)
        if reason is not None:
            return reason
        self._devices = physical_disks(self.sys_block)
        if not self._devices:
            return f"no disk in {self.sys_block}"
        self._has_flushes = "flushes" in parse_diskstats(read_text(self.path), self._devices)
        return None

    def series(self) -> dict[str, SeriesMeta]:
        disks = ", ".join(self._devices) or "none"
        return {f"host.disk.{key}": SeriesMeta(unit, kind, f"{text} ({disks})")
                for key, (unit, kind, text) in DISK_SERIES.items() if key != "flushes" or self._has_flushes}

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        values = parse_diskstats(self._files.read(self.path), self._devices)
        return [(f"host.disk.{key}", value) for key, value in values.items()]
