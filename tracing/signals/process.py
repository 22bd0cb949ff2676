"""Signals of the target process from /proc/<pid>: CPU, memory, threads,
context switches, major faults, run-queue wait; open connections via psutil.

Per-thread counters (context switches, schedstat wait) are summed over the
process's threads. A thread that exits keeps contributing its last value, so
the summed counters never go backwards.
"""

from __future__ import annotations

import os
import time
from typing import Iterable

import psutil

from .base import CLOCK_TICKS_PER_S, COUNTER, GAUGE, SeriesMeta, find_line_int, read_text

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Field positions in /proc/<pid>/stat after the ")" that ends the command name
# (field 3, the state, is index 0 there).
_MAJFLT, _UTIME, _STIME, _NUM_THREADS, _RSS_PAGES = 9, 11, 12, 17, 21

NO_PID_REASON = "no target pid given"


def parse_pid_stat(text: str) -> dict[str, float]:
    """Parse /proc/<pid>/stat: cpu user/system seconds, major faults, threads, RSS bytes."""
    fields = text[text.rindex(")") + 2 :].split()
    return {
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


def parse_schedstat_wait_ns(text: str) -> int:
    """Run-queue wait (ns) from a schedstat text: its second field."""
    return int(text.split()[1])


class ThreadSumCounter:
    """Sums a per-thread cumulative counter over a process, monotonically.

    ``update({tid: value})`` returns the sum over live threads plus the last
    value of every thread that has exited since the first update.
    """

    def __init__(self):
        self._last: dict[int, int] = {}
        self._retired = 0

    def update(self, values: dict[int, int]) -> int:
        for tid in self._last.keys() - values.keys():
            self._retired += self._last[tid]
        self._last = values
        return self._retired + sum(values.values())


class ProcessSampler:
    """CPU, RSS, threads, context switches, major faults and run-queue wait of one pid."""

    name = "process"

    def __init__(self, pid: int | None, proc_root: str = "/proc"):
        self.pid = pid
        self._dir = f"{proc_root}/{pid}"
        self._voluntary = ThreadSumCounter()
        self._nonvoluntary = ThreadSumCounter()
        self._wait = ThreadSumCounter()

    def probe(self) -> str | None:
        if self.pid is None:
            return NO_PID_REASON
        try:
            read_text(f"{self._dir}/stat")
        except OSError as exc:
            return f"process {self.pid} not readable: {exc.strerror or exc}"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        return {
            "proc.cpu.user_s": SeriesMeta("s", COUNTER, "target CPU time in user mode, all threads"),
            "proc.cpu.system_s": SeriesMeta("s", COUNTER, "target CPU time in kernel mode, all threads"),
            "proc.rss_bytes": SeriesMeta("bytes", GAUGE, "target resident set size"),
            "proc.threads": SeriesMeta("count", GAUGE, "target thread count"),
            "proc.major_faults": SeriesMeta("count", COUNTER, "target major page faults"),
            "proc.ctxt.voluntary": SeriesMeta("count", COUNTER, "voluntary context switches, summed over threads"),
            "proc.ctxt.nonvoluntary": SeriesMeta("count", COUNTER, "involuntary context switches (preemptions), summed over threads"),
            "proc.runqueue_wait_ns": SeriesMeta("ns", COUNTER, "time runnable but waiting for a CPU, summed over threads (schedstat)"),
        }

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        stat = parse_pid_stat(read_text(f"{self._dir}/stat"))
        voluntary, nonvoluntary, wait = self._read_threads()
        return [
            ("proc.cpu.user_s", stat["cpu_user_s"]),
            ("proc.cpu.system_s", stat["cpu_system_s"]),
            ("proc.rss_bytes", float(stat["rss_bytes"])),
            ("proc.threads", float(stat["threads"])),
            ("proc.major_faults", float(stat["major_faults"])),
            ("proc.ctxt.voluntary", float(self._voluntary.update(voluntary))),
            ("proc.ctxt.nonvoluntary", float(self._nonvoluntary.update(nonvoluntary))),
            ("proc.runqueue_wait_ns", float(self._wait.update(wait))),
        ]

    def _read_threads(self) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """Per-thread (voluntary, nonvoluntary, run-queue wait ns); vanished threads skipped."""
        voluntary: dict[int, int] = {}
        nonvoluntary: dict[int, int] = {}
        wait: dict[int, int] = {}
        for name in os.listdir(f"{self._dir}/task"):
            task = f"{self._dir}/task/{name}"
            try:
                v, nv = parse_status_ctxt(read_text(f"{task}/status"))
                w = parse_schedstat_wait_ns(read_text(f"{task}/schedstat"))
            except (FileNotFoundError, ProcessLookupError):
                continue
            tid = int(name)
            voluntary[tid], nonvoluntary[tid], wait[tid] = v, nv, w
        return voluntary, nonvoluntary, wait


class ConnectionsSampler:
    """Open inet connections of the target (psutil), at most once per ``min_interval_s``.

    Listing sockets walks /proc/<pid>/fd and /proc/net/*, which is too costly
    for every tick; between reads this sampler emits nothing.
    """

    name = "process_connections"

    def __init__(self, pid: int | None, min_interval_s: float = 1.0):
        self.pid = pid
        self.min_interval_s = min_interval_s
        self._process: psutil.Process | None = None
        self._next_read = 0.0

    def probe(self) -> str | None:
        if self.pid is None:
            return NO_PID_REASON
        try:
            self._process = psutil.Process(self.pid)
            self._process.net_connections(kind="inet")
        except psutil.Error as exc:
            return f"cannot list connections of {self.pid}: {type(exc).__name__}"
        return None

    def series(self) -> dict[str, SeriesMeta]:
        return {"proc.connections": SeriesMeta("count", GAUGE, "open inet (TCP/UDP) sockets of the target")}

    def read(self, now_ns: int) -> Iterable[tuple[str, float]]:
        now = time.monotonic()
        if now < self._next_read:
            return []
        self._next_read = now + self.min_interval_s
        try:
            return [("proc.connections", float(len(self._process.net_connections(kind="inet"))))]
        except psutil.NoSuchProcess as exc:
            raise ProcessLookupError(f"process {self.pid} exited") from exc
