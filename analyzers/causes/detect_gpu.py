"""``gpu_throttling``: the GPU slowed its clocks (thermal, power or hardware slowdown).

Signals of each GPU ``i`` (docs/signals.md): the clocks-event reasons that
mean "slowed down" — ``gpu<i>.clocks_event.{hw_slowdown, sw_thermal_slowdown,
hw_thermal_slowdown, hw_power_brake_slowdown, sw_power_cap}`` (1 while set; a
bin's value is the share of the time set; material 0.5) — and the SM clock
``gpu<i>.sm_clock_mhz`` (a drop of 10% of its baseline is material).

confidence = best signal × (0.75 + 0.25 × second) × server-side factor;
None when the run has no GPU series.
"""

from __future__ import annotations

import re

from tailscope.analyzers.causes.kit import latency_split, level_words, server_side_factor, signal_evidence, strongest
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext

SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown", "sw_power_cap")
_GPU = re.compile(r"^(gpu\d+)\.")


class GpuThrottlingDetector(CauseDetector):
    kind = "gpu_throttling"
    answers = ("gpu_throttle",)
    reads = ("gpu",)
    needs = ("gpu*",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        signals = ctx.inputs.signals
        gpus = sorted({m.group(1) for m in map(_GPU.match, signals.names()) if m})
        if not gpus:
            return None
        evidence = []
        for gpu in gpus:
            for reason in SLOWDOWN_REASONS:
                evidence.append(signal_evidence(ctx, f"{gpu}.clocks_event.{reason}", 0.5, floor=0.02))
            clock = f"{gpu}.sm_clock_mhz"
            if signals.has(clock):
                drop = -ctx.inputs.binned(clock)
                baseline = ctx.inputs.contrast_values(drop, ctx.start_ns, ctx.end_ns)
                material = 0.1 * abs(baseline.baseline) if baseline is not None else 100.0
                evidence.append(signal_evidence(ctx, f"{clock} (drop)", max(material, 1.0), floor=5.0, values=drop))
        signal_confidence, found = strongest(evidence)
        if not found:
            return None
        split = latency_split(ctx)
        factors = {"gpu_slowdown": signal_confidence, "server_side": server_side_factor(split)}
        confidence = factors["gpu_slowdown"] * factors["server_side"]
        parts = []
        for entry in found:
            if entry["confidence"] >= 0.25:
                if entry["series"].endswith("(drop)"):
                    parts.append(f"{entry['series'][:-7]} fell to {level_words(entry, lambda v: f'{-v:.0f} MHz')} "
                                 f"from {-entry['baseline']:.0f}")
                else:
                    parts.append(f"{entry['series']} set {level_words(entry, lambda v: f'{100 * v:.0f}% of the time')} "
                                 f"(baseline {100 * entry['baseline']:.0f}%)")
        summary = "GPU clocks slowed: " + ("; ".join(parts) if parts else "no GPU signal moved")
        return Finding(self.name, round(confidence, 4), {
            "summary": summary, "signals": found, "latency_split": split.as_dict(), "factors": factors})
