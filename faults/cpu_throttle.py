"""cpu_throttle: a CFS bandwidth limit (quota per period) on the target's cgroup for a window.

Mechanism: cgroup v1 ``cpu.cfs_period_us`` + ``cpu.cfs_quota_us``, v2
``cpu.max = "<quota> <period>"``, with ``quota = cpus × period``. When the
target is alone in its cpu cgroup (a container, the lab's launcher) the limit
is set on that cgroup and the old one restored afterwards; the samplers then
see ``cgroup.cpu.throttled_ns`` rise during the window only. Otherwise a child
cgroup ``tailscope-<run>-<pid>`` is created under the target's cgroup, the
target (every thread) is moved into it for the window, moved back, and the
child removed; its throttling is then reported in the ground truth only
(the samplers keep watching the original cgroup). Needs root and a writable
cpu controller (v1, or v2 with ``cpu`` in the parent's subtree control).
"""

from __future__ import annotations

import os

from tailscope.faults.cgroupfs import (
    CgroupDir,
    make_child,
    move_process,
    owns_cgroup,
    remove_cgroup,
    require_writable,
    target_cgroup,
)
from tailscope.faults.injector import Injector, Param, require_root
from tailscope.support.procfs import parse_key_value_lines

V1_FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cgroup.procs")
V2_FILES = ("cpu.max", "cgroup.procs")
#: Smallest CFS quota the kernel accepts (µs).
MIN_QUOTA_US = 1000


def cpu_stat(cgroup: CgroupDir) -> dict[str, int]:
    """``nr_periods``, ``nr_throttled``, ``throttled_ns`` of a cgroup (v1 and v2 alike)."""
    stat = parse_key_value_lines(cgroup.read("cpu.stat"))
    throttled_ns = stat.get("throttled_time", stat.get("throttled_usec", 0) * 1000)
    return {"nr_periods": int(stat.get("nr_periods", 0)), "nr_throttled": int(stat.get("nr_throttled", 0)),
            "throttled_ns": int(throttled_ns)}


def read_limit(cgroup: CgroupDir) -> tuple[int, int]:
    """(quota µs, −1 for none; period µs) of a cgroup."""
    if cgroup.version == 1:
        return int(cgroup.read("cpu.cfs_quota_us")), int(cgroup.read("cpu.cfs_period_us"))
    quota, period = cgroup.read("cpu.max").split()
    return (-1 if quota == "max" else int(quota)), int(period)


def write_limit(cgroup: CgroupDir, quota_us: int, period_us: int) -> None:
    """Set the CFS limit (quota −1: none)."""
    if cgroup.version == 1:
        if quota_us < 0:
            cgroup.write("cpu.cfs_quota_us", "-1")
            cgroup.write("cpu.cfs_period_us", str(period_us))
        else:
            cgroup.write("cpu.cfs_period_us", str(period_us))
            cgroup.write("cpu.cfs_quota_us", str(quota_us))
    else:
        cgroup.write("cpu.max", f"{'max' if quota_us < 0 else quota_us} {period_us}")


class CpuThrottle(Injector):
    kind = "cpu_throttle"
    summary = "CFS quota (cpus × period) on the target's cpu cgroup for the window"
    requires = "root; cgroup v1 cpu controller, or v2 with the cpu controller delegated"
    params = {
        "cpus": Param("number", 0.3, "CPU time allowed per period, in CPUs (0.3 = 30 % of one CPU)", minimum=0.01),
        "period_ms": Param("number", 100.0, "CFS enforcement period (ms)", minimum=1.0, maximum=1000.0),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._home: CgroupDir | None = None
        self._acted_on: CgroupDir | None = None
        self._child: CgroupDir | None = None
        self._saved_limit: tuple[int, int] | None = None
        self._before: dict[str, int] = {}

    @classmethod
    def check_host(cls) -> None:
        require_root(cls.kind)

    def check(self) -> None:
        self.check_host()
        pid = self.require_pid()
        home = target_cgroup(pid, "cpu")
        require_writable(home, V1_FILES if home.version == 1 else ("cgroup.procs",))
        if not owns_cgroup(home, pid) and home.version == 2:
            require_writable(home, ("cgroup.subtree_control",))
        if owns_cgroup(home, pid):
            require_writable(home, V1_FILES if home.version == 1 else V2_FILES)
        self._home = home

    @property
    def quota_us(self) -> int:
        return max(MIN_QUOTA_US, int(round(self.spec.params["cpus"] * self.period_us)))

    @property
    def period_us(self) -> int:
        return int(round(self.spec.params["period_ms"] * 1000))

    def apply(self) -> dict:
        pid = self.require_pid()
        home = self._home or target_cgroup(pid, "cpu")
        undo = self.target.undo
        if owns_cgroup(home, pid):
            mode, acted_on = "in_place", home
            self._saved_limit = read_limit(home)
            undo.restore_cpu_limit(home.path, home.version, *self._saved_limit)
        else:
            mode = "child"
            name = f"tailscope-{self.target.run_id}-{pid}"
            undo.remove_cgroup(os.path.join(home.path, name), home.path, home.version, home.controller)
            acted_on = self._child = make_child(home, name)
        self._before = cpu_stat(acted_on)
        write_limit(acted_on, self.quota_us, self.period_us)
        if mode == "child":
            move_process(pid, acted_on)
        self._acted_on = acted_on
        return {"mode": mode, "cgroup": acted_on.path, "cgroup_version": acted_on.version,
                "quota_us": self.quota_us, "period_us": self.period_us,
                "previous_limit": list(self._saved_limit) if self._saved_limit else None}

    def revert(self) -> dict:
        observed = self._observe()
        self._restore()
        return observed

    def cleanup(self) -> None:
        self._restore()

    def _observe(self) -> dict:
        if self._acted_on is None:
            return {}
        after = cpu_stat(self._acted_on)
        return {key: after[key] - self._before.get(key, 0) for key in after}

    def _restore(self) -> None:
        if self._acted_on is None:
            return
        pid = self.target.pid
        if self._child is not None and self._home is not None:
            if pid is not None:
                try:
                    move_process(pid, self._home)
                except ProcessLookupError:
                    pass
            remove_cgroup(self._child, self._home)
            self._child = None
        elif self._saved_limit is not None:
            write_limit(self._acted_on, *self._saved_limit)
            self._saved_limit = None
        self._acted_on = None
