"""cpu_contention: busy-loop processes on the target's CPUs for a window (a noisy neighbour).

Mechanism: ``processes`` burner processes (:mod:`.burner`, pure busy loops),
each pinned with ``sched_setaffinity`` to the target's allowed CPUs (or to
``cpus``), started at the window's start and killed by PID at its end. The
target's threads then wait in the run queue: ``proc.runqueue_wait_ns`` and
``proc.ctxt.nonvoluntary`` rise, ``host.cpu`` saturates. The burners run in
the agent's cgroup, beside the target (CFS shares split the CPUs between
cgroups). ``nice`` sets the burners' niceness: below 0 (root only) they
outrank the target, as a higher-priority neighbour does. ``weight`` > 0
(root, a writable cpu cgroup) puts the burners in a cgroup of their own,
``tailscope-burners-<pid>`` under the agent's cpu cgroup, with that CPU weight
(v1 ``cpu.shares``, default 1024; v2 ``cpu.weight`` = weight × 100 / 1024): a
neighbour container with a larger CPU request. Between cgroups the scheduler
splits a busy CPU by weight, so a target that sleeps between requests (and
so wins its CPU back on every wake-up against neighbours of its own weight)
now gets only its weight's share. The group is removed at the window's end.

``placement`` ``target`` (root) moves the burners into the target's *own*
cgroup instead (cpu, and cpuacct where it is a hierarchy of its own): co-tenant
processes in the same container, competing with the target's threads task by
task inside its group, so the cgroup's CPU usage rises well above the target
process's own. The target's cgroup must not be a hierarchy root (the target
needs a cgroup of its own, as the lab gives it); ``weight`` must then be 0.
Killing the burners at the window's end leaves the target's cgroup as it was.
"""

from __future__ import annotations

import os
import subprocess

import psutil

from tailscope.faults.cgroupfs import CgroupDir, create_child, move_process, remove_cgroup, require_writable, target_cgroup
from tailscope.faults.injector import FaultCleanupError, FaultSetupError, Injector, Param
from tailscope.faults.processes import parse_cpu_list, start_python_module, stop_process

#: A burner stops by itself this long after the window's planned end (s).
BURNER_SLACK_S = 30.0
#: Where the burners run: beside the target (the agent's cgroup, or one of their own with
#: ``weight``), or inside the target's own cgroup (co-tenants of one container).
PLACEMENTS = ("beside", "target")
#: Controllers whose cgroup of the target the burners join with placement ``target``
#: (cpuacct only where it is mounted as a hierarchy of its own: cgroup v1).
TARGET_CONTROLLERS = ("cpu", "cpuacct")


