"""Sections read from the request records alone: ``windows``, ``slow_requests``, ``tail_line``,
``rolling_lines`` and ``distribution``.

Their ``properties`` entries in analyzers/analysis.schema.json; built by analyzers/stats/windows.py
and stats/llm.py (``windows``, assembled in analyzers/analysis.py ``window_records``),
stats/slow_points.py, stats/tail_line.py and stats/distribution.py (or, for a run whose records a
retention policy thinned, analyzers/inputs/retained.py); drawn by the report's timeline and
latency distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set, written_with

#: The window percentiles that can lack the samples to claim them.
WindowPercentile = Literal["p50", "p90", "p99", "p999"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """One display window ``[start_ns, end_ns)`` (epoch ns) of the requests scheduled in it:
    ``count`` requests, ``errors``, ``n`` successes (the latency sample), nearest-rank latency
    percentiles and maximum (ms; None without successes), whether the P99 is claimed (early
    stopping), the percentiles ``too_few_samples`` claim, and ``slow_share`` (0–1) of requests above
    the run's P99. An analysis before ``n``, P90, P99.9, ``too_few_samples`` and ``max_ms`` reads
    them as None / none.

    In a run with OpenAI-API requests the LLM columns follow (absent otherwise): ``llm_requests``
    scheduled in the window, TTFT and TPOT P50/P99 (ms; None without samples), output tokens that
    arrived in the window and their rate (per s)."""

    start_ns: int
    end_ns: int
    count: int
    errors: int
    n: int | None = written_when_set()
    p50_ms: float | None
    p90_ms: float | None = None
    p99_ms: float | None
    p999_ms: float | None = None
    p99_claimed: bool
    too_few_samples: tuple[WindowPercentile, ...] = ()
    max_ms: float | None = None
    slow_share: float | None
    llm_requests: int | None = written_when_set()
    ttft_p50_ms: float | None = written_with("llm_requests")
    ttft_p99_ms: float | None = written_with("llm_requests")
    tpot_p50_ms: float | None = written_with("llm_requests")
    tpot_p99_ms: float | None = written_with("llm_requests")
    output_tokens: int | None = written_when_set()
    output_tokens_per_s: float | None = written_with("output_tokens")


@dataclass(frozen=True, slots=True)
class SlowRequests:
    """The slow requests the latency chart shows as points: successes above ``threshold_ms`` (the
    run's P99, ms; None without one), ``above_threshold`` of them in all and ``shown`` kept (the
    slowest per time bucket, ≤ 3,000), each by its scheduled time (epoch ns, in time order),
    latency (ms), class and trace id (None where untraced) — four columns of one length."""

    threshold_ms: float | None
    above_threshold: int
    shown: int
    t_ns: list[int]
    latency_ms: list[float]
    cls: list[str | None]
    trace_id: list[str | None]


@dataclass(frozen=True, slots=True)
class Span:
    """The time (s) the points of a rolling line reach back: median and longest."""

    median: float
    max: float


@dataclass(frozen=True, slots=True)
class RollingLine:
    """A rolling percentile line (analyzers/stats/tail_line.py): each point the ``percentile``
    (``"p50"``, ``"p90"``; ``"p99"`` for the :class:`TailLine`) of
    the requests scheduled in ``[t − span, t)``, at least ``min_samples`` of them (enough to claim
    it), points ``step_s`` apart; ``t_ns`` the points' ends (epoch ns), ``values_ms`` their values
    (ms), ``n`` their sample sizes (≤ 2,000 points)."""

    percentile: str
    min_samples: int
    step_s: float
    span_s: Span
    t_ns: list[int]
    values_ms: list[float]
    n: list[int]


@dataclass(frozen=True, slots=True)
class TailLine(RollingLine):
    """The rolling P99 of the latency chart (:class:`RollingLine` of ``percentile`` "p99")."""

    percentile: Literal["p99"]


@dataclass(frozen=True, slots=True)
class RollingLines:
    """The rolling P50 and P90 the latency chart draws where its windows cannot claim their own
    (None where too few requests make a point)."""

    p50: RollingLine | None
    p90: RollingLine | None


@dataclass(frozen=True, slots=True)
class ClassCounts:
    """One class's successes: ``n`` of them, ``counts`` per bin of the distribution's edges."""

    n: int
    counts: list[int]


@dataclass(frozen=True, slots=True)
class Distribution:
    """The latency histogram of successful requests: log-spaced ``bin_edges_ms`` (ms, > 0) trimmed
    to the occupied range (empty without successes) and, per class (``"all"`` first), the counts
    per bin (one fewer than the edges)."""

    unit: Literal["ms"]
    bin_edges_ms: list[float]
    classes: dict[str, ClassCounts]
