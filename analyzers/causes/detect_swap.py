"""``swap``: the target waited for memory pages coming back from swap or disk.

Signals (rates per second vs baseline, detector_kit): the target's major
faults ``proc.major_faults`` (material 20/s), swap-ins ``host.vm.pswpin``
(pages; material 100/s ≈ 0.4 MB/s), host major faults ``host.vm.pgmajfault``
(material 50/s, weight 0.8) and memory pressure ``psi.memory.some_us``
(material 50 ms/s, weight 0.8).

confidence = best weighted signal × (0.75 + 0.25 × second) × server-side factor
"""

from __future__ import annotations

from tailscope.analyzers.causes.protocol import Finding, SpikeContext
from tailscope.analyzers.causes.kit import latency_split, server_side_factor, signal_evidence, strongest

WEIGHTS = {"host.vm.pgmajfault": 0.8, "psi.memory.some_us": 0.8}


def paging_confidence(ctx: SpikeContext) -> tuple[float, list[dict]]:
    """(confidence, evidence) that memory pages were read back from swap or disk during the spike,
    ignoring latency (the io_stall detector discounts its finding by it)."""
    return strongest([
        signal_evidence(ctx, "proc.major_faults", 20.0, floor=1.0),
        signal_evidence(ctx, "host.vm.pswpin", 100.0, floor=5.0),
        signal_evidence(ctx, "host.vm.pgmajfault", 50.0, floor=2.0),
        signal_evidence(ctx, "psi.memory.some_us", 50e3, floor=1e3),
    ], WEIGHTS)


class SwapDetector:
    name = "swap"
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        signal_confidence, evidence = paging_confidence(ctx)
        if not evidence:
            return None
        split = latency_split(ctx)
        factors = {"memory_stall": signal_confidence, "server_side": server_side_factor(split)}
        confidence = factors["memory_stall"] * factors["server_side"]
        named = {e["series"]: e for e in evidence}
        parts = []
        for series, label in (("host.vm.pswpin", "pages swapped in/s"), ("proc.major_faults", "target major faults/s"),
                              ("psi.memory.some_us", "µs/s memory stall")):
            entry = named.get(series)
            if entry and entry["spike"] is not None:
                parts.append(f"{entry['spike']:,.0f} {label} (baseline {entry['baseline']:,.0f})")
        summary = "memory paging: " + ("; ".join(parts) if parts else "no paging signal moved")
        return Finding(self.name, round(confidence, 4), {
            "summary": summary, "signals": evidence, "latency_split": split.as_dict(), "factors": factors})
