"""What the cause detectors share: confidence ramps, signal evidence, the latency split.

Confidence in every detector is a product of factors in [0, 1], each a
*ramp*: 0 below a lower bound, 1 above an upper bound, linear between. A
factor states one piece of evidence ("the signal is far above its baseline":
robust z from 2 to 6; "the change is material": an absolute excess in the
signal's units; "the spike is on the server side": the server's share of
the latency growth not spent in late sends). Multiplying them makes a finding strong only when every
piece holds, and each factor is reported in the evidence so a reader can see
which one held a finding back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.causes.protocol import SpikeContext
from tailscope.analyzers.inputs.signal_index import Contrast

#: Robust z at which a signal's change starts / fully counts.
Z_LOW, Z_HIGH = 2.0, 6.0


def ramp(x: float | None, low: float, high: float) -> float:
    """0 at or below ``low``, 1 at or above ``high``, linear between; 0 for None/NaN."""
    if x is None or not np.isfinite(x):
        return 0.0
    if high <= low:
        return 1.0 if x >= high else 0.0
    return float(min(1.0, max(0.0, (x - low) / (high - low))))


@dataclass(frozen=True)
class SignalEvidence:
    """One series' contrast and the confidence it lends: ramp(z) × ramp(excess / material)."""

    name: str
    contrast: Contrast
    material: float
    confidence: float

    def as_dict(self) -> dict:
        return {"series": self.name, **self.contrast.as_dict(), "material_excess": self.material,
                "confidence": round(self.confidence, 4)}


def signal_evidence(ctx: SpikeContext, name: str, material: float, floor: float = 0.0,
                    values: np.ndarray | None = None) -> SignalEvidence | None:
    """Evidence from one series (or precomputed per-bin ``values``) for the spike; None without data.

    ``material`` is the excess over the baseline (series units, per s for counters) that counts fully.
    """
    inputs = ctx.inputs
    found = (inputs.contrast_values(values, ctx.start_ns, ctx.end_ns, floor) if values is not None
             else inputs.contrast(name, ctx.start_ns, ctx.end_ns, floor))
    if found is None:
        return None
    confidence = ramp(found.z, Z_LOW, Z_HIGH) * ramp(found.excess, 0.25 * material, material)
    return SignalEvidence(name, found, material, confidence)


def strongest(evidence: list[SignalEvidence | None], weights: dict[str, float] | None = None) -> tuple[float, list[dict]]:
    """(combined confidence, evidence dicts): the best weighted signal, firmed up by the second best.

    combined = best × (0.75 + 0.25 × second best): one strong signal can fire on its own,
    a corroborating one adds the last quarter.
    """
    present = [e for e in evidence if e is not None]
    if not present:
        return 0.0, []
    weights = weights or {}
    scored = sorted((e.confidence * weights.get(e.name, 1.0) for e in present), reverse=True)
    best = scored[0]
    second = scored[1] if len(scored) > 1 else 0.0
    return best * (0.75 + 0.25 * second), [e.as_dict() for e in present]


@dataclass(frozen=True)
class LatencySplit:
    """Mean growth (ms) of the slow requests over normal ones, split by where the time went."""

    latency_ms: float
    server_ms: float | None  # None without joined spans
    client_network_ms: float | None
    lateness_ms: float

    @property
    def server_share(self) -> float | None:
        """Share of the latency growth spent inside the server's spans (None without spans)."""
        if self.server_ms is None or self.latency_ms <= 0:
            return None
        return float(np.clip(self.server_ms / self.latency_ms, 0.0, 1.0))

    @property
    def lateness_share(self) -> float:
        """Share of the latency growth spent before the request left the generator."""
        if self.latency_ms <= 0:
            return 0.0
        return float(np.clip(self.lateness_ms / self.latency_ms, 0.0, 1.0))

    def as_dict(self) -> dict:
        def r(x):
            return None if x is None else round(float(x), 3)
        return {"latency_growth_ms": r(self.latency_ms), "server_growth_ms": r(self.server_ms),
                "client_network_growth_ms": r(self.client_network_ms), "lateness_growth_ms": r(self.lateness_ms),
                "server_share": r(self.server_share)}


def latency_split(ctx: SpikeContext) -> LatencySplit:
    """Where the slow requests' extra latency went: server, client/network, send lateness."""
    req = ctx.inputs.req
    slow, normal = ctx.slow_request_index, ctx.inputs.normal_sample(ctx.normal_request_index)

    def growth(values):
        a, b = values[slow], values[normal]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        return float(a.mean() - b.mean()) if len(a) and len(b) else 0.0

    stages = ctx.decomposition.get("stages") or {}
    server = stages.get("server", {}).get("growth_ms")
    client = stages.get("client_network", {}).get("growth_ms")
    return LatencySplit(growth(req.latency_ms), server, client, growth(np.nan_to_num(req.lateness_ms)))


def server_side_factor(split: LatencySplit) -> float:
    """How much a target-side cause can explain: ramp(1 − lateness share of the growth, 0.2, 0.5).

    Only time *proven* to be the generator's — sends that left late — counts against a
    target-side cause. Client/network time (service time − server span) is ambiguous: a
    target whose event loop is blocked (a GC pause, a throttled process) reads requests and
    writes responses late, outside its own spans, and that shows up there too.
    """
    return ramp(1.0 - split.lateness_share, 0.2, 0.5)


def percent(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"
