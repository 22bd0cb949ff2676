"""The target's queue depth over time, from its ``queue_wait`` spans.

The instrumentation kit stamps each ``queue_wait`` span with ``queue.depth``
(requests waiting when this one was enqueued, itself included) and
``queue.capacity`` (the bounded queue's size). Each span gives one point at
its start time, so the series has one point per enqueued request: a queue that
fills shows as a ramp to the capacity line. Several services get one series
each (``queue.depth{service="name"}``). Cost: column-wise regex reads of the
attributes (:mod:`.json_fields`), O(n log n) for the sort.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .json_fields import json_number_fields
from .signals import downsample_minmax
from .records import int_column

QUEUE_SPAN = "queue_wait"
DEPTH_ATTRIBUTE = "queue.depth"
CAPACITY_ATTRIBUTE = "queue.capacity"


def _points_by_service(spans: pa.Table) -> dict[str | None, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{service: (t_ns, depth, capacity)}`` of queue_wait spans that carry a numeric depth
    (capacity NaN where absent), in table order."""
    if len(spans) == 0:
        return {}
    needed = spans.select(["name", "service", "start_ns", "attributes"])
    queue_spans = needed.filter(pc.equal(needed.column("name"), QUEUE_SPAN))
    if len(queue_spans) == 0:
        return {}
    numbers = json_number_fields(queue_spans.column("attributes"), (DEPTH_ATTRIBUTE, CAPACITY_ATTRIBUTE))
    depth, capacity = numbers[DEPTH_ATTRIBUTE], numbers[CAPACITY_ATTRIBUTE]
    keep = ~np.isnan(depth)
    if not keep.any():
        return {}
    starts, _ = int_column(queue_spans, "start_ns")
    services = pc.dictionary_encode(queue_spans.column("service").combine_chunks())
    codes = pc.fill_null(services.indices, -1).to_numpy(zero_copy_only=False)
    out: dict[str | None, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for code, service in [(-1, None)] + list(enumerate(services.dictionary.to_pylist())):
        rows = keep & (codes == code)
        if rows.any():
            out[service] = (starts[rows], depth[rows], capacity[rows])
    return out


def queue_depth_series(spans: pa.Table, max_points: int) -> list[dict]:
    """Chart series ``queue.depth`` and ``queue.capacity`` (gauges, unit "requests"),
    in the shape of :func:`tailscope.analyzers.signals.signal_series`; [] without queue spans."""
    by_service = _points_by_service(spans)
    result = []
    for service in sorted(by_service, key=lambda s: s or ""):
        t, depth, capacity = (np.asarray(v) for v in by_service[service])
        order = np.argsort(t, kind="stable")
        t, depth, capacity = t[order].astype(np.int64), depth[order], capacity[order]
        suffix = f'{{service="{service}"}}' if len(by_service) > 1 and service else ""
        known = np.isfinite(capacity)
        for name, values, keep, description in (
            ("queue.depth", depth, np.ones(len(t), bool), "requests waiting when a request was enqueued (queue_wait spans)"),
            ("queue.capacity", capacity, known, "the bounded queue's size (queue_wait spans)"),
        ):
            if not keep.any():
                continue
            ts, vs = downsample_minmax(t[keep], values[keep], max_points)
            result.append({"name": name + suffix, "unit": "requests", "kind": "gauge", "source": "spans",
                           "description": description, "t_ns": ts.tolist(), "values": vs.tolist()})
    return result
