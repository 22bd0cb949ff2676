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

Output (``analysis.tail_line``): a :class:`~tailscope.analysis_model.records.TailLine` —
``percentile`` "p99", ``min_samples`` 459, ``step_s``, ``span_s`` (median, max), ``t_ns`` (point
ends), ``values_ms``, ``n`` (samples per point) — or None without enough samples for one point. Cost: one O(n log n) sort by
time, plus O(points × samples per point) partitions (bounded by the
2,000 points).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from tailscope.analysis_model.records import RollingLine, RollingLines, Span, TailLine
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank

MAX_POINTS = 2000
Line = TypeVar("Line", bound=RollingLine)
P = 0.99


def tail_line(req: RequestArrays, period: tuple[int, int] | None, window_s: float) -> TailLine | None:
    """The rolling P99 line (module docstring); None when no point can hold N samples."""
    return rolling_line(req, period, window_s, P, TailLine)


#: The rolling lines drawn beside the P99 where the display windows are too small for their own
#: P50/P90 (:func:`rolling_lines`).
ROLLING_PERCENTILES = ((0.5, "p50"), (0.9, "p90"))


def rolling_lines(req: RequestArrays, period: tuple[int, int] | None, window_s: float) -> RollingLines:
    """The P50 and P90 lines (each None where no point can be made): the rolling line (as :func:`tail_line`) of
    each, every point over at least the samples that claim it (7 for a P50, 44 for a P90). The
    latency chart draws these where the display windows cannot claim their own (an LLM at 2
    requests/s: a 1-s window holds two requests); at 40 requests/s a P90 point covers 1.1 s."""
    return RollingLines(**{name: rolling_line(req, period, window_s, p) for p, name in ROLLING_PERCENTILES})


def rolling_line(req: RequestArrays, period: tuple[int, int] | None, window_s: float, p: float,
                 kind: type[Line] = RollingLine) -> Line | None:
    """The rolling ``p``-quantile line (module docstring, with N = the samples that claim ``p``), as a
    ``kind`` (:class:`TailLine` for the P99); None when no point can hold N samples."""
    if period is None or window_s <= 0:
        return None
    need = min_samples_for_claim(p, 0)
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
        rank = nearest_rank(len(sample), p) - 1
        values[j] = np.partition(sample, rank)[rank]
    span_ns = ends[usable] - times[lo[usable]]
    return kind(percentile=f"p{p * 100:g}", min_samples=int(need), step_s=step_ns / NS_PER_S,
                span_s=Span(median=float(np.median(span_ns)) / NS_PER_S, max=float(span_ns.max()) / NS_PER_S),
                t_ns=[int(t) for t in ends[usable]], values_ms=[float(v) for v in values],
                n=[int(n) for n in (hi[usable] - lo[usable])])
