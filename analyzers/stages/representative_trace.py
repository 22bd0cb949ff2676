"""One representative slow trace per spike: its spans on a common time line.

The representative is the spike's slow request (succeeded, scheduled inside
the spike, latency above the baseline P99) that has server spans and whose
latency is the median of those slow requests' latencies — a typical slow
request, not the single worst outlier. Its trace is returned with every time
in ms relative to the request's *scheduled* send time, so the waterfall shows
generator lateness, network and each server stage in one picture.

Bounds: at most ``MAX_SPANS`` (200) spans, at most ``MAX_ATTRIBUTES`` (12)
attributes per span, each string cut to ``MAX_TEXT`` (200) characters.
Span names and attributes come from the target and are untrusted text.
Cost: two passes over the spans' trace ids against the spike's few slow ids (O(spans)) per spike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.spikes import RepresentativeTrace, TraceSpan
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, take_rows

MAX_SPANS = 200
MAX_ATTRIBUTES = 12
MAX_TEXT = 200
SPAN_KIND_SERVER = 2
STATUS_ERROR = 2


def _text(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def bounded_attributes(raw) -> dict:
    """At most MAX_ATTRIBUTES attributes of a span's JSON attribute text, as short strings."""
    try:
        parsed = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        parsed = {"raw": raw}
    if not isinstance(parsed, dict):
        parsed = {"value": parsed}
    return {_text(str(k)): _text(v) for k, v in list(parsed.items())[:MAX_ATTRIBUTES]}


def pick_representative(req: RequestArrays, slow_index: np.ndarray, spans: pa.Table,
                        span_request: np.ndarray | None = None) -> int | None:
    """Index (into ``req``) of the joined slow request with the median latency; None if none joined.

    ``span_request``: :func:`~.stages.request_of_span` of ``spans`` when known (no pass over
    the spans' trace ids then)."""
    slow_index = np.asarray(slow_index, dtype=np.int64)
    slow_ids = take_rows(req.trace_ids, slow_index)
    with_trace = slow_index[pc.is_valid(slow_ids).to_numpy(zero_copy_only=False)]
    if len(with_trace) == 0 or len(spans) == 0:
        return None
    if span_request is not None:
        joined = np.isin(with_trace, span_request)
    else:
        ids = pc.drop_null(slow_ids)
        span_ids = spans.column("trace_id")
        present = pc.unique(span_ids.filter(pc.fill_null(pc.is_in(span_ids, value_set=ids), False)))
        joined = pc.is_in(ids, value_set=present).to_numpy(zero_copy_only=False)
    candidates = with_trace[joined]
    if len(candidates) == 0:
        return None
    order = candidates[np.argsort(req.latency_ms[candidates], kind="stable")]
    return int(order[(len(order) - 1) // 2])


def span_depths(span_ids: list, parent_ids: list) -> list[int]:
    """Nesting depth of each span (0 for a span whose parent is not in the trace)."""
    parent_of = dict(zip(span_ids, parent_ids))
    depths = []
    for span_id in span_ids:
        depth, seen, current = 0, {span_id}, parent_of.get(span_id)
        while current in parent_of and current not in seen:
            seen.add(current)
            depth += 1
            current = parent_of[current]
        depths.append(depth)
    return depths


def trace_spans(spans: pa.Table, trace_id: str, origin_ns: int, stage_map: Mapping[str, str],
                rows: np.ndarray | None = None) -> list[TraceSpan]:
    """The spans of one trace, by start time, as waterfall rows (ms since ``origin_ns``).

    ``rows``: the rows of ``spans`` in that trace when known (no pass over the trace ids)."""
    if rows is None:
        rows = spans.filter(pc.equal(spans.column("trace_id"), trace_id)).to_pylist()
    else:
        rows = take_rows(spans, rows).to_pylist()
    rows.sort(key=lambda r: (r["start_ns"] or 0, -(r["end_ns"] or 0)))
    rows = rows[:MAX_SPANS]
    depths = span_depths([r["span_id"] for r in rows], [r["parent_span_id"] for r in rows])
    out = []
    for row, depth in zip(rows, depths):
        name = row["name"] or ""
        is_server = row["kind"] == SPAN_KIND_SERVER
        out.append(TraceSpan(
            name=_text(name), stage="server" if is_server else stage_map.get(name),
            service=row["service"], depth=depth,
            start_ms=((row["start_ns"] or origin_ns) - origin_ns) / NS_PER_MS,
            end_ms=((row["end_ns"] or origin_ns) - origin_ns) / NS_PER_MS,
            error=row["status_code"] == STATUS_ERROR,
            attributes=bounded_attributes(row["attributes"]),
        ))
    return out


def representative_trace(req: RequestArrays, slow_index: np.ndarray, spans: pa.Table,
                         stage_map: Mapping[str, str], span_request: np.ndarray | None = None,
                         ) -> RepresentativeTrace | None:
    """The waterfall of a typical slow request of a spike, or None when no slow request joined a span.

    ``sent_ms`` and ``end_ms`` are the client's send and completion times relative to the scheduled send.
    ``span_request``: :func:`~.stages.request_of_span` of ``spans`` when known.
    """
    index = pick_representative(req, slow_index, spans, span_request)
    if index is None:
        return None
    origin = int(req.scheduled_ns[index])
    trace_id = str(req.trace_ids[index].as_py())
    rows = None if span_request is None else np.flatnonzero(span_request == index)
    return RepresentativeTrace(
        trace_id=trace_id,
        cls=None if req.cls[index] is None else str(req.cls[index]),
        latency_ms=float(req.latency_ms[index]),
        scheduled_ns=origin,
        sent_ms=float(req.lateness_ms[index]) if req.has_sent[index] else None,
        end_ms=float(req.latency_ms[index]),
        spans=tuple(trace_spans(spans, trace_id, origin, stage_map, rows)),
    )
