"""``gc``: slow requests that overlapped a garbage-collection pause of the target.

From GC pause events (``gc_pause``, the target's own pause records): per request, the pause
time inside its interval [sent, end] is computed exactly from the union of the events (a
cumulative pause-time function, O(log pauses) per request). Evidence: the share of the
spike's slow requests that overlapped a pause vs the share of normal requests that did, the
pause lengths (longest, its generation), and how much of the slow requests' extra latency
their median pause time covers.

confidence = ramp(slow share − normal share, 0.2, 0.6)
           × ramp(median pause overlap / median extra latency, 0.15, 0.5)
           × server-side factor (detector_kit)

Without GC events, from the target's runtime GC metrics (:mod:`~.inputs.runtime_gc`:
``jvm.gc.duration``, ``v8js.gc.duration``, ``dotnet.gc.pause.time``, Go's pause metrics,
``cpython.gc.collections``, by OTLP or a Prometheus scrape), which say how much GC time and
which collections fell in each export interval but not when inside it. The stalls the spans
show (:mod:`~.inputs.span_stalls`) give the when: a stall whose export intervals hold GC time
of at least half the stall, or an old-generation collection, is taken as a GC pause, and the
slow requests' overlap with those stalls is judged as with events:

confidence = ramp(slow share − normal share, 0.2, 0.6)
           × ramp(median stall overlap / median extra latency, 0.15, 0.5)
           × server-side factor
           × runtime backing (share of the spike's stall time backed, × 1 for GC time,
             × (1 − share of the run's intervals with an old-generation collection) for a collection)

With no stall to time it, the spike's export intervals that hold GC (GC time ≥ 0.15 × the
median extra latency, or an old-generation collection), each with the backlog it left (until the
first request sent after it that is not slow), stand in for the pauses:

confidence = ramp(slow share − normal share of requests running in those intervals, 0.2, 0.6)
           × server-side factor
           × ramp(GC ms in them / median extra latency, 0.15, 0.5)
             × (1 − share of the run's intervals with at least that much GC time)     [GC time]
           or × (1 − share of the run's intervals with an old-generation collection)  [counts only]
              × ramp(pause bound / median extra latency, 0.15, 0.5)

where the pause bound is the length of those intervals and the ones before them (a collection
counted in one may have begun in the previous): counts do not say how long a pause lasted, only
that it fits there, and a pause of P ms delays a request by at most P, its backlog included. On the
real vLLM overloaded (16× its capacity, requests waiting 10 s), two old-generation collections of
its API server in one 0.3-s interval had been ranked above the queue: the slow requests, running
for seconds, overlapped everything in the spike.

The evidence quotes the metric, where it was measured (OTLP or Prometheus) and its figures;
its ``checked_with`` says which input was read (the unexplained card names it).
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.kit import latency_split, pause_overlap, percent, ramp, server_side_factor
from tailscope.analyzers.causes.protocol import CHECKED_WITH, CauseDetector, Finding, SpikeContext
from tailscope.analyzers.inputs.runtime_gc import SERIES_PREFIXES, backing_words, metrics_in, stall_backing
from tailscope.analyzers.inputs.span_stalls import union_pauses

GC_EVENTS = "events.gc_pause"


class GcDetector(CauseDetector):
    kind = "gc"
    answers = ("gc_pressure",)
    reads = ("derived.gc_pause_ms_per_s",)
    aliases = ("gc_pause", "garbage_collection", "gc_pauses")
    # the target's GC pauses, or its runtime GC metrics: a run with neither has not checked GC
    needs = ("|".join((GC_EVENTS, *(prefix + "*" for prefix in SERIES_PREFIXES))),)

    def checked_with(self, available: frozenset[str]) -> str:
        """What this run lets the detector read, in words: its GC pause events, else its runtime GC metrics."""
        if GC_EVENTS in available:
            return "its GC pause events"
        return "its runtime GC metrics: " + ", ".join(metrics_in(available))

    def score(self, ctx: SpikeContext) -> Finding | None:
        if GC_EVENTS in ctx.available:
            return self._from_events(ctx)
        return self._from_runtime_metrics(ctx)

    def _from_events(self, ctx: SpikeContext) -> Finding | None:
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
            CHECKED_WITH: self.checked_with(ctx.available),
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

    def _from_runtime_metrics(self, ctx: SpikeContext) -> Finding | None:
        inputs = ctx.inputs
        runtime = inputs.runtime_gc
        slow = ctx.slow_request_index
        if len(runtime) == 0 or len(slow) == 0:
            return None
        checked_with = self.checked_with(ctx.available)
        split = latency_split(ctx)
        begin, end = inputs.request_interval(slow)
        found = inputs.span_stalls
        inside = found.inside(int(begin.min()), int(end.max())) if found.checked else []
        backed = [(stall, stall_backing(runtime, stall)) for stall in inside]
        backed = [(stall, seen) for stall, seen in backed if seen["backs"]]
        evidence = {CHECKED_WITH: checked_with, "slow_requests": int(len(slow)),
                    "latency_split": split.as_dict(), "stalls_in_spike": len(inside)}
        if backed:
            pauses = union_pauses([{"start_ns": s["start_ns"], "end_ns": s["drained_ns"]} for s, _ in backed])
            overlap = pause_overlap(ctx, pauses)
            stall_ms = sum(s["duration_ms"] for s in inside)
            backing = sum(s["duration_ms"] * seen["specificity"] for s, seen in backed) / stall_ms if stall_ms else 0.0
            factors = {**overlap.factors("pause_explains_latency"), "server_side": server_side_factor(split),
                       "runtime_backing": round(backing, 4)}
            longest, seen = max(backed, key=lambda pair: pair[0]["duration_ms"])
            summary = (f"{len(backed)} of {len(inside)} stall{'s' if len(inside) != 1 else ''} of the target in the "
                       f"spike (longest {longest['duration_ms']:.0f} ms, from its spans) fell in export intervals "
                       f"with GC: {backing_words(seen)}; {percent(overlap.share_slow)} of {len(slow):,} requests "
                       f"above P99 overlapped such a stall or its backlog (vs {percent(overlap.share_normal)} of "
                       f"normal requests); median stall time inside a slow request {overlap.median_overlap_ms:.1f} "
                       f"ms of {overlap.extra_ms:.1f} ms extra latency")
            evidence.update({"summary": summary, "gc_stalls": len(backed), "longest_gc_stall_ms": longest["duration_ms"],
                             "runtime_metrics": seen, "slow_overlapping_share": overlap.share_slow,
                             "normal_overlapping_share": overlap.share_normal,
                             "median_overlap_ms": overlap.median_overlap_ms,
                             "median_extra_latency_ms": overlap.extra_ms, "factors": factors})
            return Finding(self.name, round(float(np.prod(list(factors.values()))), 4), evidence)
        # no stall times it: the export intervals of the spike that hold GC stand in for the pauses
        seen = runtime.during(ctx.start_ns, ctx.end_ns)
        normal = inputs.normal_sample(ctx.normal_request_index)
        latency = inputs.req.latency_ms
        typical = float(np.median(latency[normal])) if len(normal) else float(ctx.threshold_ms or 0.0)
        extra = float(np.median(latency[slow] - typical))
        hit = runtime.overlapping(ctx.start_ns, ctx.end_ns)
        timed = hit & np.isfinite(runtime.gc_ms) & (runtime.gc_ms >= 0.15 * max(extra, 0.0))
        major = hit & np.isfinite(runtime.major) & (runtime.major > 0)
        gc_intervals = timed | major
        if not gc_intervals.any():
            summary = f"{backing_words(seen)} around the spike: no GC there to explain it"
            return Finding(self.name, 0.0, {**evidence, "summary": summary, "runtime_metrics": seen,
                                            "factors": {"gc_in_spike": 0.0}})
        ends = _backlog_drained(ctx, runtime.t1_ns[gc_intervals])
        pauses = union_pauses([{"start_ns": int(a), "end_ns": int(b)} for a, b in
                               zip(runtime.t0_ns[gc_intervals], ends)])
        overlap = pause_overlap(ctx, pauses)
        factors = {"overlap_lift": overlap.factors("unused")["overlap_lift"],
                   "server_side": server_side_factor(split)}
        if timed.any():
            factors["gc_time_explains_latency"] = ramp(seen["gc_ms"] / extra if extra > 0 else 0.0, 0.15, 0.5)
            factors["gc_time_rare"] = round(1.0 - float(seen["gc_ms_exceeded_share"] or 0.0), 4)
            rarity = (f"as much GC time in {percent(seen['gc_ms_exceeded_share'])} of the run's export "
                      "intervals")
        else:
            factors["old_generation_rare"] = round(1.0 - float(seen["major_share"] or 0.0), 4)
            bound_ms = _pause_bound_ms(runtime.t0_ns[major], runtime.t1_ns[major])
            factors["pause_could_explain_latency"] = ramp(bound_ms / extra if extra > 0 else 0.0, 0.15, 0.5)
            rarity = (f"such a collection in {percent(seen['major_share'])} of the run's export intervals; "
                      f"a pause there lasted at most {bound_ms:,.0f} ms")
            evidence["pause_bound_ms"] = bound_ms
        summary = (f"{backing_words(seen)} around the spike ({rarity}); {percent(overlap.share_slow)} of "
                   f"{len(slow):,} requests above P99 ran during those intervals (vs "
                   f"{percent(overlap.share_normal)} of normal requests), {extra:.1f} ms median extra latency; "
                   "no stall in the spans times the pause inside them")
        evidence.update({"summary": summary, "runtime_metrics": seen, "median_extra_latency_ms": extra,
                         "slow_overlapping_share": overlap.share_slow,
                         "normal_overlapping_share": overlap.share_normal, "factors": factors})
        return Finding(self.name, round(float(np.prod(list(factors.values()))), 4), evidence)


def _pause_bound_ms(t0_ns: np.ndarray, t1_ns: np.ndarray) -> float:
    """The longest a pause can have lasted, ms, where counts say only that collections ended in the
    export intervals [t0, t1): each interval and the one before it (a collection counted in one may
    have begun in the previous), their union. A pause of P ms delays any request by at most P, its
    backlog included (the work it held back is P ms of service), so a pause bound far under the slow
    requests' extra latency cannot be what made them slow."""
    pauses = union_pauses([{"start_ns": int(2 * a - b), "end_ns": int(b)} for a, b in zip(t0_ns, t1_ns)])
    return float((pauses.end_ns - pauses.start_ns).sum()) / 1e6


def _backlog_drained(ctx: SpikeContext, ends_ns: np.ndarray) -> np.ndarray:
    """Each interval end (epoch ns) moved on to the send of the first request after it that was not
    slow again (its value of the spike's metric — latency, TTFT or TPOT — at most the spike's
    threshold): a pause leaves a backlog the service works off after it, and the requests queued in
    it are the pause's too. At most the spike's end; the spike's end where no request after it was
    calm."""
    req = ctx.inputs.req
    if ctx.threshold_ms is None or len(ends_ns) == 0:
        return ends_ns
    sent = np.where(req.has_sent, req.sent_ns, req.scheduled_ns)
    values = ctx.values_ms
    calm = np.sort(sent[np.isfinite(values) & (values <= ctx.threshold_ms)])
    after = np.searchsorted(calm, ends_ns, side="left")
    drained = np.full(len(ends_ns), ctx.end_ns, dtype=np.int64)
    found = after < len(calm)
    drained[found] = calm[after[found]]
    return np.clip(drained, ends_ns, max(int(ctx.end_ns), int(ends_ns.max())))
