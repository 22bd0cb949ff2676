"""Per-request records and the live statistics shown while a run is going.

No Locust or gevent import. :class:`Recorder` hands one
:class:`~tailscope.rundir.request_record.RequestRecord` per request (a row of
``requests.arrow``) to a sink with ``append_record(record)`` (a
:class:`tailscope.rundir.Appender`, the record keeper or a worker's column
buffer), and keeps live
statistics over a recent window with bounded memory: one log-bucketed latency
histogram (2 % relative precision) per second of the window, plus counters.

Latency is measured from the scheduled send time
(:func:`~tailscope.rundir.request_record.latency_ns`), so time a request spent
waiting in the generator counts (no coordinated omission).
Requests that were never sent (``dropped``) count as errors and late, but have
no latency and stay out of the percentiles.

Lateness is counted when a request becomes due, not when it ends: the
exchanger reports each send (:meth:`Recorder.sent`), a dropped request counts
when it is recorded, and the live late share is over the requests due in the
window. (Counted at the end, the first seconds of long streams showed the
share of the few that had ended: "late 33.3%" of 3 requests.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailscope.rundir import histograms as hist
from tailscope.rundir.request_record import RequestRecord, latency_ns, lateness_ns
from tailscope.support.units import LATE_THRESHOLD_NS, NS_PER_S

#: Default length of the window for live percentiles, seconds.
LIVE_WINDOW_S = 10



def latency_bucket(latency_ns: int) -> int:
    """Histogram bucket of a latency (ns); the layout and its accuracy are ``rundir.histograms``'."""
    return hist.bucket_of(latency_ns)


def bucket_value_ms(index: int) -> float:
    """Representative latency of a bucket, ms (its geometric middle, within ``hist.RELATIVE_ERROR``)."""
    return float(hist.bucket_value_ms(index))


@dataclass
class LiveStats:
    """Statistics over the last ``window_s`` seconds of completed requests."""

    window_s: int
    count: int  # requests ended in the window (dropped ones included)
    errors: int
    rate_last_s: float  # requests ended during the last complete second, per second
    p50_ms: float | None  # latency from scheduled send; None when no latency in the window
    p99_ms: float | None
    #: Share of the requests due in the window (scheduled time passed, then sent
    #: or dropped) that left more than 1 ms (LATE_THRESHOLD_NS) late or never left.
    late_share: float
    due: int = 0  # requests due in the window whose send (or drop) is known: late_share's denominator


class _SecondSlot:
    """One epoch second: counters and latency histogram of the requests that ended
    in it, and the due / late counts of the requests that became due in it."""

    __slots__ = ("second", "count", "errors", "due", "late", "histogram")

    def __init__(self):
        self.second = -1
        self.count = 0
        self.errors = 0
        self.due = 0
        self.late = 0
        self.histogram = np.zeros(hist.BUCKETS, dtype=np.int64)

    def reset(self, second: int) -> None:
        self.second = second
        self.count = self.errors = self.due = self.late = 0
        self.histogram[:] = 0


class WindowedStats:
    """Counts, error and lateness shares, and latency percentiles over the last
    ``window_s`` seconds. Memory: ``window_s + 1`` histograms of 1200 counters."""

    def __init__(self, window_s: int = LIVE_WINDOW_S):
        if window_s < 1:
            raise ValueError(f"window_s must be >= 1, got {window_s!r}")
        self.window_s = window_s
        self._slots = [_SecondSlot() for _ in range(window_s + 1)]

    def _slot(self, t_ns: int) -> _SecondSlot | None:
        """The slot of the second holding ``t_ns`` (epoch ns); None when that second
        is older than the one the slot holds (already out of the live view)."""
        second = t_ns // NS_PER_S
        slot = self._slots[second % len(self._slots)]
        if slot.second != second:
            if second < slot.second:
                return None
            slot.reset(second)
        return slot

    def add(self, end_ns: int, latency_ns: int | None, error: bool) -> None:
        """Count one request that ended at ``end_ns`` (epoch ns); ``latency_ns``
        None for one never sent (no latency)."""
        slot = self._slot(end_ns)
        if slot is None:
            return
        slot.count += 1
        slot.errors += error
        if latency_ns is not None:
            slot.histogram[latency_bucket(latency_ns)] += 1

    def add_due(self, due_ns: int, late: bool) -> None:
        """Count one request that became due at ``due_ns`` (epoch ns, its scheduled
        time) and was sent (``late``: more than LATE_THRESHOLD_NS after it) or dropped
        (``late`` True)."""
        slot = self._slot(due_ns)
        if slot is None:
            return
        slot.due += 1
        slot.late += late

    def snapshot(self, now_ns: int, window_s: int | None = None) -> LiveStats:
        """Statistics for the ``window_s`` seconds (at most the stats' own window;
        default all of it) up to ``now_ns`` (epoch ns)."""
        window_s = self.window_s if window_s is None else max(1, min(int(window_s), self.window_s))
        now_s = now_ns // NS_PER_S
        recent = [s for s in self._slots if now_s - window_s < s.second <= now_s]
        count = sum(s.count for s in recent)
        due = sum(s.due for s in recent)
        late = sum(s.late for s in recent)
        last_complete = [s.count for s in recent if s.second == now_s - 1]
        histogram = sum((s.histogram for s in recent), np.zeros(hist.BUCKETS, dtype=np.int64))
        return LiveStats(
            window_s=window_s,
            count=count,
            errors=sum(s.errors for s in recent),
            rate_last_s=float(last_complete[0]) if last_complete else 0.0,
            p50_ms=_percentile_ms(histogram, 0.50),
            p99_ms=_percentile_ms(histogram, 0.99),
            late_share=late / due if due else 0.0,
            due=due,
        )


