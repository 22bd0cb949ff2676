"""The slowest requests as points for the latency-over-time chart, bounded.

A request is *slow* when it succeeded and its latency is above the run's P99.
The load period is cut into at most ``MAX_BUCKETS`` (600) equal time buckets
and each keeps its ``TOP_PER_BUCKET`` (5) slowest requests, so the chart gets
at most 3,000 points whatever the run's length, and every burst of slow
requests stays visible. Cost: one O(k log k) lexsort of the k slow requests.

This is analysis, not chart preparation, so it stays in analyzers: choosing the
slow requests needs every per-request record (latency, status, trace id), which only
the run directory holds; the analysis keeps the chosen points (``slow_requests``, with
trace ids that join to spans) and the report, which reads only the analysis, draws
them as they are.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.records import SlowRequests
from tailscope.analyzers.inputs.records import RequestArrays, take_rows

MAX_BUCKETS = 600
TOP_PER_BUCKET = 5


def top_per_bucket(bucket: np.ndarray, latency_ms: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` largest latencies of each bucket (vectorised)."""
    order = np.lexsort((-latency_ms, bucket))
    sorted_bucket = bucket[order]
    group_start = np.flatnonzero(np.r_[True, sorted_bucket[1:] != sorted_bucket[:-1]])
    rank = np.arange(len(order)) - np.repeat(group_start, np.diff(np.r_[group_start, len(order)]))
    return np.sort(order[rank < top])


def slow_request_points(req: RequestArrays, threshold_ms: float | None, period_ns: tuple[int, int] | None,
                        max_buckets: int = MAX_BUCKETS, top: int = TOP_PER_BUCKET) -> SlowRequests:
    """The ``slow_requests`` section (:class:`~tailscope.analysis_model.records.SlowRequests`).

    ``t_ns`` is each shown request's scheduled time (epoch ns), in time order;
    ``above_threshold`` counts every slow request, ``shown`` the ones kept.
    """
    empty = SlowRequests(threshold_ms, 0, 0, [], [], [], [])
    if threshold_ms is None or period_ns is None:
        return empty
    slow = np.flatnonzero(req.is_ok & (req.latency_ms > threshold_ms))
    if len(slow) == 0:
        return empty
    start, end = period_ns
    span = max(end - start, 1)
    bucket = np.clip(((req.scheduled_ns[slow] - start) * max_buckets) // span, 0, max_buckets - 1)
    kept = slow[top_per_bucket(bucket, req.latency_ms[slow], top)]
    kept = kept[np.argsort(req.scheduled_ns[kept], kind="stable")]
    return SlowRequests(
        threshold_ms=float(threshold_ms),
        above_threshold=int(len(slow)),
        shown=int(len(kept)),
        t_ns=req.scheduled_ns[kept].tolist(),
        latency_ms=req.latency_ms[kept].tolist(),
        cls=[None if c is None else str(c) for c in req.cls[kept]],
        trace_id=take_rows(req.trace_ids, kept).to_pylist(),
    )
