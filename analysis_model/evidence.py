"""The parts of a cause's ``evidence`` that have one shape: those the shared detector kit writes.

A cause's ``evidence`` (``spikes[].causes[].evidence``, :class:`~.spikes.CauseFinding`) is an open
dict: each detector, a plug-in's included, writes its own keys (docs/analyzers/causes.md). A few of
its keys are written by analyzers/causes/kit.py for every detector that uses it, in one shape:

- ``signals[]`` and ``generator_runqueue_wait``: a :class:`SignalContrast` each;
- ``latency_split``: a :class:`LatencySplit`;
- ``factors``: ``{factor name: value in [0, 1]}``, the ramps whose product is the confidence;
- ``places``: ``{evidence key: where its figure was measured}``, for figures measured outside the
  spike's own window ("in the 2 s after the spike");
- ``weak_findings`` (of ``unexplained``): findings below the threshold, each a
  :class:`~.spikes.CauseFinding`.

The kit builds these types and encodes them; the report reads them back through the tolerant
readers of reports/upgrade.py (an entry a plug-in wrote in another shape is left out, not fatal).
A field with a default is one an analysis written by an older tailscope may lack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set

#: Where a contrast's level was measured when it lies inside the spike's own window.
IN_SPIKE = "in the spike"


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalContrast:
    """One signal series' level in a spike against its baseline bins and the confidence it lends
    (``$defs/signal_contrast``): values in the series' unit, a counter as its rate per second.

    ``spike``: the level the confidence was judged on, taken over the spike widened by its margin,
    measured ``place`` ("in the spike", "in the 2 s after the spike"); ``inside``: the same
    statistic over the spike's own seconds (None when the series has no reading there: the figure a
    sentence quotes first); ``baseline`` the median of the baseline bins, ``spread`` their robust
    spread, ``z`` = (spike − baseline) / spread, ``excess`` = spike − baseline (each None when not
    finite); ``material_excess``: the excess at which the signal counts fully; ``confidence`` in
    [0, 1]: ramp(z) × ramp(excess / material). Where the detector weighs the target's own signals
    against host-wide ones, ``belongs_to`` says whose it is and a host-wide one's ``counted`` is the
    confidence it was allowed (analyzers/causes/kit.owned_strongest); both absent otherwise.

    ``unit`` and ``counter`` are never written by the kit (the report then shows the series by its
    name's own display, a counter by default); a plug-in's entry may state them.

    An analysis before the spike's own level was kept (``inside``, ``place``) reads as one measured
    in the spike."""

    series: str
    unit: str | None = written_when_set()
    counter: bool | None = written_when_set()
    spike: float | None
    baseline: float | None
    spread: float | None
    z: float | None
    excess: float | None
    inside: float | None = None
    place: str = IN_SPIKE
    material_excess: float | None
    confidence: float
    belongs_to: Literal["target", "host"] | None = written_when_set()
    counted: float | None = written_when_set()


@dataclass(frozen=True, slots=True)
class LatencySplit:
    """``$defs/latency_split``: the mean growth (ms) of a spike's slow requests over the normal
    ones, split by where the time went: ``latency_growth_ms`` in all, ``server_growth_ms`` inside
    the server's spans and ``outside_server_growth_ms`` outside them (both None without joined
    spans), ``lateness_growth_ms`` before the request left the generator; ``server_share`` the
    server's share of the growth in [0, 1] (None without spans or without growth). Rounded to 3
    decimals."""

    latency_growth_ms: float
    server_growth_ms: float | None
    outside_server_growth_ms: float | None
    lateness_growth_ms: float
    server_share: float | None
