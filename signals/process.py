"""Signals of the target process from /proc/<pid>: CPU, memory, threads,
context switches, major faults, run-queue wait, threads blocked in
uninterruptible sleep (I/O), storage I/O bytes, open sockets.

Per-thread counters (context switches, schedstat wait) are summed over the
process's threads and, by default, over its descendants too (a pre-fork
server's workers do the work). A thread or child that exits keeps
contributing its last value, so the summed counters never go backwards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

from tailscope.signals.sampler import CLOCK_TICKS_PER_S, COUNTER, GAUGE, OpenFiles, SeriesMeta, find_line_int
from tailscope.support.procfs import read_text

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Field positions in /proc/<pid>/stat after the ")" that ends the command name
# (field 3, the state, is index 0 there).
_MAJFLT, _UTIME, _STIME, _NUM_THREADS, _RSS_PAGES = 9, 11, 12, 17, 21

NO_PID_REASON = "no target pid given"
ZOMBIE = "Z"


def parse_pid_stat(text: str) -> dict[str, float]:
    """Parse /proc/<pid>/stat: state letter, cpu user/system seconds, major faults, threads, RSS bytes."""
    fields = text[text.rindex(")") + 2 :].split()
    return {
        "state": fields[0],
        "cpu_user_s": int(fields[_UTIME]) / CLOCK_TICKS_PER_S,
        "cpu_system_s": int(fields[_STIME]) / CLOCK_TICKS_PER_S,
        "major_faults": int(fields[_MAJFLT]),
        "threads": int(fields[_NUM_THREADS]),
        "rss_bytes": int(fields[_RSS_PAGES]) * PAGE_SIZE,
    }


def parse_status_ctxt(text: str) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches from a /proc/.../status text."""
    voluntary = find_line_int(text, "voluntary_ctxt_switches:")
    nonvoluntary = find_line_int(text, "nonvoluntary_ctxt_switches:")
    return voluntary or 0, nonvoluntary or 0


def parse_status_blocked(text: str) -> bool:
    """Whether a /proc/.../status text says the task is in uninterruptible sleep (``State: D``):
    waiting for I/O (disk, a page fault's read, an fsync) or another kernel wait it cannot leave."""
    start = text.find("State:")
    if start < 0:
        return False
    state = text[start + len("State:"):start + len("State:") + 8].split()
    return bool(state) and state[0] == "D"


def parse_pid_io(text: str) -> tuple[int, int]:
    """(read_bytes, write_bytes) from /proc/<pid>/io: bytes the process made the storage layer read
    and write (page-cache hits are not reads; writes count when the pages are dirtied)."""
    return find_line_int(text, "read_bytes:") or 0, find_line_int(text, "write_bytes:") or 0


def parse_schedstat_wait_ns(text: str) -> int:
    """Run-queue wait (ns) from a schedstat text: its second field."""
    return int(text.split()[1])


class ThreadSumCounter:
    """Sums a per-thread (or per-process) cumulative counter, monotonically.

    ``update({id: value})`` returns the sum over live ids plus the last value
    of every id that has gone since the first update.
    """

    def __init__(self):
        self._last: dict[int, float] = {}
        self._retired = 0

    def update(self, values: dict[int, float]) -> float:
        for tid in self._last.keys() - values.keys():
            self._retired += self._last[tid]
        self._last = values
        return self._retired + sum(values.values())


def read_child_pids(pid: int, proc_root: str = "/proc") -> list[int]:
    """Direct children of ``pid`` from /proc/<pid>/task/*/children.

    Raises FileNotFoundError when the kernel lacks these files
    (CONFIG_PROC_CHILDREN) or ``pid`` is gone.
    """
    children: list[int] = []
    for tid in os.listdir(f"{proc_root}/{pid}/task"):
        try:
            children.extend(int(c) for c in read_text(f"{proc_root}/{pid}/task/{tid}/children").split())
        except FileNotFoundError:
            if tid == str(pid):
                raise
    return children


class ProcessTree:
    """The target pid and (optionally) all its descendants, re-listed at most
    every ``refresh_s`` seconds (processes come and go rarely; listing costs a
    file read per thread)."""

    def __init__(self, pid: int, include_children: bool, proc_root: str = "/proc", refresh_s: float = 1.0):
        self.pid = pid
        self.include_children = include_children
        self.proc_root = proc_root
        self.refresh_s = refresh_s
        self._pids = [pid]
        self._next_refresh = 0.0

    def pids(self) -> list[int]:
        """The root pid first, then descendants in breadth-first order."""
        if not self.include_children:
            return [self.pid]
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh_s
            self._pids = self._descendants()
        return self._pids

    def _descendants(self) -> list[int]:
        try:
            found, frontier = [self.pid], [self.pid]
            while frontier:
                children = [c for p in frontier for c in _children_or_none(p, self.proc_root)]
                found.extend(children)
                frontier = children
            return found
        except FileNotFoundError:  # no /proc/*/task/*/children: ask psutil (scans /proc)
            try:
                return [self.pid] + [c.pid for c in psutil.Process(self.pid).children(recursive=True)]
            except psutil.Error:
                return [self.pid]


