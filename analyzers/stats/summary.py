"""Run summary: counts, rates, latency / service time / lateness percentiles.

Latency and service-time percentiles are over the requests that count in
latency (``RequestArrays.in_latency``: successes, HTTP errors at their response
time, timeouts at their timeout; connection failures and unsent requests are
errors only — see analyzers/inputs/records.py); errors are also counted separately. Rates use the load period: first scheduled
send to the last completion (or last scheduled send), in seconds.
The generator is *limited* when more than 1% of sends left more than 1 ms
after their scheduled time (perf_analyzer's rule).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from tailscope.analysis_model.summary import Goodput, Lateness, RequestSummary, Summary, TopError
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.percentiles import typed_percentile_set
from tailscope.support.units import LATE_THRESHOLD_MS

#: Share of late sends above which the generator, not the target, is the bottleneck.
GENERATOR_LIMITED_SHARE = 0.01
#: Most distinct error messages listed.
TOP_ERRORS = 10


def load_period_ns(req: RequestArrays) -> tuple[int, int] | None:
    """(start, end) epoch ns of the load: first scheduled send to last end; None if empty."""
    if req.n == 0:
        return None
    start = int(req.scheduled_ns.min())
    last_end = int(req.end_ns[req.has_end].max()) if req.has_end.any() else start
    return start, max(last_end, int(req.scheduled_ns.max()))


def _selected(mask: np.ndarray, where: np.ndarray | None) -> np.ndarray:
    return mask if where is None else mask & where


def lateness_summary(req: RequestArrays, where: np.ndarray | None = None) -> Lateness:
    """Lateness (sent − scheduled) p50/p99 in ms, late share (> 1 ms), generator_limited, of
    the requests ``where`` selects (default all)."""
    lateness = req.lateness_ms[_selected(req.has_sent, where)]
    if len(lateness) == 0:
        return Lateness(p50_ms=None, p99_ms=None, late_share=0.0, generator_limited=False)
    late_share = float(np.mean(lateness > LATE_THRESHOLD_MS))
    return Lateness(
        p50_ms=float(np.quantile(lateness, 0.5, method="inverted_cdf")),
        p99_ms=float(np.quantile(lateness, 0.99, method="inverted_cdf")),
        late_share=late_share,
        generator_limited=late_share > GENERATOR_LIMITED_SHARE,
    )


def top_errors(messages: Counter) -> tuple[TopError, ...]:
    """The :data:`TOP_ERRORS` most frequent messages of a {message: count} counter ("" for none)."""
    return tuple(TopError(message=m, count=c) for m, c in messages.most_common(TOP_ERRORS))


def error_breakdown(req: RequestArrays, where: np.ndarray | None = None) -> tuple[dict[str, int], tuple[TopError, ...]]:
    """({kind: count}, the most frequent messages) of the requests ``where`` selects (default all)."""
    failed = _selected(req.is_error, where)
    kinds = Counter(k for k in req.error_kind[failed])
    messages = Counter(m if m is not None else "" for m in req.error[failed])
    return dict(sorted(kinds.items())), top_errors(messages)


def summarize(req: RequestArrays, duration_s: float | None = None, where: np.ndarray | None = None) -> RequestSummary:
    """Summary of the requests ``where`` (a boolean mask) selects, default all of them (counts;
    rates per second of ``duration_s``; percentiles in ms). ``duration_s`` defaults to the load
    period of all requests (s)."""
    if duration_s is None:
        period = load_period_ns(req)
        duration_s = (period[1] - period[0]) / NS_PER_S if period else 0.0
    n = req.n if where is None else int(np.count_nonzero(where))
    errors = int(np.count_nonzero(_selected(req.is_error, where)))
    completed = int(np.count_nonzero(_selected(req.is_ok, where)))
    errors_by_kind, top = error_breakdown(req, where)
    per_second = (lambda count: count / duration_s) if duration_s > 0 else (lambda count: None)
    return RequestSummary(
        requests=n,
        completed=completed,
        errors=errors,
        error_rate=errors / n if n else 0.0,
        errors_by_kind=errors_by_kind,
        top_errors=top,
        duration_s=duration_s,
        offered_rps=per_second(n),
        achieved_rps=per_second(completed),
        latency_ms=typed_percentile_set(req.latency_ms[_selected(req.in_latency, where)]),
        service_time_ms=typed_percentile_set(req.service_ms[_selected(req.in_latency & req.has_sent, where)]),
        lateness_ms=lateness_summary(req, where),
    )


def summary_section(summary: RequestSummary, load_model: str, dropped: int, goodput: Goodput) -> Summary:
    """The run's :class:`~tailscope.analysis_model.summary.Summary`: :func:`summarize`'s (or
    retention's, built from the histograms) with the run's ``load_model`` (``open`` | ``closed``),
    ``dropped`` (requests never sent) and ``goodput`` (:func:`.goodput.goodput_summary`'s, or a
    retained run's from the histograms)."""
    fields = {f.name: getattr(summary, f.name) for f in dataclasses.fields(RequestSummary)}
    return Summary(**fields, load_model=load_model, dropped=dropped, goodput=goodput)


def summarize_classes(req: RequestArrays, duration_s: float) -> dict[str, RequestSummary]:
    """{class name: summary} over the run's load period (shared ``duration_s``)."""
    return {name: summarize(req, duration_s, req.class_mask(name)) for name in req.class_names()}
