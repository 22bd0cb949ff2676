"""``cpu_throttling``: the target's cgroup ran out of CFS quota during the spike.

Signals: ``cgroup.cpu.throttled_ns`` (ns throttled per s) and
``cgroup.cpu.nr_throttled`` (throttled periods per s), each contrasted with
the baseline (robust z, detector kit: ``kit.throttling_confidence``). Material
excess: 50 ms of throttled time per second, 2 throttled periods per second (the
default CFS period is 100 ms, so 10 periods elapse per second).

confidence = best signal × (0.75 + 0.25 × second) × server-side factor
"""

from __future__ import annotations

from tailscope.analyzers.causes.kit import latency_split, level_words, server_side_factor, throttling_confidence
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext


class CpuThrottlingDetector(CauseDetector):
    kind = "cpu_throttling"
    answers = ("cpu_throttle",)
    reads = ("cgroup.cpu.throttled", "cgroup.cpu.nr_throttled")
    aliases = ("cgroup_throttling", "cfs_throttling", "throttling")
    needs = ("cgroup.cpu.throttled_ns",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        signal_confidence, evidence = throttling_confidence(ctx)
        if not evidence:
            return None
        split = latency_split(ctx)
        factors = {"throttling": signal_confidence, "server_side": server_side_factor(split)}
        confidence = factors["throttling"] * factors["server_side"]
        throttled = next((e for e in evidence if e["series"] == "cgroup.cpu.throttled_ns"), None)
        periods = next((e for e in evidence if e["series"] == "cgroup.cpu.nr_throttled"), None)
        summary = "CFS throttling of the target's cgroup"
        if throttled and throttled["spike"] is not None:
            summary += (f": throttled {level_words(throttled, lambda v: f'{v / 1e6:.0f} ms/s')} vs "
                        f"{throttled['baseline'] / 1e6:.1f} ms/s at baseline (z {throttled['z']:.1f})")
        if periods and periods["spike"] is not None:
            summary += f", {level_words(periods, lambda v: f'{v:.1f} throttled periods/s')} vs {periods['baseline']:.1f}"
        return Finding(self.name, round(confidence, 4), {
            "summary": summary, "signals": evidence, "latency_split": split.as_dict(), "factors": factors})
