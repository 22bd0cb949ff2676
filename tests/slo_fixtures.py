"""SLO sources for the SLO and outcome tests: a run whose every latency percentile is one entry."""

from __future__ import annotations

from tailscope.analysis_model.percentiles import MaxValue, Percentile, PercentileSet
from tailscope.analysis_model.summary import Lateness, RequestSummary, Summary
from tailscope.analyzers.stats.slo import SloSources

PERCENTILES = ("p50", "p90", "p95", "p99", "p999")


def entry(value_ms: float, claimed: bool, n: int, ci_low_ms: float | None = None,
          ci_high_ms: float | None = None) -> Percentile:
    """One percentile entry (ms) of ``n`` samples."""
    return Percentile(value_ms=value_ms, ci_low_ms=ci_low_ms, ci_high_ms=ci_high_ms, n=n, claimed=claimed,
                      bound_ms=value_ms if claimed else None)


def request_summary(latency: Percentile, *, requests: int, error_rate: float = 0.0,
                    achieved_rps: float | None = None, **percentiles: Percentile) -> RequestSummary:
    """A class's summary of ``requests`` whose latency percentiles are all ``latency`` (those named
    in ``percentiles``, e.g. ``p99=...``, excepted)."""
    latency_ms = PercentileSet(**{name: percentiles.get(name, latency) for name in PERCENTILES},
                               max=MaxValue(latency.value_ms, latency.n))
    errors = round(error_rate * requests)
    return RequestSummary(requests=requests, completed=requests - errors, errors=errors, error_rate=error_rate,
                          errors_by_kind={}, top_errors=(), duration_s=60.0, offered_rps=requests / 60.0,
                          achieved_rps=achieved_rps, latency_ms=latency_ms, service_time_ms=latency_ms,
                          lateness_ms=Lateness(p50_ms=0.1, p99_ms=0.5, late_share=0.0, generator_limited=False))


def sources(summary: RequestSummary, classes: dict[str, RequestSummary] | None = None) -> SloSources:
    """The SLO sources of a run with that summary (and classes), nothing streamed, no LLM requests."""
    run = Summary(**{name: getattr(summary, name) for name in RequestSummary.__dataclass_fields__})
    return SloSources(summary=run, classes=classes or {}, streaming=None, llm=None)