class CpuContention(Injector):
    kind = "cpu_contention"
    summary = "busy-loop processes pinned to the target's CPUs for the window"
    requires = "nothing special (sched_setaffinity on our own children)"
    params = {
        "processes": Param("integer", 0, "burner processes (0: one per CPU used)", minimum=0, maximum=256),
        "cpus": Param("string", "", "CPUs to burn, e.g. '0-1' (default: the target's allowed CPUs)"),
        "nice": Param("integer", 0, "niceness of the burners (below 0 needs root: they outrank the target)",
                      minimum=-20, maximum=19),
        "weight": Param("integer", 0, "CPU weight of a cgroup of the burners' own (v1 cpu.shares scale, default "
                        "1024; 0: no cgroup, they run in the agent's)", minimum=0, maximum=262144),
        "placement": Param("string", "beside", "'beside' the target, or 'target': inside the target's own cgroup "
                           "(co-tenants of its container; root)", choices=PLACEMENTS),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._burners: list[subprocess.Popen] = []
        self._cpus: list[int] = []
        self._group: CgroupDir | None = None
        self._home: CgroupDir | None = None
        self._target_groups: list[CgroupDir] = []

    def check(self) -> None:
        self._cpus = self._resolve_cpus()
        if self.spec.params["placement"] == "target":
            self._target_groups = self._targets_own_groups()
        elif self.spec.params["weight"]:
            self._group_home()

    def _targets_own_groups(self) -> list[CgroupDir]:
        """The target's cpu (and separate cpuacct) cgroups the co-tenant burners join; FaultSetupError
        when placement ``target`` cannot be honoured here (before the run starts, from :meth:`check`)."""
        if self.spec.params["weight"]:
            raise FaultSetupError(f"{self.kind}: params.weight gives the burners a cgroup of their own; "
                                  "with params.placement target they join the target's (set weight 0)")
        if os.geteuid() != 0:
            raise FaultSetupError(f"{self.kind}: params.placement target needs root (it writes cgroup.procs)")
        pid = self.require_pid()
        groups: list[CgroupDir] = []
        for controller in TARGET_CONTROLLERS:
            try:
                group = target_cgroup(pid, controller)
            except FaultSetupError:
                if controller == "cpu":
                    raise
                continue
            if any(g.path == group.path for g in groups):
                continue
            if group.is_root():
                raise FaultSetupError(f"{self.kind}: params.placement target needs the target in a {controller} "
                                      f"cgroup of its own; {group.path} is the hierarchy's root")
            require_writable(group, ("cgroup.procs",))
            groups.append(group)
        return groups

    def _group_home(self) -> CgroupDir:
        """The agent's own cpu cgroup, under which the burners' cgroup goes; FaultSetupError
        when ``weight`` cannot be honoured here (before the run starts, from :meth:`check`)."""
        if os.geteuid() != 0:
            raise FaultSetupError(f"{self.kind}: params.weight needs root (a cgroup for the burners)")
        home = target_cgroup(os.getpid(), "cpu")
        if not os.access(home.path, os.W_OK):
            raise FaultSetupError(f"{self.kind}: params.weight needs a writable cpu cgroup; {home.path} is not")
        return home

    def _resolve_cpus(self) -> list[int]:
        text = self.spec.params["cpus"]
        if text:
            try:
                cpus = parse_cpu_list(text)
            except ValueError as exc:
                raise FaultSetupError(f"{self.kind}: params.cpus: {exc}") from exc
            missing = sorted(set(cpus) - os.sched_getaffinity(0))
            if missing:
                raise FaultSetupError(f"{self.kind}: CPUs {missing} are not available here")
            return cpus
        pid = self.require_pid()
        try:
            return sorted(os.sched_getaffinity(pid))
        except OSError as exc:
            raise FaultSetupError(f"{self.kind}: cannot read the CPU affinity of {pid}: {exc}") from exc

    def apply(self) -> dict:
        cpus = self._cpus or self._resolve_cpus()
        count = self.spec.params["processes"] or len(cpus)
        bound_s = str(self.spec.duration_s + BURNER_SLACK_S)
        nice, weight = self.spec.params["nice"], self.spec.params["weight"]
        placement = self.spec.params["placement"]
        groups = (self._target_groups or self._targets_own_groups()) if placement == "target" else \
            ([self._make_group(weight)] if weight else [])
        for _ in range(count):
            burner = start_python_module("tailscope.faults.burner", [bound_s], cpus=cpus)
            self._burners.append(burner)
            self._renice(burner, nice)
            for group in groups:
                move_process(burner.pid, group)
        return {"processes": count, "cpus": cpus, "nice": nice, "weight": weight, "placement": placement,
                "cgroup": groups[0].path if groups else None, "cgroups": [g.path for g in groups],
                "pids": [p.pid for p in self._burners]}

    def _make_group(self, weight: int) -> CgroupDir:
        """The burners' own cpu cgroup with CPU weight ``weight`` (v1 shares scale)."""
        home = self._group_home()
        knob, value = ("cpu.shares", str(weight)) if home.version == 1 else \
            ("cpu.weight", str(max(1, min(10000, round(weight * 100 / 1024)))))
        group_name = f"tailscope-burners-{os.getpid()}"
        self.target.undo.remove_cgroup(os.path.join(home.path, group_name), home.path, home.version, home.controller)
        group = create_child(home, group_name,
                             f"{self.kind} (params.weight 0 runs the burners without a cgroup)")
        self._group, self._home = group, home
        try:
            group.write(knob, value)
        except OSError as exc:
            raise FaultSetupError(f"{self.kind}: cannot set {group.file(knob)} to {value}: {exc.strerror or exc}") \
                from exc
        return group

    def _renice(self, burner: subprocess.Popen, nice: int) -> None:
        if nice == 0:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, burner.pid, nice)
        except PermissionError as exc:
            raise FaultSetupError(f"{self.kind}: params.nice {nice} needs root (CAP_SYS_NICE): {exc}") from exc

    def revert(self) -> dict:
        cpu_s = 0.0
        for burner in self._burners:
            try:
                times = psutil.Process(burner.pid).cpu_times()
                cpu_s += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        self.cleanup()
        return {"burner_cpu_s": round(cpu_s, 3)}

    def cleanup(self) -> None:
        failures = []
        while self._burners:
            burner = self._burners.pop()
            try:
                stop_process(burner)
            except (OSError, subprocess.SubprocessError) as exc:
                failures.append(f"burner {burner.pid}: {exc}")
        group, self._group = self._group, None
        if group is not None:
            try:
                remove_cgroup(group, self._home)
            except FaultCleanupError as exc:
                failures.append(str(exc))
        if failures:
            raise FaultCleanupError("; ".join(failures))
