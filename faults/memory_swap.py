"""memory_swap: a swap file plus a memory-cgroup limit below the target's working set, for a window.

Mechanism: before the load, a swap file of ``swap_mb`` MB is written under
``swap_dir`` (dd + mkswap). At the window's start it is enabled (swapon), the
target's memory cgroup gets ``memory.swappiness`` 100 (v1) and a limit of
``fraction`` × its current usage (or ``limit_mb``): v1
``memory.limit_in_bytes``, v2 ``memory.max`` (with ``memory.swap.max`` =
max), lowered in steps (:func:`lower_limit`). The kernel reclaims the
excess into swap as each step is written, and every request
that reads its slice of the resident set (``--resident-mb``) takes major
page faults while the limit holds. At the end the old limit and swappiness
are restored; at cleanup the swap file is disabled (pages come back) and
deleted.

The limit acts on the target's own memory cgroup, which must hold only the
target: memory already charged does not move with a process to another
cgroup on current kernels, so a child cgroup would not constrain the
working set. Needs root, a v1 or v2 memory controller, and a disk directory
for the swap file.

``victim: neighbour`` pages another process instead: at the window's start a
helper (:mod:`.page_toucher`) is started in a memory cgroup of its own,
``tailscope-neighbour-<pid>`` under the agent's, fills ``neighbour_mb`` MB and
keeps re-reading it at ``neighbour_mb_s`` MB/s; the same swap file, swappiness
and stepwise limit (``fraction`` × its usage) then apply to *its* cgroup. The
host pages (swap-ins, major faults, memory and I/O pressure) while the
target's own pages stay put: a distraction for the diagnosis, which must not
blame the target's latency on it. At the window's end the helper is killed
and its cgroup removed; the ground truth's ``observed`` holds the helper's
major faults beside the target's.
"""

from __future__ import annotations

import errno
import os
import selectors
import subprocess
import time

from tailscope.faults.cgroupfs import CgroupDir, create_child, owns_cgroup, remove_cgroup, require_writable, target_cgroup
from tailscope.faults.injector import FaultCleanupError, FaultSetupError, Injector, Param, require_root
from tailscope.faults.processes import start_python_module, stop_process
from tailscope.faults.swapfile import SwapFile, missing_tools
from tailscope.support.python_child import python_module

_MB = 1024 * 1024
#: Extra swap beyond the cgroup's usage, so the limit can always be met (MB).
SWAP_HEADROOM_MB = 128
#: Steps from the usage down to the limit, retries of a step answered EBUSY, and the pause between them.
LIMIT_STEPS = 8
STEP_RETRIES = 5
STEP_RETRY_DELAY_S = 0.1
#: Limits are whole pages (the kernel rounds them down).
PAGE_BYTES = 4096
#: v1 limit value meaning "unlimited".
V1_UNLIMITED = "-1"
#: Whose memory is limited: the target's own cgroup, or a helper process's (another process paging).
VICTIMS = ("target", "neighbour")
#: How long the neighbour helper may take to fill its memory and say READY (s), and how long
#: after the window's planned end it stops by itself (s).
NEIGHBOUR_READY_TIMEOUT_S = 60.0
NEIGHBOUR_SLACK_S = 30.0


