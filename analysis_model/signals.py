"""The ``signals`` section: the run's sampled and derived time series, their sources, the sampler.

``properties.signals`` of analyzers/analysis.schema.json; built by analyzers/inputs/derived_series.py
(``signals_section``: the sampled series of signals.parquet, counters as rates, and the derived GC
pause, throttling, queue depth and lateness series); drawn by the report's signal panels
(reports/timeline.py ``signal_panels``, reports/signal_panels.py) and its sources table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalSeries:
    """One chart-ready series: its name (with ``{labels}``), unit (a counter's as a rate, ``x/s``),
    kind, where it came from and what it is (None where the sampler did not say), and its points:
    ``t_ns`` (epoch ns, on the harness clock) and ``values`` (None: no reading), at most 2,000
    (min/max kept per bucket). Keyword-only: the fields are in the order written."""

    name: str
    unit: str
    kind: Literal["counter", "gauge", "event"]
    source: str | None = None
    description: str | None = None
    t_ns: list[int]
    values: list[float | None]


@dataclass(frozen=True, slots=True)
class SignalSource:
    """Whether a sampler source was available on this host, and why not (None when it was)."""

    available: bool
    reason: str | None


@dataclass(frozen=True, slots=True)
class SignalPanel:
    """A panel as analyses before the report chose its own grouping wrote it: its id, title,
    unit and the names of its series."""

    id: str
    title: str
    unit: str
    series: list[str]


@dataclass(frozen=True, slots=True)
class Signals:
    """The series (sorted by name, derived ones after the sampled), each sampler source's
    availability, and ``sampling``: the sampler's own account of its schedule (ticks, missed
    ticks, lateness, its CPU; signals/sampling_loop.py owns its shape, so it is read as that
    object) or None without one. ``panels``: only in analyses written before the grouping moved
    into the report (None otherwise)."""

    series: list[SignalSeries]
    sources: dict[str, SignalSource]
    sampling: dict | None = None
    panels: list[SignalPanel] | None = written_when_set()
