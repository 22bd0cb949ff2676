"""The P99 line of the latency-over-time chart, over samples large enough to claim a P99.

A 1-s window at 40 requests/s holds 40 latency samples; a P99 needs at least
N = 459 (:func:`~.percentiles.min_samples_for_claim`, early stopping at 99%
confidence), so per-window P99s are unclaimed almost everywhere and a chart of
them is empty. Here each point is the P99 of a *rolling sample*: the requests
scheduled in ``[t − span, t)``, where ``span`` is the wider of the step and
the time the last N requests before ``t`` took. Every point therefore holds at
least N samples and is claimed; at 40 requests/s a point covers about 11.5 s,
at 1,000 requests/s just its step. Points are ``step_s`` apart: the display
window, widened so that there are at most ``MAX_POINTS`` (2,000). A point that
N requests cannot yet fill (the start of the run) is left out.

Output (``analysis.tail_line``, JSON-ready)::

    {"percentile": "p99", "min_samples": 459, "step_s": float,
     "span_s": {"median": float, "max": float}, "t_ns": [point ends], "values_ms": [...], "n": [samples]}

or None without enough samples for one point. Cost: one O(n log n) sort by
time, plus O(points × samples per point) partitions (bounded by the
2,000 points).
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank

MAX_POINTS = 2000
P = 0.99


def tail_line(req: RequestArrays, period: tuple[int, int] | None, window_s: float) -> dict | None:
    """The rolling P99 line (module docstring); None when no point can hold N samples."""
    if period is None or window_s <= 0:
        return None
    need = min_samples_for_claim(P, 0)
    mask = req.in_latency
    if int(mask.sum()) < need:
        return None
    order = np.argsort(req.scheduled_ns[mask], kind="stable")
    times = req.scheduled_ns[mask][order]
    latency = req.latency_ms[mask][order]
    origin, end = period
    duration_s = (end - origin) / NS_PER_S
    step_s = max(window_s, duration_s / MAX_POINTS)
    step_ns = max(1, int(round(step_s * NS_PER_S)))
    ends = origin + np.arange(1, int(np.ceil((end - origin) / step_ns)) + 1, dtype=np.int64) * step_ns
    hi = np.searchsorted(times, ends, side="left")
    lo = np.minimum(np.searchsorted(times, ends - step_ns, side="left"), hi - need)
    usable = np.flatnonzero(lo >= 0)
    if len(usable) == 0:
        return None
    values = np.empty(len(usable))
    for j, k in enumerate(usable):
        sample = latency[lo[k]:hi[k]]
        rank = nearest_rank(len(sample), P) - 1
        values[j] = np.partition(sample, rank)[rank]
    span_ns = ends[usable] - times[lo[usable]]
    return {"percentile": "p99", "min_samples": int(need), "step_s": step_ns / NS_PER_S,
            "span_s": {"median": float(np.median(span_ns)) / NS_PER_S, "max": float(span_ns.max()) / NS_PER_S},
            "t_ns": [int(t) for t in ends[usable]], "values_ms": [float(v) for v in values],
            "n": [int(n) for n in (hi[usable] - lo[usable])]}
