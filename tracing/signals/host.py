"""Host-wide signals from /proc: CPU time, context switches, load, memory, vmstat.

Each sampler reads its file once per tick. Parsers are pure functions over the
file text so they can be tested against recorded content.
"""

from __future__ import annotations

from typing import Iterable

from .base import CLOCK_TICKS_PER_S, COUNTER, GAUGE, OpenFiles, SeriesMeta, find_line_int, probe_readable, read_text

PROC_STAT = "/proc/stat"
PROC_LOADAVG = "/proc/loadavg"
PROC_MEMINFO = "/proc/meminfo"
PROC_VMSTAT = "/proc/vmstat"

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