def vmstat_swaps() -> dict[str, int]:
    """``pswpin``/``pswpout`` (pages) from /proc/vmstat."""
    out = {}
    with open("/proc/vmstat", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(" ")
            if key in ("pswpin", "pswpout"):
                out[key] = int(value)
    return out


def lower_limit(cgroup: CgroupDir, usage: int, limit: int) -> int:
    """Lower the cgroup's memory limit from ``usage`` to ``limit`` in steps; return the limit reached.

    Writing a limit below the usage makes the kernel reclaim synchronously;
    when the target keeps touching its pages a large step can fail with
    EBUSY (cgroup v1). Steps of 1/:data:`LIMIT_STEPS` of the distance, each
    retried :data:`STEP_RETRIES` times, get there under load; if a step keeps
    failing the last limit that held stays (and is reported). Raises OSError
    if not even the first step holds.
    """
    limit_file = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"
    reached = None
    for step in range(1, LIMIT_STEPS + 1):
        value = (usage - (usage - limit) * step // LIMIT_STEPS) // PAGE_BYTES * PAGE_BYTES
        for attempt in range(STEP_RETRIES):
            try:
                cgroup.write(limit_file, str(value))
                reached = value
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == STEP_RETRIES - 1:
                    if reached is None:
                        raise
                    return reached
                time.sleep(STEP_RETRY_DELAY_S)
    return reached if reached is not None else usage


class MemorySwap(Injector):
    kind = "memory_swap"
    summary = "swap file + memory-cgroup limit below the target's working set for the window"
    requires = "root; the target alone in its memory cgroup (v1 or v2); swapon on a disk file"
    params = {
        "fraction": Param("number", 0.5, "limit as a fraction of the cgroup's memory use at the window start",
                          minimum=0.05, maximum=0.95),
        "limit_mb": Param("number", 0.0, "limit in MB (overrides fraction; 0: use fraction)", minimum=0.0),
        "swap_mb": Param("integer", 0, "swap file size in MB (0: the cgroup's usage + 128)", minimum=0),
        "swap_dir": Param("string", "", "directory of the swap file, on a disk (default: the run directory)"),
        "victim": Param("string", "target", "whose memory is limited: 'target' (its own memory cgroup) or "
                        "'neighbour' (a helper process in a memory cgroup of its own: host paging the target "
                        "takes no part in)", choices=VICTIMS),
        "neighbour_mb": Param("integer", 256, "victim neighbour: memory the helper holds (MB)",
                              minimum=16, maximum=65536),
        "neighbour_mb_s": Param("number", 32.0, "victim neighbour: how fast the helper re-reads it (MB/s)",
                                minimum=1.0, maximum=4096.0),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._cgroup: CgroupDir | None = None
        self._swap: SwapFile | None = None
        self._saved: dict[str, str] = {}
        self._before: dict[str, int] = {}
        self._home: CgroupDir | None = None
        self._neighbour: subprocess.Popen | None = None

    @classmethod
    def check_host(cls) -> None:
        require_root(cls.kind)
        missing = missing_tools()
        if missing:
            raise FaultSetupError(f"{cls.kind} needs {', '.join(missing)} (util-linux / coreutils)")

    @property
    def _on_neighbour(self) -> bool:
        return self.spec.params["victim"] == "neighbour"

    def check(self) -> None:
        self.check_host()
        if self._on_neighbour:
            self._home = self._neighbour_home()
            return
        pid = self.require_pid()
        cgroup = target_cgroup(pid, "memory")
        files = (("memory.limit_in_bytes", "memory.swappiness") if cgroup.version == 1
                 else ("memory.max", "memory.swap.max"))
        require_writable(cgroup, files)
        if not owns_cgroup(cgroup, pid):
            others = len(cgroup.processes())
            raise FaultSetupError(
                f"{self.kind} limits the target's own memory cgroup, but {cgroup.path} holds {others} processes "
                f"besides the target's (or is a hierarchy root); memory charges do not move with a process, so "
                "run the target alone in a cgroup (a container, systemd-run --scope, or `tailscope lab`)")
        self._cgroup = cgroup

    def _neighbour_home(self) -> CgroupDir:
        """The agent's memory cgroup, under which the neighbour's goes; FaultSetupError when not writable."""
        home = target_cgroup(os.getpid(), "memory")
        if not os.access(home.path, os.W_OK):
            raise FaultSetupError(f"{self.kind}: victim neighbour needs a writable memory cgroup; {home.path} is not")
        return home

    def prepare(self) -> None:
        if self._on_neighbour:
            usage_mb = self.spec.params["neighbour_mb"]
        else:
            usage_mb = self._usage(self._cgroup or target_cgroup(self.require_pid(), "memory")) // _MB
        size_mb = self.spec.params["swap_mb"] or int(usage_mb + SWAP_HEADROOM_MB)
        directory = self.spec.params["swap_dir"] or self.target.work_dir
        path = os.path.join(directory, f"tailscope-swap-{self.target.run_id}-{os.getpid()}")
        self._swap = SwapFile(path, size_mb)
        self.target.undo.remove_swap_file(path)
        self._swap.create()

    def apply(self) -> dict:
        if self._on_neighbour:
            self._cgroup = self._start_neighbour()
        cgroup = self._cgroup or target_cgroup(self.require_pid(), "memory")
        if self._swap is None:
            self.prepare()
        assert self._swap is not None
        self._swap.enable()
        usage = self._usage(cgroup)
        limit = int(self.spec.params["limit_mb"] * _MB) or int(usage * self.spec.params["fraction"])
        self._before = {**vmstat_swaps(), **self._major_faults()}
        if cgroup.version == 1:
            self._save(cgroup, "memory.swappiness", "memory.limit_in_bytes")
            cgroup.write("memory.swappiness", "100")
        else:
            self._save(cgroup, "memory.swap.max", "memory.max")
            cgroup.write("memory.swap.max", "max")
        reached = lower_limit(cgroup, usage, limit)
        return {"victim": self.spec.params["victim"], "cgroup": cgroup.path, "cgroup_version": cgroup.version,
                "usage_bytes": usage, "limit_bytes": reached, "requested_limit_bytes": limit,
                "swap_file": self._swap.path, "swap_mb": self._swap.size_mb,
                **({"neighbour_pid": self._neighbour.pid} if self._neighbour is not None else {})}

    def revert(self) -> dict:
        cgroup = self._cgroup
        observed: dict = {}
        if cgroup is not None and self._before:
            after = {**vmstat_swaps(), **self._major_faults()}
            observed = {f"{key}_delta": after[key] - self._before.get(key, 0) for key in after}
            observed["swap_bytes_at_end"] = self._swap_usage(cgroup)
        self._restore()
        self._stop_neighbour()
        return observed

    def cleanup(self) -> None:
        errors = []
        try:
            self._restore()
        except OSError as exc:
            errors.append(f"cannot restore the memory limit of {self._cgroup.path if self._cgroup else '?'}: {exc}")
        try:
            self._stop_neighbour()
        except (OSError, subprocess.SubprocessError, FaultCleanupError) as exc:
            errors.append(f"neighbour: {exc}")
        if self._swap is not None:
            try:
                self._swap.remove()
            except FaultCleanupError as exc:
                errors.append(str(exc))
        if errors:
            raise FaultCleanupError("; ".join(errors))

    # ------------------------------------------------------------------ helpers

    def _start_neighbour(self) -> CgroupDir:
        """A memory cgroup of the neighbour's own and the helper in it, its memory filled (READY)."""
        home = self._home or self._neighbour_home()
        name = f"tailscope-neighbour-{os.getpid()}"
        self.target.undo.remove_cgroup(os.path.join(home.path, name), home.path, home.version, home.controller)
        group = create_child(home, name, f"{self.kind} (victim neighbour)")
        self._home, self._cgroup = home, group
        params = self.spec.params
        helper = python_module("tailscope.faults.page_toucher", str(params["neighbour_mb"]),
                               str(params["neighbour_mb_s"]), str(self.spec.duration_s + NEIGHBOUR_SLACK_S))
        self._neighbour = start_python_module("tailscope.faults.own_cgroup", ["--cgroup", group.path, "--", *helper],
                                              stdout=subprocess.PIPE)
        if not _wait_for_line(self._neighbour, "READY", NEIGHBOUR_READY_TIMEOUT_S):
            raise FaultSetupError(f"{self.kind}: the neighbour helper did not fill its memory within "
                                  f"{NEIGHBOUR_READY_TIMEOUT_S:g} s (exit status {self._neighbour.poll()})")
        return group

    def _stop_neighbour(self) -> None:
        """Kill the neighbour helper (its swapped pages are freed) and remove its cgroup; idempotent."""
        neighbour, self._neighbour = self._neighbour, None
        if neighbour is not None:
            stop_process(neighbour)
            if neighbour.stdout is not None:
                neighbour.stdout.close()
        if self._on_neighbour and self._cgroup is not None and self._home is not None:
            self._saved.clear()  # the cgroup goes: nothing of it to restore
            remove_cgroup(self._cgroup, self._home)
            self._cgroup = None

    def _save(self, cgroup: CgroupDir, *names: str) -> None:
        for name in names:
            if name not in self._saved:
                self._saved[name] = cgroup.read(name)
                self.target.undo.restore_file(cgroup.file(name), self._restorable(cgroup, name, self._saved[name]))

    @staticmethod
    def _restorable(cgroup: CgroupDir, name: str, value: str) -> str:
        """The text that puts ``value`` (as read) back: v1 reads "no limit" as a huge number it refuses."""
        if cgroup.version == 1 and name == "memory.limit_in_bytes" and int(value) >= 1 << 62:
            return V1_UNLIMITED
        return value

    def _restore(self) -> None:
        """Raise the limit first (so no reclaim happens), then the other saved values."""
        cgroup = self._cgroup
        if cgroup is None or not self._saved:
            return
        limit_file = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"
        if limit_file in self._saved:
            cgroup.write(limit_file, self._restorable(cgroup, limit_file, self._saved.pop(limit_file)))
        for name, value in list(self._saved.items()):
            cgroup.write(name, value)
            del self._saved[name]

    @staticmethod
    def _usage(cgroup: CgroupDir) -> int:
        return int(cgroup.read("memory.usage_in_bytes" if cgroup.version == 1 else "memory.current"))

    @staticmethod
    def _swap_usage(cgroup: CgroupDir) -> int | None:
        if cgroup.version == 2:
            return int(cgroup.read("memory.swap.current")) if cgroup.has("memory.swap.current") else None
        if cgroup.has("memory.memsw.usage_in_bytes"):
            return max(0, int(cgroup.read("memory.memsw.usage_in_bytes")) - int(cgroup.read("memory.usage_in_bytes")))
        return None

    def _major_faults(self) -> dict[str, int]:
        """``major_faults`` of the target (0 when unknown) and, with a neighbour, ``neighbour_major_faults``."""
        out = {}
        for key, pid in (("major_faults", self.target.pid),
                         ("neighbour_major_faults", self._neighbour.pid if self._neighbour else None)):
            if key == "major_faults" or pid is not None:
                try:
                    out[key] = _read_majflt(pid)
                except OSError:
                    out[key] = 0
        return out


def _wait_for_line(process: subprocess.Popen, expected: str, timeout_s: float) -> bool:
    """Whether ``process`` printed the line ``expected`` on its stdout (a pipe) within ``timeout_s``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                return False
            line = process.stdout.readline()
            if not line:
                return False
            if line.decode(errors="replace").strip() == expected:
                return True
    return False


def _read_majflt(pid: int | None) -> int:
    """Major page faults of ``pid`` (field 12 of /proc/<pid>/stat)."""
    if pid is None:
        return 0
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[9])
