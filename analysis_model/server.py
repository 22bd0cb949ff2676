"""What the server did beside our load: ``server_load`` and ``other_traffic``.

``properties.server_load`` and ``properties.other_traffic`` of analyzers/analysis.schema.json;
built by analyzers/stages/server_metrics.py (``server_load_section``) and
analyzers/inputs/other_traffic.py; drawn by reports/server_view.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ServerLoadRole:
    """One server metric role on the grid: the metric and its series, gauge or counter, its unit,
    how label sets combine (``sum`` or ``max``), and one value per bin (gauges averaged, counters
    as rates per second; None where no reading covers the bin)."""

    metric: str
    series: list[str]
    kind: Literal["gauge", "counter"]
    unit: str
    combine: Literal["sum", "max"]
    values: list[float | None]


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """The stage preset's server roles on one grid over the load period: bins ``step_s`` wide
    (s, > 0), ``t_ns`` the bins' middles (epoch ns), and each role's values on them."""

    preset: str
    step_s: float
    t_ns: list[int]
    roles: dict[str, ServerLoadRole]


@dataclass(frozen=True, slots=True)
class OtherTrafficWindow:
    """One window of the other traffic: its start (epoch ns) and counts in it (not rates; tokens
    None when the spans carry none)."""

    start_ns: int
    requests: int
    prompt_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True, slots=True)
class OtherTraffic:
    """Requests the server answered that tailscope did not send (server spans of traces joining
    none of the run's requests): totals (tokens None when the spans carry none), the token
    attributes read (None: none), the window width (s, > 0) and per window of the load period
    the counts (empty without other traffic)."""

    requests: int
    prompt_tokens: int | None
    output_tokens: int | None
    token_attributes: dict | None
    window_s: float
    windows: list[OtherTrafficWindow]
