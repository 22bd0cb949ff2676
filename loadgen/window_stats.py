"""Per-window histograms of every request, written to ``windows.arrow`` as the run goes.

No Locust or gevent import. :class:`WindowAggregator` counts each request in
the window of its *scheduled* time (windows aligned to epoch multiples of
``window_s``), per request class: requests, ok, errors by kind, late sends,
records kept, and three log-bucketed histograms (latency, service time,
lateness; :mod:`tailscope.rundir.histograms`, ±1 % relative).

Rows are *increments*: :meth:`WindowAggregator.emit` writes what was counted
since the previous emit and forgets it, so memory is bounded by the windows
touched within one emit interval (typically 1–3 windows × classes × 3 lists of 1,200 ints)
and a killed harness loses at most one interval. Readers add up the rows of
equal ``(start_ns, cls)``.

:class:`SpikeWatch` is the live spike test used by retention: it keeps, for
each window still able to receive requests (``settle_s`` = client timeout
plus a margin), one latency histogram over all classes; once a window has
settled its P99 is compared with the median P99 of the last
``baseline_windows`` settled windows. A window whose P99 exceeds
``factor ×`` that median (with at least ``min_requests`` successful requests
and ``min_baseline`` windows of history) is a spike. Memory: one histogram
(a list of 1,200 ints, ~10 kB) per unsettled window plus ``baseline_windows``
floats. CPU: about 3 µs per request for the aggregator, 3 µs more with the
spike watch and retention (benchmarked in Python 3.11).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np

from tailscope.rundir import histograms as hist
from tailscope.rundir.request_record import latency_ns, lateness_ns, service_ns
from tailscope.rundir.schema import ERROR_KINDS
from tailscope.support.units import LATE_THRESHOLD_NS

_KIND_INDEX = {kind: i for i, kind in enumerate(ERROR_KINDS)}


class _Cell:
    """Increments of one (window, class) since the last emit."""

    __slots__ = ("requests", "ok", "errors", "late", "kept", "latency", "service", "lateness")

    def __init__(self):
        self.requests = self.ok = self.late = self.kept = 0
        self.errors = [0] * len(ERROR_KINDS)
        # Plain lists: incrementing one is ~20× cheaper than a numpy element.
        self.latency = [0] * hist.BUCKETS
        self.service = [0] * hist.BUCKETS
        self.lateness = [0] * hist.BUCKETS


class WindowAggregator:
    """Counts requests per (window, class) and appends increment rows to a sink.

    ``sink`` has ``append(*values)`` in ``WINDOWS_SCHEMA`` order (an Appender).
    Not thread-safe: call from the generator's thread.
    """

    def __init__(self, sink, window_s: float = 1.0, worker: int = 0):
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.sink = sink
        self.window_ns = int(round(window_s * 1e9))
        self.worker = worker
        self._cells: dict[tuple[int, str], _Cell] = {}
        self.rows_emitted = 0

    def window_start(self, t_ns: int) -> int:
        """Start (epoch ns) of the window holding ``t_ns``."""
        return t_ns - t_ns % self.window_ns

    def _cell(self, scheduled_ns: int, cls: str) -> _Cell:
        key = (self.window_start(scheduled_ns), cls)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell()
        return cell

    def add(self, scheduled_ns: int, sent_ns: int | None, end_ns: int | None, cls: str,
            error_kind: str | None, kept: bool) -> None:
        """Count one request (times epoch ns; ``sent_ns`` None when never sent)."""
        cell = self._cell(scheduled_ns, cls)
        cell.requests += 1
        cell.kept += kept
        if sent_ns is None:
            cell.late += 1
        else:
            lateness = lateness_ns(scheduled_ns, sent_ns)
            cell.late += lateness > LATE_THRESHOLD_NS
            cell.lateness[hist.bucket_of(lateness)] += 1
        if error_kind is not None:
            cell.errors[_KIND_INDEX.get(error_kind, _KIND_INDEX["other"])] += 1
        elif end_ns is not None:
            cell.ok += 1
            cell.latency[hist.bucket_of(latency_ns(scheduled_ns, end_ns))] += 1
            if sent_ns is not None:
                cell.service[hist.bucket_of(service_ns(sent_ns, end_ns))] += 1

    def add_kept(self, scheduled_ns: int, cls: str, n: int = 1) -> None:
        """Count ``n`` records of already-counted requests written later (a spike's ring)."""
        self._cell(scheduled_ns, cls).kept += n

    def emit(self) -> int:
        """Append one increment row per touched (window, class); return the rows written."""
        cells, self._cells = self._cells, {}
        for (start, cls), cell in sorted(cells.items(), key=lambda item: item[0][0]):
            lat_i, lat_c = _sparse(cell.latency)
            svc_i, svc_c = _sparse(cell.service)
            late_i, late_c = _sparse(cell.lateness)
            self.sink.append(start, start + self.window_ns, cls, cell.requests, cell.ok,
                             sum(cell.errors), *cell.errors, cell.late, cell.kept,
                             lat_i, lat_c, svc_i, svc_c, late_i, late_c, self.worker)
        self.rows_emitted += len(cells)
        return len(cells)


def _sparse(counts: list[int]) -> tuple[list[int], list[int]]:
    """(bucket indexes, counts) of the non-empty buckets of a list histogram."""
    index = [i for i, c in enumerate(counts) if c]
    return index, [counts[i] for i in index]


@dataclass(frozen=True)
class SettledWindow:
    """A window no more requests can land in, with its P99 and the spike verdict."""

    start_ns: int
    end_ns: int
    ok: int
    p99_ms: float | None
    baseline_p99_ms: float | None
    spike: bool


class SpikeWatch:
    """Live P99-spike test over settled windows (see module docstring)."""

    def __init__(self, window_s: float, settle_s: float, factor: float = 3.0,
                 baseline_windows: int = 300, min_requests: int = 20, min_baseline: int = 10):
        self.window_ns = int(round(window_s * 1e9))
        self.settle_ns = int(round(settle_s * 1e9))
        self.factor = factor
        self.min_requests = min_requests
        self.min_baseline = min_baseline
        self._open: dict[int, np.ndarray] = {}
        self._history: deque[float] = deque(maxlen=baseline_windows)

    def add(self, scheduled_ns: int, latency_ns: int | None) -> None:
        """Count one request of the window of ``scheduled_ns`` (latency None: failed)."""
        start = scheduled_ns - scheduled_ns % self.window_ns
        histogram = self._open.get(start)
        if histogram is None:
            histogram = self._open[start] = [0] * hist.BUCKETS
        if latency_ns is not None:
            histogram[hist.bucket_of(latency_ns)] += 1

    def settle(self, now_ns: int) -> list[SettledWindow]:
        """Close every window that ended more than ``settle_s`` before ``now_ns``."""
        ready = sorted(s for s in self._open if s + self.window_ns + self.settle_ns <= now_ns)
        return [self._judge(start, self._open.pop(start)) for start in ready]

    def settle_all(self) -> list[SettledWindow]:
        """Close every open window (the run is over)."""
        return [self._judge(start, self._open.pop(start)) for start in sorted(self._open)]

    def _judge(self, start: int, counts: list[int]) -> SettledWindow:
        histogram = np.asarray(counts, dtype=np.int64)
        ok = int(histogram.sum())
        p99 = hist.quantile_ms(histogram, 0.99)
        baseline = statistics.median(self._history) if len(self._history) >= self.min_baseline else None
        spike = (p99 is not None and baseline is not None and ok >= self.min_requests
                 and p99 > self.factor * baseline)
        if p99 is not None and ok >= self.min_requests and not spike:
            self._history.append(p99)  # spikes stay out of the baseline
        return SettledWindow(start, start + self.window_ns, ok, p99, baseline, spike)
