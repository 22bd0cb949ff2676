"""The generator watching itself: its CPU use, its GC pauses, its backlog.

No Locust or gevent import. :class:`GeneratorMonitor` is driven by the load
runner's watcher (about every 50 ms) and writes

- ``generator_gc`` events (source ``generator``) to an events sink with
  ``append(kind, start_ns, end_ns, source, attributes_json)``: one per garbage
  collection in this process, timed with ``perf_counter_ns`` between the
  ``gc.callbacks`` "start" and "stop" calls (the runtime gives no duration);
  attributes ``generation``, ``collected``, ``uncollectable``, ``pid``;
- gauges, once per ``SAMPLE_INTERVAL_S``, to a signals sink with
  ``append(t_ns, series, value)`` (the harness's ``signals.generator.arrow``):
  ``generator.cpu_percent`` (user + system CPU of this process over the
  interval, % of one core: 100 = one core busy), ``generator.in_flight``,
  ``generator.gc_pause_ms`` (GC pause time in the interval, ms),
  ``generator.runqueue_wait_ms`` (time the event-loop thread was runnable but
  waiting for a CPU in the interval, ms, from ``/proc/self/schedstat``; absent
  where the kernel has no schedstat). A late send with a large run-queue wait
  means CPU contention from other processes, not the generator's own work.

In a distributed run each worker process runs its own monitor with
``worker=i``: its series are labelled ``generator.cpu_percent{worker="i"}``
(the run directory's label syntax, docs/signals.md) and its events carry
``"worker": i``, so several generator processes stay apart in one run.

The GC callback only appends a tuple to a list (no lock, no I/O: it runs
inside the collector); the watcher drains the list into the sink. Memory:
the pauses since the last poll.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import time
from collections.abc import Callable

#: How often the CPU and backlog gauges are written, s.
SAMPLE_INTERVAL_S = 1.0
GC_EVENT = "generator_gc"
SOURCE = "generator"
#: Series the monitor writes, with their units (for signals.json-style metadata).
SERIES = {
    "generator.cpu_percent": {"unit": "%", "kind": "gauge", "source": "getrusage",
                              "description": "the load generator's CPU use, % of one core"},
    "generator.in_flight": {"unit": "requests", "kind": "gauge", "source": "generator",
                            "description": "requests sent and not yet ended"},
    "generator.gc_pause_ms": {"unit": "ms", "kind": "gauge", "source": "gc.callbacks",
                              "description": "the generator's GC pause time in the last second"},
    "generator.runqueue_wait_ms": {"unit": "ms", "kind": "gauge", "source": "/proc/self/schedstat",
                                   "description": "time the generator's event loop waited for a CPU"},
}
SCHEDSTAT_PATH = "/proc/self/schedstat"


def series_name(name: str, worker: int | None = None) -> str:
    """``name`` as written by generator process ``worker`` (None: the only one, unlabelled)."""
    return name if worker is None else f'{name}{{worker="{worker}"}}'


def runqueue_wait_ns(path: str = SCHEDSTAT_PATH) -> int | None:
    """Cumulative ns the process's main thread waited on a run queue; None if unknown.
    ``schedstat`` holds "<on-CPU ns> <run-queue wait ns> <timeslices>"."""
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class GeneratorMonitor:
    """Records the generator's GC pauses and CPU use while a load runs.

    ``now_ns`` gives epoch ns (the run clock); ``in_flight`` the current
    number of requests in flight; ``worker`` labels the series and events of
    one worker process of a distributed run (None: a single process). Use as a
    context manager, or call :meth:`start` / :meth:`stop` (which removes the GC
    callback); call :meth:`poll` often from the event loop.
    """

    def __init__(self, events, signals, now_ns: Callable[[], int], in_flight: Callable[[], int],
                 worker: int | None = None):
        self.events = events
        self.signals = signals
        self.worker = worker
        self._names = {name: series_name(name, worker) for name in SERIES}
        self._now_ns = now_ns
        self._in_flight = in_flight
        self._pending: list[tuple] = []
        self._gc_start: tuple[int, int] | None = None
        self._perf_to_epoch_ns = 0
        self._last_sample_ns = 0
        self._last_cpu_s = 0.0
        self._last_wait_ns: int | None = None
        self._gc_ms_since_sample = 0.0
        self.gc_pauses = 0
        self.gc_pause_ns = 0
        self._pid = os.getpid()

    def __enter__(self) -> GeneratorMonitor:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._perf_to_epoch_ns = self._now_ns() - time.perf_counter_ns()
        self._last_sample_ns = self._now_ns()
        self._last_cpu_s = process_cpu_s()
        self._last_wait_ns = runqueue_wait_ns()
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        """Remove the GC callback and write what is pending (also the last gauges)."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self.poll(force_sample=True)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._gc_start = (now, info.get("generation", -1))
        elif self._gc_start is not None:
            start, generation = self._gc_start
            self._gc_start = None
            self._pending.append((start, now, generation, info.get("collected", 0),
                                  info.get("uncollectable", 0)))

    def poll(self, force_sample: bool = False) -> None:
        """Write pending GC events; every SAMPLE_INTERVAL_S, the gauges."""
        pending, self._pending = self._pending, []
        offset = self._perf_to_epoch_ns
        for start, end, generation, collected, uncollectable in pending:
            self.gc_pauses += 1
            self.gc_pause_ns += end - start
            self._gc_ms_since_sample += (end - start) / 1e6
            if self.events is not None:
                attributes = {"generation": generation, "collected": collected,
                              "uncollectable": uncollectable, "pid": self._pid}
                if self.worker is not None:
                    attributes["worker"] = self.worker
                self.events.append(GC_EVENT, start + offset, end + offset, SOURCE, json.dumps(attributes))
        now = self._now_ns()
        interval_ns = now - self._last_sample_ns
        if interval_ns >= SAMPLE_INTERVAL_S * 1e9 or (force_sample and interval_ns > 0):
            self._sample(now, interval_ns)

    def _sample(self, now: int, interval_ns: int) -> None:
        cpu_s = process_cpu_s()
        cpu_percent = 100.0 * (cpu_s - self._last_cpu_s) / (interval_ns / 1e9)
        self._last_cpu_s, self._last_sample_ns = cpu_s, now
        wait_ns = runqueue_wait_ns()
        waited = (wait_ns - self._last_wait_ns) if wait_ns is not None and self._last_wait_ns is not None else None
        self._last_wait_ns = wait_ns
        if self.signals is not None:
            names = self._names
            self.signals.append(now, names["generator.cpu_percent"], cpu_percent)
            self.signals.append(now, names["generator.in_flight"], float(self._in_flight()))
            self.signals.append(now, names["generator.gc_pause_ms"], self._gc_ms_since_sample)
            if waited is not None:
                self.signals.append(now, names["generator.runqueue_wait_ms"], waited / 1e6)
        self._gc_ms_since_sample = 0.0
