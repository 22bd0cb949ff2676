"""Signal series for charts: counters as rates, gauges as read, downsampled.

A counter (cumulative, per signals.json ``kind: counter``) becomes a rate in
units per second between consecutive reads, stamped at the later read; a
decrease (counter reset) yields no point. A counter of time (unit ns, us, ms
or s) becomes seconds per second, unit ``s/s``: CPU seconds per second are
cores in use, stall or wait time per second is the share of wall time stalled
(PSI, throttling) or the mean number of threads waiting (run-queue wait). Gauges are kept as read. Each series
is reduced to at most ``max_points`` (default 2,000) by min/max bucketing:
``max_points / 2`` equal-time buckets each keep their minimum and maximum
point, so spikes survive downsampling. Cost: one O(n log n) sort of the table.

signals.json (written by the samplers) is read as::

    {"series":  {NAME: {"unit": str, "kind": "counter"|"gauge", "source": str, "description": str}},
     "sources": {SOURCE: {"available": bool, "reason": str|null}}}

A series missing from ``series`` is looked up, by its metric name (the part
before ``{``), in ``signals.receiver.json`` (``{"metrics": {NAME: {"unit",
"kind", "description"}}}``, the descriptors of OTLP metrics the receiver
stored: a remote ``tailscope agent``'s series, a target's own metrics);
otherwise it is a gauge without unit.

Clock alignment: a series labelled ``host="H"`` comes from a remote agent
whose clock differs from the harness's; when the run holds
``agent.clock_offset_ns{host="H"}`` (harness minus agent, ns), the series'
times are shifted by that offset, interpolated between estimates.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.signals import SignalSeries, SignalSource
from tailscope.analyzers.inputs.records import NS_PER_S, int_column
from tailscope.rundir import read_json
from tailscope.rundir import schema as fmt

MAX_POINTS = 2000
#: Seconds per unit of the time units a counter may carry.
TIME_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
OFFSET_SERIES = "agent.clock_offset_ns"
_HOST_LABEL = re.compile(r'[{,]host="((?:[^"\\]|\\.)*)"')


def load_receiver_meta(run_path: str) -> dict:
    """``signals.receiver.json`` of a run (``{}`` when the receiver stored no metrics)."""
    return read_json(os.path.join(run_path, fmt.SIGNALS_RECEIVER_META), {}) or {}


def host_label(series: str) -> str | None:
    """The ``host`` label of a series name (a remote agent's series), else None."""
    match = _HOST_LABEL.search(series)
    return match.group(1) if match else None


def clock_offsets(names: np.ndarray, t_ns: np.ndarray, values: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{host: (estimate times, offsets ns)}`` from ``agent.clock_offset_ns{host=...}`` rows
    (arrays sorted by series then time, as in :func:`signal_series`)."""
    out = {}
    for name in np.unique(names[np.char.startswith(names.astype(str), OFFSET_SERIES + "{")]) if len(names) else []:
        host = host_label(str(name))
        mask = names == name
        if host is not None and mask.any():
            out[host] = (t_ns[mask], values[mask])
    return out


def align_to_harness(t_ns: np.ndarray, offset: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Agent times + the interpolated offset (constant beyond the first/last estimate)."""
    at, value = offset
    return t_ns + np.round(np.interp(t_ns, at, value)).astype(np.int64)


def describe_series(name: str, declared: dict, receiver_metrics: dict) -> dict:
    """Unit/kind/source/description of a series: signals.json first, then the receiver's descriptors."""
    if name in declared:
        return declared[name]
    metric = receiver_metrics.get(name.split("{", 1)[0])
    if metric is not None:
        return {**metric, "source": "otlp:" + (host_label(name) or "target")}
    return {}


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


def signal_series(signals: pa.Table, meta: dict, max_points: int = MAX_POINTS,
                  receiver_meta: dict | None = None) -> list[SignalSeries]:
    """Chart-ready series sorted by name (counters as rates), remote series aligned to the
    harness clock (module docstring)."""
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
    receiver_metrics = (receiver_meta or {}).get("metrics", {})
    offsets = clock_offsets(names, t_ns, values)
    result = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        name = str(names[lo])
        info = describe_series(name, declared, receiver_metrics)
        kind = info.get("kind", "gauge")
        unit = info.get("unit", "")
        t, v = t_ns[lo:hi], values[lo:hi]
        host = host_label(name) if offsets else None
        if host in offsets:
            t = align_to_harness(t, offsets[host])
        finite = np.isfinite(v)
        t, v = t[finite], v[finite]
        if kind == "counter":
            t, v = counter_rate(t, v)
            if unit in TIME_UNIT_SECONDS:  # time per time: seconds per second (cores, stall share)
                v = v * TIME_UNIT_SECONDS[unit]
                unit = "s/s"
            else:
                unit = f"{unit}/s" if unit else "/s"
        t, v = downsample_minmax(t, v, max_points)
        result.append(SignalSeries(name=name, unit=unit, kind=kind, source=info.get("source"),
                                   description=info.get("description"), t_ns=t.tolist(), values=v.tolist()))
    return result


def signal_sources(meta: dict) -> dict[str, SignalSource]:
    """Each sampler source's availability and why not, from signals.json (by name)."""
    sources = (meta or {}).get("sources", {})
    return {name: SignalSource(bool(info.get("available", False)), info.get("reason"))
            for name, info in sorted(sources.items())}
