"""``gc``: slow requests that overlapped a garbage-collection pause of the target.

Per request, the pause time inside its interval [sent, end] is computed
exactly from the union of ``gc_pause`` events (a cumulative pause-time
function, O(log pauses) per request). Evidence: the share of the spike's slow
requests that overlapped a pause vs the share of normal requests that did,
the pause lengths (longest, its generation), and how much of the slow
requests' extra latency their median pause time covers.

confidence = ramp(slow share − normal share, 0.2, 0.6)
           × ramp(median pause overlap / median extra latency, 0.15, 0.5)
           × server-side factor (detector_kit)
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.kit import latency_split, pause_overlap, percent, server_side_factor
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext


class GcDetector(CauseDetector):
    kind = "gc"
    answers = ("gc_pressure",)
    reads = ("derived.gc_pause_ms_per_s",)
    aliases = ("gc_pause", "garbage_collection", "gc_pauses")
    needs = ("events.gc_pause",)  # a run without the target's GC pauses has not checked GC

    def score(self, ctx: SpikeContext) -> Finding | None:
        inputs = ctx.inputs
        pauses = inputs.gc_pauses
        overlap = pause_overlap(ctx, pauses)
        if overlap is None:
            return None
        slow = ctx.slow_request_index
        share_slow, share_normal = overlap.share_slow, overlap.share_normal
        extra, median_overlap = overlap.extra_ms, overlap.median_overlap_ms
        longest_ms, generation = pauses.longest_overlapping(overlap.begin_ns, overlap.end_ns)
        in_spike = int(np.sum((pauses.start_ns < ctx.end_ns) & (pauses.end_ns > ctx.start_ns)))
        split = latency_split(ctx)
        factors = {**overlap.factors("pause_explains_latency"), "server_side": server_side_factor(split)}
        confidence = float(np.prod(list(factors.values())))
        generation_text = f"gen-{generation} " if generation >= 0 else ""
        summary = (f"{percent(share_slow)} of {len(slow):,} requests above P99 overlapped a GC pause "
                   f"(vs {percent(share_normal)} of normal requests); longest {generation_text}pause "
                   f"{longest_ms:.0f} ms; median pause time inside a slow request {median_overlap:.1f} ms "
                   f"of {extra:.1f} ms extra latency")
        return Finding(self.name, round(confidence, 4), {
            "summary": summary,
            "slow_requests": int(len(slow)),
            "slow_overlapping_share": share_slow,
            "normal_overlapping_share": share_normal,
            "median_overlap_ms": median_overlap,
            "median_extra_latency_ms": extra,
            "longest_pause_ms": longest_ms,
            "longest_pause_generation": generation,
            "pauses_in_spike": in_spike,
            "latency_split": split.as_dict(),
            "factors": factors,
        })
