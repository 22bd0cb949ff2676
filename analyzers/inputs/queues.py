"""The target's queue depth over time, from its ``queue_wait`` spans.

The instrumentation kit stamps each ``queue_wait`` span with ``queue.depth``
(requests waiting when this one was enqueued, itself included) and
``queue.capacity`` (the bounded queue's size). Each span gives one point at
its start time, so the series has one point per enqueued request: a queue that
fills shows as a ramp to the capacity line. Several services get one series
each (``queue.depth{service="name"}``). Cost: column-wise regex reads of the
attributes of the ``queue_wait`` rows (:mod:`.json_fields`), once per analysis
(:func:`queue_points`), O(n log n) for the chart's sort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.signals import SignalSeries
from tailscope.analyzers.inputs.json_fields import json_number_fields
from tailscope.analyzers.inputs.records import int_column
from tailscope.analyzers.inputs.signal_series import downsample_minmax

QUEUE_SPAN = "queue_wait"
DEPTH_ATTRIBUTE = "queue.depth"
CAPACITY_ATTRIBUTE = "queue.capacity"


@dataclass(frozen=True)
class QueuePoints:
    """The ``queue_wait`` spans of a run that carry a numeric ``queue.depth``, in table order.

    ``rows``: their rows in the spans table; ``t_ns``: start times (epoch ns);
    ``depth``, ``capacity`` (NaN where absent); ``service``: index into ``services``
    (-1: no service name). Read once per analysis and shared by the queue chart
    and the queue detector."""

    rows: np.ndarray
    t_ns: np.ndarray
    depth: np.ndarray
    capacity: np.ndarray
    service: np.ndarray
    services: list[str]

    def __len__(self) -> int:
        return len(self.rows)


def queue_points(spans: pa.Table, after_chunk: Callable[[], None] | None = None) -> QueuePoints:
    """:class:`QueuePoints` of ``spans``: a name comparison over the table, then only the
    ``queue_wait`` rows' attributes (JSON, :mod:`.json_fields`), start times and services
    are read. The attributes are read chunk by chunk of the table, calling ``after_chunk``
    after each (e.g. to hand back a memory-mapped chunk's pages)."""
    empty = QueuePoints(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
                        np.zeros(0, np.int64), [])
    if len(spans) == 0:
        return empty
    is_queue = pc.fill_null(pc.equal(spans.column("name"), QUEUE_SPAN), False)
    rows = np.flatnonzero(is_queue.to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return empty
    depth, capacity = _queue_numbers(spans.column("attributes"), is_queue, after_chunk)
    keep = ~np.isnan(depth)
    if not keep.any():
        return empty
    starts, _ = int_column(spans, "start_ns")
    services = spans.column("service").filter(is_queue)
    names = pc.drop_null(pc.unique(services))
    codes = pc.fill_null(pc.index_in(services, value_set=names), -1).to_numpy(zero_copy_only=False)
    return QueuePoints(rows=rows[keep], t_ns=starts[rows[keep]], depth=depth[keep], capacity=capacity[keep],
                       service=codes[keep].astype(np.int64), services=names.to_pylist())


def _queue_numbers(attributes: pa.ChunkedArray, is_queue: pa.ChunkedArray,
                   after_chunk: Callable[[], None] | None) -> tuple[np.ndarray, np.ndarray]:
    """(depth, capacity) of the rows ``is_queue`` selects, read one chunk at a time."""
    mask = is_queue.combine_chunks()
    depths, capacities, offset = [], [], 0
    for chunk in attributes.chunks:
        picked = chunk.filter(mask.slice(offset, len(chunk)))
        offset += len(chunk)
        if len(picked):
            numbers = json_number_fields(picked, (DEPTH_ATTRIBUTE, CAPACITY_ATTRIBUTE))
            depths.append(numbers[DEPTH_ATTRIBUTE])
            capacities.append(numbers[CAPACITY_ATTRIBUTE])
        if after_chunk is not None:
            after_chunk()
    if not depths:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(depths), np.concatenate(capacities)


def queue_depth_series(points: QueuePoints, max_points: int) -> list[SignalSeries]:
    """Chart series ``queue.depth`` and ``queue.capacity`` (gauges, unit "requests"),
    in the shape of :func:`tailscope.analyzers.inputs.signal_series.signal_series`; [] without queue spans.
    Several services get one series each (``queue.depth{service="name"}``)."""
    result = []
    codes = [code for code in [-1] + list(range(len(points.services))) if np.any(points.service == code)]
    labelled = len(codes) > 1
    for code in sorted(codes, key=lambda c: "" if c < 0 else points.services[c]):
        mine = points.service == code
        order = np.argsort(points.t_ns[mine], kind="stable")
        t = points.t_ns[mine][order].astype(np.int64)
        depth, capacity = points.depth[mine][order], points.capacity[mine][order]
        suffix = f'{{service="{points.services[code]}"}}' if labelled and code >= 0 and points.services[code] else ""
        known = np.isfinite(capacity)
        for name, values, keep, description in (
            ("queue.depth", depth, np.ones(len(t), bool), "requests waiting when a request was enqueued (queue_wait spans)"),
            ("queue.capacity", capacity, known, "the bounded queue's size (queue_wait spans)"),
        ):
            if not keep.any():
                continue
            ts, vs = downsample_minmax(t[keep], values[keep], max_points)
            result.append(SignalSeries(name=name + suffix, unit="requests", kind="gauge", source="spans",
                                       description=description, t_ns=ts.tolist(), values=vs.tolist()))
    return result
