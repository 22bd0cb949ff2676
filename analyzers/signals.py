"""Signal series for charts: counters as rates, gauges as read, downsampled.

A counter (cumulative, per signals.json ``kind: counter``) becomes a rate in
units per second between consecutive reads, stamped at the later read; a
decrease (counter reset) yields no point. Gauges are kept as read. Each series
is reduced to at most ``max_points`` (default 2,000) by min/max bucketing:
``max_points / 2`` equal-time buckets each keep their minimum and maximum
point, so spikes survive downsampling. Cost: one O(n log n) sort of the table.

signals.json (written by the samplers) is read as::

    {"series":  {NAME: {"unit": str, "kind": "counter"|"gauge", "source": str, "description": str}},
     "sources": {SOURCE: {"available": bool, "reason": str|null}}}

A series missing from ``series`` is treated as a gauge without unit.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .records import NS_PER_S, int_column

MAX_POINTS = 2000


def counter_rate(t_ns: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t_ns, rate per second) between consecutive reads; resets and zero gaps dropped."""
    if len(t_ns) < 2:
        return t_ns[:0], value[:0]
    dt_s = np.diff(t_ns) / NS_PER_S
    dv = np.diff(value)
    keep = (dt_s > 0) & (dv >= 0)
    return t_ns[1:][keep], dv[keep] / dt_s[keep]


def downsample_minmax(t_ns: np.ndarray, value: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: per equal-time bucket, its min and max point, in time order."""
    if len(t_ns) <= max_points:
        return t_ns, value
    buckets = max(1, max_points // 2)
    span = max(int(t_ns[-1] - t_ns[0]), 1)
    bucket = np.minimum(((t_ns - t_ns[0]) * buckets) // span, buckets - 1) if span else np.zeros(len(t_ns), np.int64)
    order = np.lexsort((value, bucket))
    sorted_bucket = bucket[order]
    first = np.flatnonzero(np.r_[True, sorted_bucket[1:] != sorted_bucket[:-1]])
    last = np.r_[first[1:] - 1, len(order) - 1]
    keep = np.unique(np.concatenate([order[first], order[last]]))
    return t_ns[keep], value[keep]


def signal_series(signals: pa.Table, meta: dict, max_points: int = MAX_POINTS) -> list[dict]:
    """Chart-ready series sorted by name: ``{"name", "unit", "kind", "source", "t_ns", "values"}``."""
    if len(signals) == 0:
        return []
    valid = signals.filter(pc.and_(pc.is_valid(signals.column("series")), pc.is_valid(signals.column("value"))))
    order = pc.sort_indices(valid, sort_keys=[("series", "ascending"), ("t_ns", "ascending")])
    ordered = valid.take(order)
    names = ordered.column("series").to_numpy(zero_copy_only=False)
    t_ns, _ = int_column(ordered, "t_ns")
    values = ordered.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    bounds = np.flatnonzero(np.r_[True, names[1:] != names[:-1], True]) if len(names) else np.array([0])
    declared = (meta or {}).get("series", {})
    result = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        name = str(names[lo])
        info = declared.get(name, {})
        kind = info.get("kind", "gauge")
        unit = info.get("unit", "")
        t, v = t_ns[lo:hi], values[lo:hi]
        finite = np.isfinite(v)
        t, v = t[finite], v[finite]
        if kind == "counter":
            t, v = counter_rate(t, v)
            unit = f"{unit}/s" if unit else "/s"
        t, v = downsample_minmax(t, v, max_points)
        result.append({"name": name, "unit": unit, "kind": kind, "source": info.get("source"),
                       "description": info.get("description"),
                       "t_ns": t.tolist(), "values": v.tolist()})
    return result


def signal_sources(meta: dict) -> dict:
    """``{source: {"available": bool, "reason": str|None}}`` from signals.json."""
    sources = (meta or {}).get("sources", {})
    return {name: {"available": bool(info.get("available", False)), "reason": info.get("reason")}
            for name, info in sorted(sources.items())}
