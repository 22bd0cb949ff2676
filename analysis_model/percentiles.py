"""Percentiles as the analysis states them: a value in ms with its 95% confidence interval.

``$defs.percentile`` and ``$defs.percentile_set`` of analyzers/analysis.schema.json; built by
analyzers/stats/percentiles.py, drawn by the report's percentile tables.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Percentile:
    """One percentile of a latency-like metric (ms): its nearest-rank value, the distribution-free
    95% confidence interval from order statistics, the sample size ``n``, whether ``n`` is large
    enough to claim it (MLPerf early stopping at 99% confidence: n >= 459 for P99) and, when claimed,
    ``bound_ms``: the early-stopping upper bound (None unless claimed). Values are None without
    samples (analyzers/stats/percentiles.py)."""

    value_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    n: int
    claimed: bool
    bound_ms: float | None


@dataclass(frozen=True, slots=True)
class MaxValue:
    """The largest observation (ms; None without samples) and the sample size."""

    value_ms: float | None
    n: int


@dataclass(frozen=True, slots=True)
class PercentileSet:
    """P50, P90, P95, P99, P99.9 and the maximum of one metric (ms)."""

    p50: Percentile
    p90: Percentile
    p95: Percentile
    p99: Percentile
    p999: Percentile
    max: MaxValue
