"""``cpu_contention``: other work took the CPUs the target needed (no quota throttling).

*Waiting* signals (rates per second, contrasted with the baseline,
detector_kit): ``proc.runqueue_wait_ns`` (the target's threads runnable but
not running; material 100 ms/s), ``generator.runqueue_wait_ms`` (the load
generator's event loop waiting for a CPU, ms per second; material 100),
``psi.cpu.some_us`` (material 100 ms/s), ``proc.ctxt.nonvoluntary``
(preemptions; material 200/s). Contention slows whatever it starves — the
target or the generator — so there is no server-side factor here.

The target's own overload also makes it wait, so waiting must come with
*others* taking the CPU: either other processes' CPU rose (host busy CPU −
the target's − the generator's, in cores; material 0.3) while the target's
own load did not surge, or — on a host that was already saturated, where a
newcomer only displaces — the target waited more without doing more work
(its CPU use did not rise):

confidence = waiting × max(others × not self-loaded, 0.7 × (1 − ramp(target CPU ratio, 1.1, 1.5)))
           × (1 − throttling confidence) × (1 − blocked-on-I/O confidence)
self-loaded = ramp(target CPU ratio, 1.5, 3) × ramp(offered-load ratio, 1.5, 3)

A target that received several times its load and used several times its
CPU waits in the run queue by itself; the clients sending that load (a
retry storm, a burst from a process on the same host) are the "others"
then, and the queue, not a neighbour, is the cause (queue_saturation).

waiting = best waiting signal × (0.75 + 0.25 × second best). Throttled
threads wait too, hence the throttling factor. A target blocked on its own
storage I/O makes the kernel write its data back on kworker threads, which
count as "other processes" and take the target's CPU (measured in the lab:
about one core while it wrote 330 MB/s), hence the last factor (the
io_stall detector's blocked evidence).
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.protocol import Finding, SpikeContext
from tailscope.analyzers.causes.detect_cpu_throttling import throttling_confidence
from tailscope.analyzers.causes.detect_io import blocked_on_io_confidence
from tailscope.analyzers.causes.detect_queue import load_ratio
from tailscope.analyzers.causes.kit import latency_split, ramp, signal_evidence, strongest

OTHERS_CORES_MATERIAL = 0.3
RUNQUEUE_NS_MATERIAL = 100e6
GENERATOR_WAIT_MS_MATERIAL = 100.0
PSI_US_MATERIAL = 100e3
NONVOLUNTARY_MATERIAL = 200.0
TARGET_CPU = ("proc.cpu.user_s", "proc.cpu.system_s")


def target_cores(ctx: SpikeContext) -> np.ndarray | None:
    inputs = ctx.inputs
    if not all(inputs.signals.has(n) for n in TARGET_CPU):
        return None
    return sum(inputs.binned(n) for n in TARGET_CPU)


def other_processes_cores(ctx: SpikeContext) -> np.ndarray | None:
    """Per-bin CPU cores used by everything but the target and the generator; None without the series."""
    inputs = ctx.inputs
    host = ("host.cpu.user_s", "host.cpu.system_s")
    own = target_cores(ctx)
    if own is None or not all(inputs.signals.has(n) for n in host):
        return None
    others = sum(inputs.binned(n) for n in host) - own
    if inputs.signals.has("generator.cpu_percent"):
        others = others - np.nan_to_num(inputs.binned("generator.cpu_percent")) / 100.0
    return others


class CpuContentionDetector:
    name = "cpu_contention"
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        waiting, waits = strongest([
            signal_evidence(ctx, "proc.runqueue_wait_ns", RUNQUEUE_NS_MATERIAL, floor=1e6),
            signal_evidence(ctx, "generator.runqueue_wait_ms", GENERATOR_WAIT_MS_MATERIAL, floor=1.0),
            signal_evidence(ctx, "psi.cpu.some_us", PSI_US_MATERIAL, floor=1e3),
            signal_evidence(ctx, "proc.ctxt.nonvoluntary", NONVOLUNTARY_MATERIAL, floor=5.0),
        ])
        others_values = other_processes_cores(ctx)
        others = (signal_evidence(ctx, "others.cpu_cores", OTHERS_CORES_MATERIAL, floor=0.02, values=others_values)
                  if others_values is not None else None)
        if not waits and others is None:
            return None
        own = target_cores(ctx)
        own_contrast = ctx.inputs.contrast_values(own, ctx.start_ns, ctx.end_ns, floor=0.01) if own is not None else None
        own_ratio = (own_contrast.spike / own_contrast.baseline
                     if own_contrast is not None and own_contrast.baseline > 0 else None)
        throttled, _ = throttling_confidence(ctx)
        blocked_on_io, _ = blocked_on_io_confidence(ctx)
        offered, _ = load_ratio(ctx)
        self_loaded = (ramp(own_ratio, 1.5, 3.0) * ramp(offered, 1.5, 3.0)
                       if own_ratio is not None and offered is not None else 0.0)
        factors = {"waiting": waiting,
                   "others_took_cpu": others.confidence if others is not None else 0.0,
                   "not_self_loaded": 1.0 - self_loaded,
                   "target_not_busier": 0.0 if own_ratio is None else 1.0 - ramp(own_ratio, 1.1, 1.5),
                   "not_throttled": 1.0 - throttled,
                   "not_blocked_on_io": 1.0 - blocked_on_io}
        confidence = (factors["waiting"]
                      * max(factors["others_took_cpu"] * factors["not_self_loaded"], 0.7 * factors["target_not_busier"])
                      * factors["not_throttled"] * factors["not_blocked_on_io"])
        evidence = ([others.as_dict()] if others is not None else []) + waits
        return Finding(self.name, round(float(confidence), 4), {
            "summary": _summary(others, waits, own_ratio, throttled, blocked_on_io, self_loaded, offered),
            "signals": evidence, "target_cpu_ratio": own_ratio, "offered_load_ratio": offered,
            "latency_split": latency_split(ctx).as_dict(), "factors": factors})


def _summary(others, waits: list[dict], own_ratio: float | None, throttled: float, blocked_on_io: float,
             self_loaded: float, offered: float | None) -> str:
    parts = []
    if others is not None:
        parts.append(f"other processes used {others.contrast.spike:.2f} CPU cores vs "
                     f"{others.contrast.baseline:.2f} at baseline")
    named = {e["series"]: e for e in waits}
    runq = named.get("proc.runqueue_wait_ns")
    if runq and runq["spike"] is not None:
        parts.append(f"target threads waited {runq['spike'] / 1e6:.0f} ms/s on a run queue "
                     f"vs {runq['baseline'] / 1e6:.0f} ms/s")
    generator = named.get("generator.runqueue_wait_ms")
    if generator and generator["spike"] is not None:
        parts.append(f"the generator waited {generator['spike']:.0f} ms/s for a CPU vs {generator['baseline']:.0f}")
    psi = named.get("psi.cpu.some_us")
    if psi and psi["spike"] is not None:
        parts.append(f"CPU pressure {psi['spike'] / 1e4:.1f}% vs {psi['baseline'] / 1e4:.1f}%")
    if own_ratio is not None:
        parts.append(f"target CPU use {own_ratio:.2f}× its baseline")
    summary = "CPU contention: " + ("; ".join(parts) if parts else "no CPU signal moved")
    if throttled >= 0.5:
        summary += " (but the cgroup was throttled: see cpu_throttling)"
    if blocked_on_io >= 0.5:
        summary += " (but the target was blocked on storage I/O: see io_stall)"
    if self_loaded >= 0.5:
        summary += f" (but its offered load rose {offered:.1f}×: it waited on its own work, see queue_saturation)"
    return summary
