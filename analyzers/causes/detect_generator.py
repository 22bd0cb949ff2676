"""``generator``: the load generator, not the target, made these requests slow.

Latency is measured from the scheduled send (DESIGN.md, decision 3), so a
generator that falls behind adds its own delay: sends leave late (lateness =
sent − scheduled) and responses are read late (outside-server time = service
time − server time). Evidence: the share of the slow requests' extra latency
spent in lateness and outside-server time, the share of slow requests sent
more than 1 ms late vs normal requests, and the generator's own GC pauses
(``generator_gc`` events) when recorded: how much more often slow requests
overlapped one than normal requests did, weighed (as in ``gc``) by how much
of their extra latency the pause time covers.

A slow network also grows outside-server time but does not delay sends, so
late sends (or generator GC) must back the finding. And time outside the server's
spans is the generator's only as far as its own lateness reaches: a target that
stops (a stop-the-world pause) reads requests and writes responses late, outside
its spans, too. Of the growth in outside-server time at most the send lateness
plus the median generator-GC pause time inside a slow request counts
(``outside_server_counted_ms``). And a generator starved
of CPU by *other* processes (its event loop waiting on a run queue:
``generator.runqueue_wait_ms``) is a symptom of CPU contention, reported by
``cpu_contention``, not a generator problem:

generator share = (lateness + min(outside-server, lateness + generator-GC overlap)) / growth
confidence = ramp(generator share of growth, 0.3, 0.6)
           × max(ramp(late share − normal late share, 0.05, 0.25),
                 ramp(generator-GC overlap lift, 0.2, 0.6)
                   × ramp(median generator-GC overlap / median extra latency, 0.15, 0.5))
           × (1 − generator run-queue wait confidence)

The generator's own CPU (``generator.cpu_percent``) is reported as evidence.
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.kit import latency_split, level_words, percent, places, ramp, signal_evidence
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext
from tailscope.support.units import LATE_THRESHOLD_MS as LATE_MS


class GeneratorDetector(CauseDetector):
    kind = "generator"
    answers = ("generator",)
    reads = ("derived.lateness_ms",)
    needs = ()
    raises = ("latency", "ttft")  # the metrics it raises (CauseDetector.raises)

    def score(self, ctx: SpikeContext) -> Finding | None:
        inputs = ctx.inputs
        slow = ctx.slow_request_index
        if len(slow) == 0:
            return None
        normal = inputs.normal_sample(ctx.normal_request_index)
        split = latency_split(ctx)
        client = max(split.outside_server_ms or 0.0, 0.0)
        lateness = np.nan_to_num(inputs.req.lateness_ms)
        late_slow = float(np.mean(lateness[slow] > LATE_MS))
        late_normal = float(np.mean(lateness[normal] > LATE_MS)) if len(normal) else 0.0
        pauses = inputs.generator_pauses
        gc_lift, gc_explains, gc_overlap = 0.0, 0.0, 0.0
        if len(pauses):
            overlap = pauses.overlap_ms(*inputs.request_interval(slow))
            hit_slow = float(np.mean(overlap > 0))
            hit_normal = (float(np.mean(pauses.overlap_ms(*inputs.request_interval(normal)) > 0))
                          if len(normal) else 0.0)
            gc_lift = hit_slow - hit_normal
            latency = inputs.req.latency_ms
            extra = float(np.median(latency[slow] - (np.median(latency[normal]) if len(normal) else 0.0)))
            gc_overlap = float(np.median(overlap[overlap > 0])) if (overlap > 0).any() else 0.0
            gc_explains = gc_overlap / extra if extra > 0 else 0.0
        # time outside the server's spans is the generator's only as far as its own lateness (late sends,
        # its GC pauses) says it was behind: a stalled target also reads and answers late, out of its spans
        counted = min(client, max(split.lateness_ms, 0.0) + gc_overlap)
        generator_ms = max(split.lateness_ms, 0.0) + counted
        share = generator_ms / split.latency_ms if split.latency_ms > 0 else 0.0
        starved = signal_evidence(ctx, "generator.runqueue_wait_ms", 100.0, floor=1.0)
        own_cpu = ctx.inputs.contrast("generator.cpu_percent", ctx.start_ns, ctx.end_ns, floor=1.0)
        factors = {"generator_share": ramp(share, 0.3, 0.6),
                   "late_sends": ramp(late_slow - late_normal, 0.05, 0.25),
                   "generator_gc": ramp(gc_lift, 0.2, 0.6) * ramp(gc_explains, 0.15, 0.5),
                   "not_starved_by_others": 1.0 - (starved.confidence if starved is not None else 0.0)}
        confidence = (factors["generator_share"] * max(factors["late_sends"], factors["generator_gc"])
                      * factors["not_starved_by_others"])
        summary = (f"{percent(min(max(share, 0.0), 1.0))} of the slow requests' extra latency was spent in the "
                   f"generator (send lateness +{split.lateness_ms:.1f} ms, and {counted:.1f} ms of the "
                   f"+{client:.1f} ms outside the server's spans, as far as its own lateness reaches); "
                   f"{percent(late_slow)} of them left more than {LATE_MS:g} ms late vs {percent(late_normal)} "
                   "of normal requests"
                   + (f"; generator CPU {level_words(own_cpu, lambda v: f'{v:.0f}% of a core')} (baseline {own_cpu.baseline:.0f}%)"
                      if own_cpu is not None else "")
                   + (f"; its event loop waited {level_words(starved.contrast, lambda v: f'{v:.0f} ms/s')} for a CPU (baseline "
                      f"{starved.contrast.baseline:.0f}): other processes starved it"
                      if starved is not None and starved.confidence >= 0.5 else ""))
        return Finding(self.name, round(float(confidence), 4), {
            "summary": summary, "generator_share_of_growth": share, "late_share_slow": late_slow,
            "late_share_normal": late_normal, "generator_gc_overlap_lift": gc_lift,
            "outside_server_ms": client, "outside_server_counted_ms": counted,
            "generator_cpu_percent": own_cpu.spike if own_cpu is not None else None,
            "generator_runqueue_wait": starved.as_dict() if starved is not None else None,
            "latency_split": split.as_dict(), "factors": factors, "places": places(generator_cpu_percent=own_cpu)})
