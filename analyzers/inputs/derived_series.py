"""The analysis's ``signals`` section: the sampled series plus the series derived here
from other tables, the samplers' sources and how the sampler kept its schedule.

Derived series (added to ``signals.series``, ``source`` = what they come from):

* ``gc.pause_ms{generation="G"}`` — one point per GC pause of the target (kit
  ``gc_pause`` events): at its start, value = its duration in ms;
* ``queue.depth`` / ``queue.capacity`` — from ``queue_wait`` spans
  (:mod:`.queues`);
* ``cgroup.cpu.throttled_period_share`` — Δ``nr_throttled`` / Δ``nr_periods``
  between consecutive reads: the share of CFS periods in which the cgroup ran
  out of quota (0–1);
* ``generator.lateness_p99_ms`` / ``generator.lateness_max_ms`` — per window,
  how late the generator sent requests after their scheduled time.

They are computed from the run directory (records, events, spans, counters), so they
are analysis, and cause detectors may read them. How the report groups series into
panels is the report's business (tailscope.reports.signal_panels).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.signals import Signals, SignalSeries
from tailscope.analyzers.inputs.queues import QueuePoints, queue_depth_series, queue_points
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column
from tailscope.analyzers.inputs.signal_series import (
    MAX_POINTS,
    downsample_minmax,
    load_receiver_meta,
    signal_series,
    signal_sources,
)


def gc_pause_series(events: pa.Table, max_points: int) -> list[SignalSeries]:
    """``gc.pause_ms{generation="G"}``: one point per gc_pause event (start, duration ms)."""
    pauses = events.filter(pc.equal(events.column("kind"), "gc_pause"))
    if len(pauses) == 0:
        return []
    start, _ = int_column(pauses, "start_ns")
    end, _ = int_column(pauses, "end_ns")
    generations = []
    for text in pauses.column("attributes").to_pylist():
        try:
            attrs = json.loads(text) if text else {}
        except ValueError:
            attrs = {}
        generation = attrs.get("gc.generation", attrs.get("generation")) if isinstance(attrs, dict) else None
        generations.append("?" if generation is None else str(generation))
    generations = np.asarray(generations, dtype=object)
    out = []
    for generation in sorted(set(generations)):
        mask = generations == generation
        order = np.argsort(start[mask], kind="stable")
        t = start[mask][order]
        ms = ((end[mask] - start[mask]) / NS_PER_MS)[order]
        t, ms = downsample_minmax(t, ms, max_points)
        out.append(SignalSeries(name=f'gc.pause_ms{{generation="{generation}"}}', unit="ms", kind="event",
                                source="events", description=f"duration of each generation-{generation} GC pause, at its start",
                                t_ns=t.tolist(), values=ms.tolist()))
    return out


def throttled_period_share(signals: pa.Table, max_points: int) -> list[SignalSeries]:
    """``cgroup.cpu.throttled_period_share`` (and per remote host) from raw
    ``nr_throttled``/``nr_periods`` counters read at the same times."""
    if len(signals) == 0:
        return []
    names = signals.column("series")
    out = []
    throttled_names = sorted({n for n in pc.unique(names).to_pylist()
                              if n and n.split("{", 1)[0] == "cgroup.cpu.nr_throttled"})
    for throttled_name in throttled_names:
        labels = throttled_name[len("cgroup.cpu.nr_throttled"):]
        t_thr, v_thr = _series_arrays(signals, throttled_name)
        t_per, v_per = _series_arrays(signals, "cgroup.cpu.nr_periods" + labels)
        common, i_thr, i_per = np.intersect1d(t_thr, t_per, return_indices=True)
        if len(common) < 2:
            continue
        d_thr, d_per = np.diff(v_thr[i_thr]), np.diff(v_per[i_per])
        keep = (d_per > 0) & (d_thr >= 0)
        t, share = common[1:][keep], np.minimum(d_thr[keep] / d_per[keep], 1.0)
        t, share = downsample_minmax(t, share, max_points)
        out.append(SignalSeries(name="cgroup.cpu.throttled_period_share" + labels, unit="share", kind="gauge",
                                source="signals", description="share of CFS periods in which the cgroup was throttled",
                                t_ns=t.tolist(), values=share.tolist()))
    return out


def _series_arrays(signals: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    rows = signals.filter(pc.equal(signals.column("series"), name))
    t, _ = int_column(rows, "t_ns")
    v = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def lateness_series(req: RequestArrays, period: tuple[int, int] | None, window_s: float) -> list[SignalSeries]:
    """``generator.lateness_p99_ms`` and ``_max_ms`` per window of scheduled time (sent requests only)."""
    sent = req.has_sent & np.isfinite(req.lateness_ms)
    if period is None or not sent.any() or window_s <= 0:
        return []
    width = int(window_s * 1e9)
    scheduled = req.scheduled_ns[sent]
    lateness = req.lateness_ms[sent]
    bucket = (scheduled - period[0]) // width
    order = np.argsort(bucket, kind="stable")
    bucket, lateness = bucket[order], lateness[order]
    edges = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1], True])
    t, p99, peak = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        values = lateness[lo:hi]
        t.append(int(period[0] + bucket[lo] * width + width // 2))
        p99.append(float(np.percentile(values, 99)))
        peak.append(float(values.max()))
    t = np.asarray(t, dtype=np.int64)
    return [SignalSeries(name=name, unit="ms", kind="gauge", source="requests", description=description,
                         t_ns=ts.tolist(), values=vs.tolist())
            for name, values, description in (
                ("generator.lateness_p99_ms", p99, f"P99 of send time − scheduled time per {window_s:g} s window"),
                ("generator.lateness_max_ms", peak, f"largest send time − scheduled time per {window_s:g} s window"))
            for ts, vs in [downsample_minmax(t, np.asarray(values), MAX_POINTS)]]


def signals_section(run, req: RequestArrays, period: tuple[int, int] | None, window_s: float,
                    max_points: int = MAX_POINTS, queue: QueuePoints | None = None) -> Signals:
    """The analysis's ``signals``: sampled and derived series, sources, and how the
    sampler kept its schedule (``sampling``, from signals.json; None if absent).
    ``queue``: the run's :func:`~.queues.queue_points` when already read."""
    series = signal_series(run.signals, run.signals_meta, max_points, load_receiver_meta(run.path))
    series += throttled_period_share(run.signals, max_points)
    series += gc_pause_series(run.events, max_points)
    series += queue_depth_series(queue if queue is not None else queue_points(run.spans), max_points)
    series += lateness_series(req, period, window_s)
    return Signals(series, signal_sources(run.signals_meta), (run.signals_meta or {}).get("sampling"))