def _children_or_none(pid: int, proc_root: str) -> list[int]:
    """Children of a descendant; [] if it exited meanwhile (the root's absence raises)."""
    try:
        return read_child_pids(pid, proc_root)
    except (FileNotFoundError, ProcessLookupError):
        if not os.path.exists(f"{proc_root}/{pid}"):
            return []
        raise


class ProcessSampler:
    """CPU, RSS, threads, context switches, major faults and run-queue wait of one
    pid, or summed over the pid and its descendants (``include_children``).

    Counters of a thread or child process that exits keep its last value, so
    summed counters never go backwards. RSS summed over forked workers counts
    shared pages once per process (an upper bound).
    """

    name = "process"

    def __init__(self, pid: int | None, proc_root: str = "/proc", include_children: bool = True):
        self.pid = pid
        self.proc_root = proc_root
        self.include_children = include_children
        self._tree = ProcessTree(pid, include_children, proc_root) if pid is not None else None
        self._counters = {key: ThreadSumCounter() for key in (
            "cpu_user_s", "cpu_system_s", "major_faults", "voluntary", "nonvoluntary", "wait",
            "read_bytes", "write_bytes")}
        self._files = OpenFiles()
        self._used: set[str] = set()  # files read this tick; the others (exited threads) are closed
        self._io = False  # /proc/<pid>/io readable (needs ptrace-read permission on the target)

    def probe(self) -> str | None:
        if self.pid is None:
            return NO_PID_REASON
        try:
            read_text(f"{self.proc_root}/{self.pid}/stat")
        except OSError as exc:
            return f"process {self.pid} not readable: {exc.strerror or exc}"
        try:
            read_text(f"{self.proc_root}/{self.pid}/io")
            self._io = True
        except OSError:
            self._io = False
        return None

    def series(self) -> dict[str, SeriesMeta]:
        scope = "target and its descendants" if self.include_children else "target"
        return {
            "proc.cpu.user_s": SeriesMeta("s", COUNTER, f"CPU time in user mode, {scope}, all threads"),
            "proc.cpu.system_s": SeriesMeta("s", COUNTER, f"CPU time in kernel mode, {scope}, all threads"),
            "proc.rss_bytes": SeriesMeta("bytes", GAUGE, f"resident set size, {scope} (shared pages counted per process)"),
            "proc.threads": SeriesMeta("count", GAUGE, f"thread count, {scope}"),
            "proc.processes": SeriesMeta("count", GAUGE, f"processes: {scope}"),
            "proc.major_faults": SeriesMeta("count", COUNTER, f"major page faults, {scope}"),
            "proc.ctxt.voluntary": SeriesMeta("count", COUNTER, f"voluntary context switches, {scope}, summed over threads"),
            "proc.ctxt.nonvoluntary": SeriesMeta("count", COUNTER, f"involuntary context switches (preemptions), {scope}, summed over threads"),
            "proc.runqueue_wait_ns": SeriesMeta("ns", COUNTER, f"time runnable but waiting for a CPU, {scope}, summed over threads (schedstat)"),
            "proc.threads_blocked": SeriesMeta("tasks", GAUGE, f"threads in uninterruptible sleep (state D: waiting for I/O), {scope}; "
                                               "sampled each tick, so a bin's mean is the mean number blocked"),
            **({
                "proc.io.read_bytes": SeriesMeta("bytes", COUNTER, f"bytes the storage layer read for the {scope} (/proc/PID/io)"),
                "proc.io.write_bytes": SeriesMeta("bytes", COUNTER, f"bytes written (dirtied) towards storage by the {scope} (/proc/PID/io)"),
            } if self._io else {}),
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        per_process = {key: {} for key in ("cpu_user_s", "cpu_system_s", "major_faults", "read_bytes", "write_bytes")}
        per_thread = {key: {} for key in ("voluntary", "nonvoluntary", "wait", "blocked")}
        rss = threads = processes = 0
        self._used = set()
        for pid in self._tree.pids():
            try:
                stat = parse_pid_stat(self._read(f"{self.proc_root}/{pid}/stat"))
                self._read_threads(pid, per_thread)
            except (FileNotFoundError, ProcessLookupError):
                if pid == self.pid:
                    raise ProcessLookupError(f"process {self.pid} exited") from None
                continue  # a child exited between listing and reading
            if stat["state"] == ZOMBIE:  # exited, not yet reaped: its counters stay retired
                if pid == self.pid:
                    raise ProcessLookupError(f"process {self.pid} exited (zombie)")
                continue
            for key in ("cpu_user_s", "cpu_system_s", "major_faults"):
                per_process[key][pid] = stat[key]
            if self._io:
                self._read_io(pid, per_process)
            rss += stat["rss_bytes"]
            threads += stat["threads"]
            processes += 1
        if len(self._files) > len(self._used):
            self._files.forget_missing(self._used)
        counters = self._counters
        return [
            ("proc.cpu.user_s", float(counters["cpu_user_s"].update(per_process["cpu_user_s"]))),
            ("proc.cpu.system_s", float(counters["cpu_system_s"].update(per_process["cpu_system_s"]))),
            ("proc.rss_bytes", float(rss)),
            ("proc.threads", float(threads)),
            ("proc.processes", float(processes)),
            ("proc.major_faults", float(counters["major_faults"].update(per_process["major_faults"]))),
            ("proc.ctxt.voluntary", float(counters["voluntary"].update(per_thread["voluntary"]))),
            ("proc.ctxt.nonvoluntary", float(counters["nonvoluntary"].update(per_thread["nonvoluntary"]))),
            ("proc.runqueue_wait_ns", float(counters["wait"].update(per_thread["wait"]))),
            ("proc.threads_blocked", float(sum(per_thread["blocked"].values()))),
        ] + ([
            ("proc.io.read_bytes", float(counters["read_bytes"].update(per_process["read_bytes"]))),
            ("proc.io.write_bytes", float(counters["write_bytes"].update(per_process["write_bytes"]))),
        ] if self._io else [])

    def _read_io(self, pid: int, out: dict[str, dict]) -> None:
        """Add ``pid``'s storage read/write bytes to ``out``; a child we may not read is skipped."""
        try:
            out["read_bytes"][pid], out["write_bytes"][pid] = parse_pid_io(self._read(f"{self.proc_root}/{pid}/io"))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            if pid == self.pid and not os.path.exists(f"{self.proc_root}/{pid}"):
                raise ProcessLookupError(f"process {self.pid} exited") from None

    def _read(self, path: str) -> str:
        self._used.add(path)
        return self._files.read(path)

    def _read_threads(self, pid: int, out: dict[str, dict]) -> None:
        """Add ``pid``'s per-thread (voluntary, nonvoluntary, run-queue wait ns, blocked) to ``out``,
        keyed by tid (tids are unique system-wide); vanished threads are skipped."""
        directory = f"{self.proc_root}/{pid}/task"
        for name in os.listdir(directory):
            try:
                status = self._read(f"{directory}/{name}/status")
                schedstat = self._read(f"{directory}/{name}/schedstat")
            except (FileNotFoundError, ProcessLookupError):
                continue
            if not status or not schedstat:  # the thread is exiting
                continue
            v, nv = parse_status_ctxt(status)
            w = parse_schedstat_wait_ns(schedstat)
            tid = int(name)
            out["voluntary"][tid], out["nonvoluntary"][tid], out["wait"][tid] = v, nv, w
            out["blocked"][tid] = parse_status_blocked(status)


SOCKET_LINK_PREFIX = "socket:"


def count_socket_fds(pid: int, proc_root: str = "/proc") -> int:
    """Open socket descriptors of ``pid`` (readlink of /proc/PID/fd/* is ``socket:[inode]``)."""
    directory = f"{proc_root}/{pid}/fd"
    count = 0
    for fd in os.listdir(directory):
        try:
            if os.readlink(f"{directory}/{fd}").startswith(SOCKET_LINK_PREFIX):
                count += 1
        except FileNotFoundError:  # closed meanwhile
            continue
    return count


class ConnectionsSampler:
    """Open sockets of the target (and, by default, its descendants), at most
    once per ``min_interval_s``: TCP connections and listeners, UDP and unix sockets.

    It counts the socket descriptors in /proc/PID/fd (one readlink per open
    file, ~1 µs each) rather than matching them against /proc/net/tcp, whose
    size grows with every socket on the host (tens of ms on a loaded server);
    between reads it emits nothing.
    """

    name = "process_connections"

    def __init__(self, pid: int | None, min_interval_s: float = 1.0, include_children: bool = True,
                 proc_root: str = "/proc"):
        self.pid = pid
        self.min_interval_s = min_interval_s
        self.include_children = include_children
        self.proc_root = proc_root
        self._tree = ProcessTree(pid, include_children, proc_root) if pid is not None else None
        self._next_read = 0.0

    def probe(self) -> str | None:
        if self.pid is None:
            return NO_PID_REASON
        try:
            count_socket_fds(self.pid, self.proc_root)
        except OSError as exc:
            return f"cannot list the open files of {self.pid}: {exc.strerror or exc}"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        scope = "the target and its descendants" if self.include_children else "the target"
        return {"proc.connections": SeriesMeta(
            "count", GAUGE, f"open sockets (TCP connections and listeners, UDP, unix) of {scope}")}

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        now = time.monotonic()
        if now < self._next_read:
            return []
        self._next_read = now + self.min_interval_s
        total = 0
        for pid in self._tree.pids():
            try:
                total += count_socket_fds(pid, self.proc_root)
            except (FileNotFoundError, ProcessLookupError) as exc:
                if pid == self.pid:
                    raise ProcessLookupError(f"process {self.pid} exited") from exc
            except PermissionError:
                continue
        return [("proc.connections", float(total))]
