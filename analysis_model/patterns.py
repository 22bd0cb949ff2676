"""The ``patterns`` section: periodic spikes, latency drift and a memory leak across the run.

``properties.patterns`` of analyzers/analysis.schema.json; built by analyzers/patterns/trends.py
(``analyze_patterns``; the tests and their thresholds: docs/analyzers/patterns.md); its detected
patterns become warnings (``periodic_spikes``, ``latency_drift``, ``memory_leak``) and its drift and
leak verdicts the soak view's when the run has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True)
class SpikeIntervals:
    """Regularly spaced spike starts: their median interval ``period_s`` (s), the intervals'
    coefficient of variation (≤ 0.25) and how many spikes."""

    period_s: float
    interval_cv: float
    spikes: int


@dataclass(frozen=True, slots=True)
class Spectrum:
    """The periodogram's peak of the per-second share of requests above the run's P90: its period
    (s), Fisher's g and its p-value, and the autocorrelation at that lag (in [-1, 1])."""

    period_s: float
    fisher_g: float
    p_value: float
    autocorrelation: float


@dataclass(frozen=True, slots=True)
class Periodic:
    """Whether slow requests recur: ``period_s`` (s; None when not detected) and the view that found
    it (``method``; None when none did), the sentence, and what the spike-interval and spectral
    views found (None: too few spikes or irregular / too short a run)."""

    detected: bool
    period_s: float | None
    method: Literal["recurring_stalls", "spike_intervals", "spectrum"] | None
    summary: str
    spike_intervals: SpikeIntervals | None
    spectrum: Spectrum | None


@dataclass(frozen=True, slots=True)
class Trend:
    """A Theil–Sen fit: slope per s (its 95% interval ``slope_low``–``slope_high``) and intercept in
    the series' unit (ms, bytes), Kendall's tau and the Mann–Kendall p-value, over ``points`` (≥ 8)."""

    slope_per_s: float
    slope_low: float
    slope_high: float
    intercept: float
    kendall_tau: float
    p_value: float
    points: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Drift:
    """The trend of the segments' median latency (``median``) and P99 (``p99``: None unless every
    segment can claim it, or when a bump was left out), over ``segments`` equal segments of
    ``segment_s`` s (0 and None for too little data). ``relative_change``: the median's change over
    the run as a share of its typical value, written when a median trend was fit. ``bump``: a mid-run
    bump's [[start, end]] (s since the load start), left out of the trend; None without one (and in
    an analysis written before bumps were told apart). Keyword-only: the written key order puts
    ``relative_change`` before fields without a default."""

    detected: bool
    verdict: Literal["drift", "trending", "stable", "insufficient data"]
    summary: str
    relative_change: float | None = written_when_set()
    median: Trend | None
    p99: Trend | None
    segments: int
    segment_s: float | None
    bump: list[list[float]] | None = None


@dataclass(frozen=True, slots=True)
class Leak:
    """The trend of the target's RSS (``series``: the signal read; None without one): the fit
    (bytes), the growth over the run (bytes) and the slope per hour (bytes/h; None when the readings
    span under 10 minutes)."""

    detected: bool
    verdict: Literal["leak", "growing", "flat", "insufficient data"]
    series: str | None
    summary: str
    trend: Trend | None
    growth_bytes: float | None
    slope_bytes_per_hour: float | None


@dataclass(frozen=True, slots=True)
class Patterns:
    """The run's patterns: periodic slow requests, latency drift, memory leak."""

    periodic: Periodic
    drift: Drift
    leak: Leak