def _percentile_ms(histogram: np.ndarray, q: float) -> float | None:
    """The ``q`` quantile (0..1) of a bucket histogram, ms; None when it is empty."""
    total = int(histogram.sum())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    index = int(np.searchsorted(np.cumsum(histogram), rank, side="left"))
    return bucket_value_ms(index)


class Recorder:
    """Writes one row per request to ``sink`` and keeps run totals and live stats.

    Not thread-safe on its own: call it from one thread (the generator's event
    loop); the sink may flush from another thread.
    """

    def __init__(self, sink, *, worker: int = 0, window_s: int = LIVE_WINDOW_S, chunk_sink=None):
        self.sink = sink
        self.chunk_sink = chunk_sink  # append(trace_id, index, t_ns[, tokens]) per streamed chunk, or None
        self.worker = worker
        self.live = WindowedStats(window_s)
        self.recorded = 0  # rows written
        self.completed = 0  # rows of requests that were sent and ended (reply, error or timeout)
        self.dropped = 0  # rows of requests that were never sent
        self.errors = 0  # rows with an error kind (dropped ones included)

    def record(self, record: RequestRecord) -> None:
        """Hand one request's record to the sink (``append_record``) and count it.
        ``record.sent_ns`` is None for a request that was never sent (``error_kind``
        ``dropped``); its ``worker`` is written as the recorder's :attr:`worker` (callers
        that set it save a copy)."""
        if record.worker != self.worker:
            record = record._replace(worker=self.worker)
        self.sink.append_record(record)
        self.recorded += 1
        is_error = record.error_kind is not None
        self.errors += is_error
        if record.sent_ns is None:
            self.dropped += 1
            self.live.add_due(record.scheduled_ns, True)
            self.live.add(record.end_ns, None, is_error)
            return
        self.completed += 1
        self.live.add(record.end_ns, latency_ns(record.scheduled_ns, record.end_ns), is_error)

    def sent(self, scheduled_ns: int, sent_ns: int) -> None:
        """Count a request as due and sent, at the moment it is sent (epoch ns), for
        the live late share; its row follows when it ends (:meth:`record`)."""
        self.live.add_due(scheduled_ns, lateness_ns(scheduled_ns, sent_ns) > LATE_THRESHOLD_NS)

    def record_chunks(self, trace_id: str, times_ns: list[int], tokens: list[int] | None = None) -> None:
        """Append one row per streamed chunk (``CHUNKS_SCHEMA`` order) when a chunk sink is set, in
        one ``append_columns`` call when the sink has one (else ``append`` per chunk).
        ``tokens``: each chunk's token count (OpenAI-API classes); None leaves the column null (1 token)."""
        sink = self.chunk_sink
        if sink is None or not times_ns:
            return
        append_columns = getattr(sink, "append_columns", None)
        if append_columns is not None:  # one call per response, not per chunk
            columns = {"trace_id": [trace_id] * len(times_ns), "index": range(len(times_ns)), "t_ns": times_ns}
            if tokens is not None:
                columns["tokens"] = tokens
            append_columns(columns)
            return
        if tokens is None:
            for index, t_ns in enumerate(times_ns):
                sink.append(trace_id, index, t_ns)
        else:
            for index, (t_ns, count) in enumerate(zip(times_ns, tokens)):
                sink.append(trace_id, index, t_ns, count)

    def snapshot(self, now_ns: int, window_s: int | None = None) -> LiveStats:
        """Live statistics for the last ``window_s`` seconds (default: the whole
        live window) up to ``now_ns`` (epoch ns)."""
        return self.live.snapshot(now_ns, window_s)
