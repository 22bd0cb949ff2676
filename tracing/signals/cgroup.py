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
``cgroup.mem.swap_current_bytes`` (gauges); ``cgroup.mem.events.<name>`` (v2 counters).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from .base import COUNTER, GAUGE, SeriesMeta, parse_key_value_lines, read_text

#: v1 memory limits at or above this mean "no limit" (the kernel reports ~2^63 rounded to pages).
V1_UNLIMITED_BYTES = 1 << 62
MEMORY_EVENTS = ("low", "high", "max", "oom", "oom_kill")


# --------------------------------------------------------------------------- locating


@dataclass
class CgroupLocation:
    """Directories of a process's cgroups: ``cpu``/``cpuacct``/``memory`` → dir,
    each with the version (1 or 2) of the hierarchy it lives in."""

    dirs: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # hierarchy name → cgroup path

    @property
    def version(self) -> str:
        """"v1", "v2", "hybrid" (both in use) or "none"."""
        used = set(self.versions.values())
        if used == {1}:
            return "v1"
        if used == {2}:
            return "v2"
        return "hybrid" if used else "none"


def parse_proc_cgroup(text: str) -> list[tuple[str, list[str], str]]:
    """Parse /proc/<pid>/cgroup into (hierarchy id, controllers, path) per line."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], [c for c in parts[1].split(",") if c], parts[2]))
    return out


def parse_mountinfo_cgroups(text: str) -> list[tuple[str, str, str, list[str]]]:
    """Cgroup mounts from /proc/self/mountinfo: (mount point, root, fstype, super options)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((fields[4], fields[3], tail[0], tail[2].split(",")))
    return out


def _join(mount_point: str, mount_root: str, cgroup_path: str) -> str:
    """Directory of ``cgroup_path`` under a mount whose root is ``mount_root``."""
    if mount_root != "/" and (cgroup_path == mount_root or cgroup_path.startswith(mount_root + "/")):
        cgroup_path = cgroup_path[len(mount_root):]
    return os.path.join(mount_point, cgroup_path.lstrip("/"))


def locate_cgroups(proc_cgroup_text: str, mountinfo_text: str) -> CgroupLocation:
    """Where the cpu, cpuacct and memory cgroups of a process are mounted.

    A v1 hierarchy that carries the controller wins; otherwise the v2 unified
    hierarchy is used (its files are absent if the controller is not enabled).
    """
    mounts = parse_mountinfo_cgroups(mountinfo_text)
    location = CgroupLocation()
    unified = None
    for hierarchy, controllers, path in parse_proc_cgroup(proc_cgroup_text):
        if hierarchy == "0" and not controllers:
            unified = path
            location.paths["unified"] = path
            continue
        location.paths[",".join(controllers)] = path
        for controller in controllers:
            if controller not in ("cpu", "cpuacct", "memory"):
                continue
            for mount_point, root, fstype, options in mounts:
                if fstype == "cgroup" and controller in options:
                    location.dirs[controller] = _join(mount_point, root, path)
                    location.versions[controller] = 1
                    break
    if unified is not None:
        for mount_point, root, fstype, _ in mounts:
            if fstype == "cgroup2":
                for controller in ("cpu", "memory"):
                    if controller not in location.dirs:
                        location.dirs[controller] = _join(mount_point, root, unified)
                        location.versions[controller] = 2
                break
    return location


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


def parse_memory_v1(usage: str | None, limit: str | None, memsw_usage: str | None) -> dict[str, float]:
    """cgroup v1 memory: usage, limit (omitted when unlimited), swap = memsw - usage."""
    out: dict[str, float] = {}
    current = int(usage) if usage is not None and usage.strip().isdigit() else None
    if current is not None:
        out["cgroup.mem.current_bytes"] = float(current)
    if limit is not None and limit.strip().isdigit() and int(limit) < V1_UNLIMITED_BYTES:
        out["cgroup.mem.max_bytes"] = float(int(limit))
    if current is not None and memsw_usage is not None and memsw_usage.strip().isdigit():
        out["cgroup.mem.swap_current_bytes"] = float(max(0, int(memsw_usage) - current))
    return out


def parse_memory_v2(current: str | None, maximum: str | None, swap_current: str | None,
                    events: str | None) -> dict[str, float]:
    """cgroup v2 memory.current / memory.max ("max" = unlimited) / memory.swap.current / memory.events."""
    out: dict[str, float] = {}
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


def read_cgroup_values(location: CgroupLocation) -> dict[str, float]:
    """Read and parse every cpu and memory file of ``location`` once."""
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
        ))
    elif memory is not None:
        out.update(parse_memory_v2(
            read_optional(f"{memory}/memory.current"),
            read_optional(f"{memory}/memory.max"),
            read_optional(f"{memory}/memory.swap.current"),
            read_optional(f"{memory}/memory.events"),
        ))
    return out


def locate_process_cgroups(pid: int, proc_root: str = "/proc") -> CgroupLocation:
    """The cgroup directories of ``pid`` (reads /proc/<pid>/cgroup and our mountinfo)."""
    return locate_cgroups(read_text(f"{proc_root}/{pid}/cgroup"), read_text(f"{proc_root}/self/mountinfo"))


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
    **{
        f"cgroup.mem.events.{name}": SeriesMeta("count", COUNTER, f"memory.events {name} (v2 only)")
        for name in MEMORY_EVENTS
    },
}


class CgroupSampler:
    """CPU throttling/quota and memory of the target's cgroup(s).

    The cgroup is located once, at ``probe()``; a target moved to another
    cgroup later is not followed.
    """

    name = "cgroup"

    def __init__(self, pid: int | None, proc_root: str = "/proc"):
        self.pid = pid
        self.proc_root = proc_root
        self.location: CgroupLocation | None = None

    def probe(self) -> str | None:
        if self.pid is None:
            return "no target pid given"
        try:
            self.location = locate_process_cgroups(self.pid, self.proc_root)
        except OSError as exc:
            return f"cannot read cgroup of {self.pid}: {exc.strerror or exc}"
        if not self.location.dirs:
            return f"process {self.pid} has no cpu or memory cgroup mounted here"
        if not read_cgroup_values(self.location):
            return f"no readable cgroup files under {sorted(set(self.location.dirs.values()))}"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        return dict(CGROUP_SERIES)

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        return list(read_cgroup_values(self.location).items())
