"""The run's summary: counts, rates, latency / service-time / lateness percentiles, goodput.

``$defs.request_summary`` of analyzers/analysis.schema.json: each entry of ``classes`` (one request
class); ``$defs.summary``: the analysis's ``summary`` (all requests), the same with the run's
``load_model``, ``dropped`` and ``goodput``. Built by analyzers/stats/summary.py (``summarize``, and
from the histograms of a retained run by analyzers/inputs/retained.py; ``summary_section`` adds the
run's fields where the analysis is assembled, analyzers/analysis.py); drawn by the report's headline,
rates, errors, lateness and percentile table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set
from tailscope.analysis_model.percentiles import PercentileSet

#: What the goodput's ``definition`` says when an analysis does not carry one.
GOODPUT_DEFINITION = "share of requests meeting every SLO"


@dataclass(frozen=True, slots=True)
class TopError:
    """One error message (``""`` when the error had none) and how many requests failed with it."""

    message: str
    count: int


@dataclass(frozen=True, slots=True)
class Lateness:
    """Lateness (sent − scheduled) of the sent requests: P50 and P99 in ms (None when nothing was
    sent), ``late_share`` the share (0–1) of sends more than 1 ms late, and ``generator_limited``
    true when that share is above 1% (the generator, not the target, set the pace)."""

    p50_ms: float | None
    p99_ms: float | None
    late_share: float
    generator_limited: bool


@dataclass(frozen=True, slots=True)
class GoodputShare:
    """Good requests (no error, every per-request SLO that applies met) of a set of ``total``:
    ``share`` = good / total (0–1; None when ``total`` is 0)."""

    share: float | None
    good: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodput:
    """Goodput over the run: ``share`` (0–1; None without requests), ``good`` of ``total``
    requests, ``rps`` good requests per second of load (None for an empty load period), the
    per-request SLO texts it applies (``criteria``), its ``definition`` in words and the same per
    request class (``by_class``)."""

    share: float | None
    good: int
    total: int
    rps: float | None = None
    criteria: tuple[str, ...]
    definition: str = GOODPUT_DEFINITION
    by_class: dict[str, GoodputShare]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSummary:
    """The summary of a set of requests (one class's; the run's is a :class:`Summary`). Latency and
    service time are over the requests that count in latency (successes, HTTP errors, timeouts);
    ``errors`` counts every failed request and ``error_rate`` is errors / requests (0–1; 0 without
    requests). ``duration_s`` is the load period (first scheduled send to the last completion, s);
    ``offered_rps``/``achieved_rps`` are requests and completions per second of it (None when it is
    0). ``errors_by_kind`` counts failures by ``error_kind``; ``top_errors`` the ≤ 10 most frequent
    messages."""

    requests: int
    completed: int
    errors: int
    error_rate: float
    errors_by_kind: dict[str, int]
    top_errors: tuple[TopError, ...]
    duration_s: float
    offered_rps: float | None
    achieved_rps: float | None
    latency_ms: PercentileSet
    service_time_ms: PercentileSet
    lateness_ms: Lateness


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary(RequestSummary):
    """The run's summary: a :class:`RequestSummary` of every request with the run's ``load_model``,
    ``dropped`` (requests never sent) and ``goodput`` (an older analysis lacks them: open loop,
    0 dropped, no goodput; a class's summary read as a ``Summary`` reads the same)."""

    load_model: Literal["open", "closed"] = "open"
    dropped: int = 0
    goodput: Goodput | None = written_when_set()
