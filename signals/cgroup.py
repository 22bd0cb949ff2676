"""Signals of the target's cgroup: CPU throttling and quota, memory use and limits.

Both cgroup v1 (per-controller hierarchies) and v2 (unified) are supported.
Parsers are pure functions over file texts; a file that does not exist is
passed as ``None`` and its fields are simply absent from the result, so old
kernels and partly-enabled controllers degrade instead of failing.

Series (same names for v1 and v2; see docs/signals.md):
``cgroup.cpu.usage_ns``, ``cgroup.cpu.nr_periods``, ``cgroup.cpu.nr_throttled``,
``cgroup.cpu.throttled_ns`` (counters); ``cgroup.cpu.quota_us`` (-1 unlimited),
``cgroup.cpu.period_us``, ``cgroup.cpu.limit_cores`` (only when limited);
``cgroup.mem.current_bytes``, ``cgroup.mem.max_bytes`` (only when limited),
``cgroup.mem.swap_current_bytes``, ``cgroup.mem.swap_max_bytes`` (only when
limited) (gauges); ``cgroup.mem.events.<name>`` (v2 counters),
``cgroup.mem.failcnt`` (v1 counter); ``cgroup.psi.<resource>.{some,full}_us``
(the cgroup's own pressure stall totals, from the unified hierarchy: v2, or a
v1 host whose cgroup2 mount carries no controllers).

The cgroup is found from a pid (``/proc/<pid>/cgroup``), from a cgroup path or
directory (``locate_cgroup_path``), or from a container id
(``find_container_cgroup``): those live in :mod:`tailscope.support.cgroups`,
which the fault injectors share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from tailscope.signals.sampler import COUNTER, GAUGE, OpenFiles, SeriesMeta
from tailscope.support.cgroups import CgroupLocation, locate_process_cgroups
from tailscope.support.procfs import parse_key_value_lines, read_text

#: v1 memory limits at or above this mean "no limit" (the kernel reports ~2^63 rounded to pages).
V1_UNLIMITED_BYTES = 1 << 62
MEMORY_EVENTS = ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")
PRESSURE_RESOURCES = ("cpu", "memory", "io")


# --------------------------------------------------------------------------- locating
# (where a process's cgroups are: tailscope.support.cgroups, shared with the fault injectors)


def cgroup_pids(location: CgroupLocation) -> list[int]:
    """Processes in the located cgroup (``cgroup.procs`` of its first directory)."""
    for directory in [*location.dirs.values(), location.unified_dir]:
        if directory is None:
            continue
        text = read_optional(f"{directory}/cgroup.procs")
        if text is not None:
            return [int(p) for p in text.split()]
    return []


# --------------------------------------------------------------------------- parsing


def parse_cpu_v1(cpu_stat: str | None, quota_us: str | None, period_us: str | None,
                 cpuacct_usage: str | None = None) -> dict[str, float]:
    """cgroup v1 cpu (+cpuacct) files → series values (throttled_time is already ns)."""
    out: dict[str, float] = {}
    if cpu_stat is not None:
        stat = parse_key_value_lines(cpu_stat)
        for key, series in (("nr_periods", "nr_periods"), ("nr_throttled", "nr_throttled"),
                            ("throttled_time", "throttled_ns")):
            if key in stat:
                out[f"cgroup.cpu.{series}"] = float(stat[key])
    quota = int(quota_us) if quota_us is not None and quota_us.strip().lstrip("-").isdigit() else None
    period = int(period_us) if period_us is not None and period_us.strip().isdigit() else None
    _add_quota(out, quota, period)
    if cpuacct_usage is not None and cpuacct_usage.strip().isdigit():
        out["cgroup.cpu.usage_ns"] = float(int(cpuacct_usage))
    return out


def parse_cpu_v2(cpu_stat: str | None, cpu_max: str | None) -> dict[str, float]:
    """cgroup v2 ``cpu.stat`` (µs fields → ns) and ``cpu.max`` ("max 100000" = unlimited)."""
    out: dict[str, float] = {}
    if cpu_stat is not None:
        stat = parse_key_value_lines(cpu_stat)
        if "usage_usec" in stat:
            out["cgroup.cpu.usage_ns"] = float(stat["usage_usec"] * 1000)
        for key in ("nr_periods", "nr_throttled"):
            if key in stat:
                out[f"cgroup.cpu.{key}"] = float(stat[key])
        if "throttled_usec" in stat:
            out["cgroup.cpu.throttled_ns"] = float(stat["throttled_usec"] * 1000)
    if cpu_max is not None:
        parts = cpu_max.split()
        if len(parts) == 2 and parts[1].isdigit():
            quota = -1 if parts[0] == "max" else int(parts[0]) if parts[0].isdigit() else None
            _add_quota(out, quota, int(parts[1]))
    return out


def _add_quota(out: dict[str, float], quota_us: int | None, period_us: int | None) -> None:
    if quota_us is not None:
        out["cgroup.cpu.quota_us"] = float(quota_us)
    if period_us is not None:
        out["cgroup.cpu.period_us"] = float(period_us)
    if quota_us is not None and quota_us > 0 and period_us:
        out["cgroup.cpu.limit_cores"] = quota_us / period_us


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def parse_memory_v1(usage: str | None, limit: str | None, memsw_usage: str | None,
                    failcnt: str | None = None, memsw_limit: str | None = None) -> dict[str, float]:
    """cgroup v1 memory: usage, limit (omitted when unlimited), swap = memsw - usage,
    swap limit = memsw limit - limit (omitted when either is unlimited), failcnt."""
    out: dict[str, float] = {}
    current = _int_or_none(usage)
    if current is not None:
        out["cgroup.mem.current_bytes"] = float(current)
    maximum = _int_or_none(limit)
    if maximum is not None and maximum < V1_UNLIMITED_BYTES:
        out["cgroup.mem.max_bytes"] = float(maximum)
    memsw = _int_or_none(memsw_usage)
    if current is not None and memsw is not None:
        out["cgroup.mem.swap_current_bytes"] = float(max(0, memsw - current))
    memsw_max = _int_or_none(memsw_limit)
    if (maximum is not None and memsw_max is not None
            and maximum < V1_UNLIMITED_BYTES and memsw_max < V1_UNLIMITED_BYTES):
        out["cgroup.mem.swap_max_bytes"] = float(max(0, memsw_max - maximum))
    failures = _int_or_none(failcnt)
    if failures is not None:
        out["cgroup.mem.failcnt"] = float(failures)
    return out


def parse_memory_v2(current: str | None, maximum: str | None, swap_current: str | None,
                    events: str | None, swap_max: str | None = None) -> dict[str, float]:
    """cgroup v2 memory.current / memory.max ("max" = unlimited) / memory.swap.current /
    memory.events / memory.swap.max ("max" = unlimited)."""
    out: dict[str, float] = {}
    if swap_max is not None and swap_max.strip().isdigit():
        out["cgroup.mem.swap_max_bytes"] = float(int(swap_max))
    if current is not None and current.strip().isdigit():
        out["cgroup.mem.current_bytes"] = float(int(current))
    if maximum is not None and maximum.strip().isdigit():
        out["cgroup.mem.max_bytes"] = float(int(maximum))
    if swap_current is not None and swap_current.strip().isdigit():
        out["cgroup.mem.swap_current_bytes"] = float(int(swap_current))
    if events is not None:
        counts = parse_key_value_lines(events)
        for name in MEMORY_EVENTS:
            if name in counts:
                out[f"cgroup.mem.events.{name}"] = float(counts[name])
    return out


# --------------------------------------------------------------------------- sampler


def read_optional(path: str) -> str | None:
    """File text, or None if it does not exist (or cannot be read)."""
    try:
        return read_text(path)
    except OSError:
        return None


#: Files holding limits, which change rarely (a fault injector, an operator):
#: :class:`CgroupFileReader` re-reads them at most every LIMITS_REFRESH_S.
LIMIT_FILES = frozenset({"cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.max", "memory.limit_in_bytes",
                         "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max"})
LIMITS_REFRESH_S = 1.0


class CgroupFileReader:
    """``read_optional`` that remembers which files are absent (cgroup files do
    not appear later) and re-reads limit files at most every ``refresh_s``:
    about half the reads of a tick on a v1 host."""

    def __init__(self, refresh_s: float = LIMITS_REFRESH_S):
        self.refresh_s = refresh_s
        self._absent: set[str] = set()
        self._limits: dict[str, tuple[float, str]] = {}
        self._files = OpenFiles()

    def __call__(self, path: str) -> str | None:
        if path in self._absent:
            return None
        is_limit = os.path.basename(path) in LIMIT_FILES
        if is_limit:
            cached = self._limits.get(path)
            if cached is not None and time.monotonic() < cached[0]:
                return cached[1]
        try:
            text = self._files.read(path)
        except OSError:
            text = None
        if text is None:
            self._absent.add(path)
        elif is_limit:
            self._limits[path] = (time.monotonic() + self.refresh_s, text)
        return text


def read_cgroup_values(location: CgroupLocation, read_optional=read_optional) -> dict[str, float]:
    """Read and parse every cpu, memory and pressure file of ``location`` once
    (``read_optional(path) -> text | None``: the file reader to use)."""
    out: dict[str, float] = {}
    cpu = location.dirs.get("cpu")
    if cpu is not None and location.versions["cpu"] == 1:
        acct = location.dirs.get("cpuacct")
        out.update(parse_cpu_v1(
            read_optional(f"{cpu}/cpu.stat"),
            read_optional(f"{cpu}/cpu.cfs_quota_us"),
            read_optional(f"{cpu}/cpu.cfs_period_us"),
            read_optional(f"{acct}/cpuacct.usage") if acct else None,
        ))
    elif cpu is not None:
        out.update(parse_cpu_v2(read_optional(f"{cpu}/cpu.stat"), read_optional(f"{cpu}/cpu.max")))
    memory = location.dirs.get("memory")
    if memory is not None and location.versions["memory"] == 1:
        out.update(parse_memory_v1(
            read_optional(f"{memory}/memory.usage_in_bytes"),
            read_optional(f"{memory}/memory.limit_in_bytes"),
            read_optional(f"{memory}/memory.memsw.usage_in_bytes"),
            read_optional(f"{memory}/memory.failcnt"),
            read_optional(f"{memory}/memory.memsw.limit_in_bytes"),
        ))
    elif memory is not None:
        out.update(parse_memory_v2(
            read_optional(f"{memory}/memory.current"),
            read_optional(f"{memory}/memory.max"),
            read_optional(f"{memory}/memory.swap.current"),
            read_optional(f"{memory}/memory.events"),
            read_optional(f"{memory}/memory.swap.max"),
        ))
    if location.unified_dir is not None and not location.unified_is_root:
        out.update(parse_cgroup_pressure({
            resource: read_optional(f"{location.unified_dir}/{resource}.pressure")
            for resource in PRESSURE_RESOURCES
        }))
    return out


def is_cgroup2_root(directory: str) -> bool:
    """Whether a cgroup2 directory is its hierarchy's root (only non-root cgroups have
    ``cgroup.type``; a container's namespaced root is not the host's root and has it)."""
    return os.path.isdir(directory) and not os.path.exists(os.path.join(directory, "cgroup.type"))


def parse_cgroup_pressure(texts: dict[str, str | None]) -> dict[str, float]:
    """``{resource: <resource>.pressure text or None}`` → ``cgroup.psi.<resource>.<scope>_us`` totals."""
    from tailscope.signals.psi import parse_pressure

    out: dict[str, float] = {}
    for resource, text in texts.items():
        if text is not None:
            for scope, total in parse_pressure(text).items():
                out[f"cgroup.psi.{resource}.{scope}_us"] = float(total)
    return out


CGROUP_SERIES = {
    "cgroup.cpu.usage_ns": SeriesMeta("ns", COUNTER, "CPU time used by the cgroup (v2 usage_usec, v1 cpuacct.usage)"),
    "cgroup.cpu.nr_periods": SeriesMeta("count", COUNTER, "CFS enforcement periods elapsed (cpu.stat)"),
    "cgroup.cpu.nr_throttled": SeriesMeta("count", COUNTER, "periods in which the cgroup was throttled (cpu.stat)"),
    "cgroup.cpu.throttled_ns": SeriesMeta("ns", COUNTER, "total time throttled (v1 throttled_time, v2 throttled_usec)"),
    "cgroup.cpu.quota_us": SeriesMeta("us", GAUGE, "CFS quota per period, -1 = unlimited (cpu.cfs_quota_us / cpu.max)"),
    "cgroup.cpu.period_us": SeriesMeta("us", GAUGE, "CFS period (cpu.cfs_period_us / cpu.max)"),
    "cgroup.cpu.limit_cores": SeriesMeta("cores", GAUGE, "quota / period; absent when unlimited"),
    "cgroup.mem.current_bytes": SeriesMeta("bytes", GAUGE, "memory charged to the cgroup (memory.current / usage_in_bytes)"),
    "cgroup.mem.max_bytes": SeriesMeta("bytes", GAUGE, "memory limit; absent when unlimited"),
    "cgroup.mem.swap_current_bytes": SeriesMeta("bytes", GAUGE, "swap used by the cgroup"),
    "cgroup.mem.swap_max_bytes": SeriesMeta("bytes", GAUGE, "swap limit (v2 memory.swap.max, v1 memsw limit - limit); absent when unlimited"),
    "cgroup.mem.failcnt": SeriesMeta("count", COUNTER, "times usage hit the memory limit (v1 memory.failcnt)"),
    **{
        f"cgroup.mem.events.{name}": SeriesMeta("count", COUNTER, f"memory.events {name} (v2 only)")
        for name in MEMORY_EVENTS
    },
    **{
        f"cgroup.psi.{resource}.{scope}_us": SeriesMeta(
            "us", COUNTER, f"time {'some task' if scope == 'some' else 'all tasks'} of the cgroup stalled on "
            f"{resource} ({resource}.pressure of the cgroup2 directory)")
        for resource in PRESSURE_RESOURCES for scope in ("some", "full")
    },
}


class CgroupSampler:
    """CPU throttling/quota, memory and pressure of the target's cgroup(s).

    Give a ``pid`` (its cgroup is located once, at ``probe()``: a target moved
    to another cgroup later is not followed) or a ready ``location`` (from
    :func:`locate_cgroup_path`, to sample a cgroup without a pid).
    """

    name = "cgroup"

    def __init__(self, pid: int | None, proc_root: str = "/proc", location: CgroupLocation | None = None):
        self.pid = pid
        self.proc_root = proc_root
        self.location = location
        self._given_location = location is not None
        self._reader = CgroupFileReader()

    def probe(self) -> str | None:
        if not self._given_location:
            if self.pid is None:
                return "no target pid or cgroup given"
            try:
                self.location = locate_process_cgroups(self.pid, self.proc_root)
            except OSError as exc:
                return f"cannot read cgroup of {self.pid}: {exc.strerror or exc}"
            if not self.location.dirs:
                return f"process {self.pid} has no cpu or memory cgroup mounted here"
        if self.location.unified_dir is not None:
            self.location.unified_is_root = is_cgroup2_root(self.location.unified_dir)
        if not read_cgroup_values(self.location):
            return f"no readable cgroup files under {sorted(set(self.location.dirs.values()))}"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        return dict(CGROUP_SERIES)

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        return list(read_cgroup_values(self.location, self._reader).items())
