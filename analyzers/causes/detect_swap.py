"""``swap``: the target waited for memory pages coming back from swap or disk.

Signals (rates per second vs baseline, detector kit: ``kit.paging_confidence``). The target's own:
its major faults ``proc.major_faults`` (material 20/s), its cgroup's memory
stall ``cgroup.psi.memory.some_us`` (50 ms/s) and swap it holds
``cgroup.mem.swap_current_bytes`` (16 MiB). Host-wide: swap-ins
``host.vm.pswpin`` (pages; material 100/s ≈ 0.4 MB/s), major faults
``host.vm.pgmajfault`` (material 50/s, weight 0.8) and memory pressure
``psi.memory.some_us`` (material 50 ms/s, weight 0.8).

confidence = best counted signal × (0.75 + 0.25 × second) × server-side factor

where a host-wide signal counts at most 0.45 + 0.55 × the target's own best
when the target's own were recorded (``kit.owned_strongest``): host paging by
another process, with the target's own major faults and memory cgroup flat,
reaches at most 0.45 × (0.75 + 0.25 × 0.45) ≈ 0.39, below the 0.5 of a cause,
so it never outranks a cause of the target's own.
"""

from __future__ import annotations

from tailscope.analyzers.causes.kit import latency_split, level_words, paging_confidence, server_side_factor
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext


class SwapDetector(CauseDetector):
    kind = "swap"
    answers = ("memory_swap",)
    reads = ("proc.major_faults", "host.vm.pswp", "host.vm.pgmajfault", "psi.memory", "cgroup.psi.memory",
             "host.swap", "cgroup.mem.swap")
    aliases = ("swapping", "memory_pressure", "paging", "major_faults")
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        paging = paging_confidence(ctx)
        evidence = paging.evidence
        if not evidence:
            return None
        split = latency_split(ctx)
        factors = {"memory_stall": paging.confidence, "server_side": server_side_factor(split)}
        confidence = factors["memory_stall"] * factors["server_side"]
        named = {e["series"]: e for e in evidence}
        parts = []
        for series, label in (("host.vm.pswpin", "pages swapped in/s"), ("proc.major_faults", "target major faults/s"),
                              ("psi.memory.some_us", "µs/s memory stall")):
            entry = named.get(series)
            if entry and entry["spike"] is not None:
                parts.append(f"{level_words(entry, lambda v, unit=label: f'{v:,.0f} {unit}')} (baseline {entry['baseline']:,.0f})")
        summary = "memory paging: " + ("; ".join(parts) if parts else "no paging signal moved")
        if paging.watched and paging.owned < 0.5 <= max((e["confidence"] for e in evidence), default=0.0):
            summary += " (host-wide only: the target's own major faults and memory cgroup stayed flat, " \
                       "so another process paged)"
        return Finding(self.name, round(confidence, 4), {
            "summary": summary, "signals": evidence, "latency_split": split.as_dict(), "factors": factors})
