"""``process_stall``: the target's process stopped serving all requests at once.

Found from the spans alone (:mod:`~.inputs.span_stalls`): while requests were in flight,
no span of the target process started, ended or recorded an event for longer than its
own span activity makes plausible at that concurrency — a stop-the-world pause (GC, a
lock every thread waits on, pages swapped back in). A service that sends no GC events
(a plain OpenTelemetry service) shows its GC pauses this way; where the target does send
``gc_pause`` events covering the stalls, or runtime GC metrics that put GC in the stalls'
export intervals (:func:`~.inputs.runtime_gc.stall_backing`), ``gc`` names them and this
finding steps back.

Evidence, as for ``gc``: the share of the spike's slow requests whose interval [sent, end]
overlapped a stall or the backlog it left (until a request waits no longer than normal again:
a busy server takes a while to work off the requests a stall held) vs the share of normal
requests that did, how much of the slow
requests' extra latency their median stall time covers, the longest stall with its
chance p (Bonferroni over every in-flight gap of the run), how many requests were in
flight through it and how many arrived during it.

confidence = ramp(slow share − normal share, 0.2, 0.6)
           × ramp(median stall overlap / median extra latency, 0.15, 0.5)
           × server-side factor (kit)
           × (1 − share of the stall time inside the spike that ``gc_pause`` events cover)
           × (1 − share of it that runtime GC metrics back, each stall weighed by its specificity)
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.kit import latency_split, pause_overlap, percent, server_side_factor
from tailscope.analyzers.causes.protocol import NOT_JUDGED, CauseDetector, Finding, SpikeContext
from tailscope.analyzers.inputs.runtime_gc import stall_backing
from tailscope.analyzers.inputs.span_stalls import chance_words

#: What the cause is, in the words a card uses.
STALL_MEANING = ("the target's process stopped serving all requests at once: a stop-the-world pause "
                 "(GC, a lock, swapping in)")


class ProcessStallDetector(CauseDetector):
    kind = "process_stall"
    answers = ("process_pause",)
    reads = ("derived.stall_ms_per_s",)
    aliases = ("stop_the_world", "stall")
    needs = ("spans",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        inputs = ctx.inputs
        found = inputs.span_stalls
        if not found.checked:  # spans, but too few of them to tell a stall from chance
            return Finding(self.name, 0.0, {"summary": f"not judged: {found.reason}", NOT_JUDGED: found.reason})
        stalls = found.with_backlog  # a request queued behind a stall's backlog was held by it too
        overlap = pause_overlap(ctx, stalls)
        if overlap is None:
            return None
        slow = ctx.slow_request_index
        share_slow, share_normal = overlap.share_slow, overlap.share_normal
        extra, median_overlap = overlap.extra_ms, overlap.median_overlap_ms
        window = (int(overlap.begin_ns.min()), int(overlap.end_ns.max()))
        inside = found.inside(*window)
        if not inside:
            return None
        longest = max(inside, key=lambda s: s["duration_ms"])
        drain = max(s["drain_ms"] for s in inside)
        stall_ms = sum(s["duration_ms"] for s in inside)
        gc = inputs.gc_pauses
        covered_ms = float(sum(gc.overlap_ms(np.array([s["start_ns"]]), np.array([s["end_ns"]]))[0]
                               for s in inside)) if len(gc) else 0.0
        gc_share = min(covered_ms / stall_ms, 1.0) if stall_ms > 0 else 0.0
        runtime = inputs.runtime_gc
        backed_ms = sum(s["duration_ms"] * stall_backing(runtime, s)["specificity"] for s in inside) if len(runtime) else 0.0
        runtime_share = min(backed_ms / stall_ms, 1.0) if stall_ms > 0 else 0.0
        split = latency_split(ctx)
        factors = {**overlap.factors("stall_explains_latency"), "server_side": server_side_factor(split),
                   "not_gc_events": 1.0 - gc_share, "not_gc_runtime_metrics": round(1.0 - runtime_share, 4)}
        confidence = float(np.prod(list(factors.values())))
        summary = (f"{STALL_MEANING}. {len(inside)} stall{'s' if len(inside) != 1 else ''} in the spike "
                   f"(longest {longest['duration_ms']:.0f} ms: no span of {longest['service'] or 'the target'} "
                   f"started, ended or recorded an event while {longest['in_flight']} request"
                   f"{'s were' if longest['in_flight'] != 1 else ' was'} in flight and {longest['arrivals']} "
                   f"arrived and waited it out; by chance {chance_words(longest['p_value'])}"
                   + (f"; the backlog left took up to {drain:.0f} ms more to drain" if drain >= 1 else "")
                   + f"); {percent(share_slow)} of "
                   f"{len(slow):,} requests above P99 overlapped a stall or its backlog (vs {percent(share_normal)} of normal "
                   f"requests); median stall time inside a slow request {median_overlap:.1f} ms of "
                   f"{extra:.1f} ms extra latency")
        return Finding(self.name, round(confidence, 4), {
            "summary": summary,
            "meaning": STALL_MEANING,
            "slow_requests": int(len(slow)),
            "slow_stalled_share": share_slow,
            "normal_stalled_share": share_normal,
            "median_stall_overlap_ms": median_overlap,
            "median_extra_latency_ms": extra,
            "stalls_in_spike": len(inside),
            "longest_stall_ms": longest["duration_ms"],
            "longest_stall_p_value": longest["p_value"],
            "longest_stall_in_flight": longest["in_flight"],
            "longest_stall_arrivals": longest["arrivals"],
            "longest_drain_ms": drain,
            "gc_event_share": gc_share,
            "gc_runtime_metrics_share": runtime_share,
            "latency_split": split.as_dict(),
            "factors": factors,
        })
