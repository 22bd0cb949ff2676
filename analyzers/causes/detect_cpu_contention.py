"""``cpu_contention``: other work took the CPUs the target needed (no quota throttling).

*Waiting* signals (rates per second, contrasted with the baseline,
detector kit): the run's own — ``proc.runqueue_wait_ns`` (the target's threads runnable but
not running; material 100 ms/s), ``generator.runqueue_wait_ms`` (the load
generator's event loop waiting for a CPU, ms per second; material 100),
``proc.ctxt.nonvoluntary`` (the target's preemptions; material 200/s), its
cgroup's ``cgroup.psi.cpu.some_us`` (100 ms/s) — and the host's
``psi.cpu.some_us`` (material 100 ms/s), which counts at most 0.45 + 0.55 ×
the best of the run's own when those were recorded (``kit.owned_strongest``):
processes elsewhere on the host waiting for their CPUs neither slow the target
nor the generator. Contention slows whatever it starves — the
target or the generator — so there is no server-side factor here.

The target's own overload also makes it wait, so waiting must come with
*others* taking the CPU: either other processes' CPU rose (host busy CPU −
the target's − the generator's, in cores; material 0.3; on a target pinned to
some of the host's CPUs, the busy CPU of those only: :func:`other_processes_cores`) while the target's
own load did not surge, or — on a host that was already saturated by other
work, where a neighbour's growth only displaces — the target waited more
without doing more work (its CPU use did not rise) while other processes held
CPU at baseline (``neighbour`` = ramp(their baseline cores, 0.15, 0.3); 1 where
the host's CPU is not sampled). Without that neighbour there is nobody to be
displaced by: a target whose own work filled the host's CPUs waits on itself
(measured on the real vLLM CPU build, 2 cores, no other work: the target's CPU
1.18× its baseline, other processes 0.06 → 0.08 cores, and this branch alone
named contention in 1 of 16 control runs):

confidence = waiting × max(others × not self-loaded,
                           0.7 × (1 − ramp(target CPU ratio, 1.1, 1.5)) × neighbour, co-tenants)
           × (1 − throttling confidence) × (1 − blocked-on-I/O confidence owned by the target)
self-loaded = ramp(target CPU ratio, 1.5, 3) × ramp(offered-load ratio, 1.5, 3)

*Co-tenants* are processes inside the target's own cgroup (a sidecar, a
worker pool of the same container) that compete with it for the cgroup's CPU:
the cgroup's CPU use ``cgroup.cpu.usage_ns`` rose well above the target
process's own (co-tenant cores = cgroup − target, in cores; material 0.3), and
the target's own threads waited in the run queue:

co-tenants = co-tenant cores × ramp(cgroup CPU / target CPU in the spike, 1.5, 3)
           × the target's run-queue wait (``proc.runqueue_wait_ns`` alone)

This is evidence of the target's own cgroup, so it needs neither the host's
CPU nor the self-loaded test (clients sending a burst from the same host are
not in the target's cgroup). It counts only where the cgroup is one of the
target's own, not the whole host: at baseline its CPU was below 90% of the
host's busy CPU.

A target that received several times its load and used several times its
CPU waits in the run queue by itself; the clients sending that load (a
retry storm, a burst from a process on the same host) are the "others"
then, and the queue, not a neighbour, is the cause (queue_saturation).

waiting = best counted waiting signal × (0.75 + 0.25 × second best). Throttled
threads wait too, hence the throttling factor. A target blocked on its own
storage I/O makes the kernel write its data back on kworker threads, which
count as "other processes" and take the target's CPU (measured in the lab:
about one core while it wrote 330 MB/s), hence the last factor (the
io_stall detector's blocked evidence).

The throttling, blocked-on-I/O and offered-load evidence come from the
detector kit (``kit.throttling_confidence``, ``kit.blocked_on_io_confidence``,
``kit.load_ratio``), which the detectors of those causes use too. Only the
blocked-on-I/O evidence the target's own threads vouch for discounts (its
``owned`` part): another process's I/O on the same host — a neighbour paging
through swap — raises host I/O pressure and iowait without the target's
kworkers taking its CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.causes.kit import (
    IN_SPIKE,
    SignalEvidence,
    blocked_on_io_confidence,
    latency_split,
    level_words,
    load_contrast,
    owned_strongest,
    places,
    ramp,
    signal_evidence,
    throttling_confidence,
)
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext
from tailscope.analyzers.inputs.cpu_accounting import (
    OTHERS_CORES_MATERIAL,
    host_cores,
    other_processes_cores,
    target_cores,
)

RUNQUEUE_NS_MATERIAL = 100e6
GENERATOR_WAIT_MS_MATERIAL = 100.0
PSI_US_MATERIAL = 100e3
NONVOLUNTARY_MATERIAL = 200.0
#: Co-tenants in the target's cgroup: material excess of their CPU (cores), the ramp of the cgroup's
#: CPU over the target's own during the spike, and the largest baseline share of the host's busy CPU
#: the cgroup may have and still count as the target's own (not the whole host: a root cgroup).
COTENANT_CORES_MATERIAL = 0.3
COTENANT_RATIO_LOW, COTENANT_RATIO_HIGH = 1.5, 3.0
COTENANT_HOST_SHARE_MAX = 0.9


def neighbour_at_baseline(ctx: SpikeContext, others: np.ndarray | None) -> float:
    """0 → 1 as other processes' baseline CPU rises from half of :data:`OTHERS_CORES_MATERIAL`
    to all of it: a neighbour already running that a saturated host's target can be displaced
    by (module docstring); 1 without the host's CPU series (no way to tell)."""
    if others is None:
        return 1.0
    contrast = ctx.inputs.contrast_values(others, ctx.start_ns, ctx.end_ns, floor=0.02)
    if contrast is None:
        return 1.0
    return ramp(contrast.baseline, OTHERS_CORES_MATERIAL / 2, OTHERS_CORES_MATERIAL)


@dataclass(frozen=True)
class Cotenants:
    """Co-tenant evidence: their cores' contrast, cgroup CPU / target CPU in the spike, and the factor."""

    evidence: SignalEvidence
    ratio: float | None
    confidence: float


def cotenants_in_cgroup(ctx: SpikeContext, own: np.ndarray | None, own_contrast, waited: float) -> Cotenants | None:
    """Co-tenants taking the target's cgroup's CPU (see the module docstring); None without the
    cgroup's CPU usage or the target's own, or when the cgroup is the whole host's."""
    inputs = ctx.inputs
    if own is None or own_contrast is None or not inputs.signals.has("cgroup.cpu.usage_ns"):
        return None
    group = inputs.binned("cgroup.cpu.usage_ns") / 1e9
    host = host_cores(ctx.inputs)
    if host is not None:
        group_base = inputs.contrast_values(group, ctx.start_ns, ctx.end_ns, floor=0.01)
        host_base = inputs.contrast_values(host, ctx.start_ns, ctx.end_ns, floor=0.01)
        if group_base is None or host_base is None or group_base.baseline >= COTENANT_HOST_SHARE_MAX * host_base.baseline:
            return None
    cotenant_cores = np.maximum(group - own, 0.0)  # two samplers' readings: noise can dip below 0
    found = signal_evidence(ctx, "cgroup.cotenant_cores", COTENANT_CORES_MATERIAL, floor=0.02, values=cotenant_cores)
    if found is None:
        return None
    # cgroup CPU over the target's own at their spike levels (None: the target used no CPU at all)
    ratio = (own_contrast.spike + found.contrast.spike) / own_contrast.spike if own_contrast.spike > 0 else None
    well_above = 1.0 if ratio is None else ramp(ratio, COTENANT_RATIO_LOW, COTENANT_RATIO_HIGH)
    return Cotenants(found, ratio, found.confidence * well_above * waited)


class CpuContentionDetector(CauseDetector):
    kind = "cpu_contention"
    answers = ("cpu_contention",)
    # generator.runqueue_wait_ms, the target's own proc.cpu.* and its cgroup's cgroup.cpu.usage_ns,
    # consulted below, are not listed: they move with the generator's and the target's own load too,
    # so alone they name no cause.
    reads = ("proc.runqueue_wait", "proc.ctxt.nonvoluntary", "psi.cpu", "cgroup.psi.cpu", "host.cpu",
             "host.load")
    aliases = ("cpu_saturation", "noisy_neighbour", "noisy_neighbor", "run_queue", "cpu_starvation")
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        runqueue = signal_evidence(ctx, "proc.runqueue_wait_ns", RUNQUEUE_NS_MATERIAL, floor=1e6)
        waited = owned_strongest([
            runqueue,
            signal_evidence(ctx, "generator.runqueue_wait_ms", GENERATOR_WAIT_MS_MATERIAL, floor=1.0),
            signal_evidence(ctx, "proc.ctxt.nonvoluntary", NONVOLUNTARY_MATERIAL, floor=5.0),
            signal_evidence(ctx, "cgroup.psi.cpu.some_us", PSI_US_MATERIAL, floor=1e3),
        ], [signal_evidence(ctx, "psi.cpu.some_us", PSI_US_MATERIAL, floor=1e3)])
        waiting, waits = waited.confidence, waited.evidence
        others_values = other_processes_cores(ctx.inputs)
        others = (signal_evidence(ctx, "others.cpu_cores", OTHERS_CORES_MATERIAL, floor=0.02, values=others_values)
                  if others_values is not None else None)
        if not waits and others is None:
            return None
        own = target_cores(ctx.inputs)
        own_contrast = ctx.inputs.contrast_values(own, ctx.start_ns, ctx.end_ns, floor=0.01) if own is not None else None
        own_ratio = (own_contrast.spike / own_contrast.baseline
                     if own_contrast is not None and own_contrast.baseline > 0 else None)
        throttled, _ = throttling_confidence(ctx)
        blocked_on_io = blocked_on_io_confidence(ctx).owned
        cotenants = cotenants_in_cgroup(ctx, own, own_contrast, runqueue.confidence if runqueue else 0.0)
        load, _ = load_contrast(ctx)
        offered = load.spike / load.baseline if load is not None and load.baseline > 0 else None
        self_loaded = (ramp(own_ratio, 1.5, 3.0) * ramp(offered, 1.5, 3.0)
                       if own_ratio is not None and offered is not None else 0.0)
        factors = {"waiting": waiting,
                   "others_took_cpu": others.confidence if others is not None else 0.0,
                   "not_self_loaded": 1.0 - self_loaded,
                   "target_not_busier": 0.0 if own_ratio is None else 1.0 - ramp(own_ratio, 1.1, 1.5),
                   "neighbour_at_baseline": neighbour_at_baseline(ctx, others_values),
                   "cotenants_in_cgroup": cotenants.confidence if cotenants is not None else 0.0,
                   "not_throttled": 1.0 - throttled,
                   "not_blocked_on_io": 1.0 - blocked_on_io}
        confidence = (factors["waiting"]
                      * max(factors["others_took_cpu"] * factors["not_self_loaded"],
                            0.7 * factors["target_not_busier"] * factors["neighbour_at_baseline"],
                            factors["cotenants_in_cgroup"])
                      * factors["not_throttled"] * factors["not_blocked_on_io"])
        evidence = (([others.as_dict()] if others is not None else [])
                    + ([cotenants.evidence.as_dict()] if cotenants is not None else []) + waits)
        return Finding(self.name, round(float(confidence), 4), {
            "summary": _summary(others, cotenants, waits, own_ratio, throttled, blocked_on_io, self_loaded, offered,
                                own_contrast.place if own_contrast is not None else IN_SPIKE,
                                load.place if load is not None else IN_SPIKE),
            "signals": evidence, "target_cpu_ratio": own_ratio, "offered_load_ratio": offered,
            "cgroup_cpu_ratio": cotenants.ratio if cotenants is not None else None,
            "latency_split": latency_split(ctx).as_dict(), "factors": factors,
            "places": places(target_cpu_ratio=own_contrast, offered_load_ratio=load)})


def _summary(others, cotenants: Cotenants | None, waits: list[dict], own_ratio: float | None, throttled: float,
             blocked_on_io: float, self_loaded: float, offered: float | None, own_place: str = IN_SPIKE,
             load_place: str = IN_SPIKE) -> str:
    parts = []
    if cotenants is not None and cotenants.confidence >= 0.5:
        found = cotenants.evidence.contrast
        parts.append(f"co-tenants in the target's cgroup used {level_words(found, lambda v: f'{v:.2f} CPU cores')} vs {found.baseline:.2f} "
                     f"at baseline (the cgroup used {cotenants.ratio or 0:.1f}× the target's own CPU)")
    if others is not None:
        parts.append(f"other processes used {level_words(others.contrast, lambda v: f'{v:.2f} CPU cores')} vs "
                     f"{others.contrast.baseline:.2f} at baseline")
    named = {e["series"]: e for e in waits}
    runq = named.get("proc.runqueue_wait_ns")
    if runq and runq["spike"] is not None:
        parts.append(f"target threads waited on a run queue {level_words(runq, lambda v: f'{v / 1e6:.0f} ms/s')} "
                     f"vs {runq['baseline'] / 1e6:.0f} ms/s")
    generator = named.get("generator.runqueue_wait_ms")
    if generator and generator["spike"] is not None:
        parts.append(f"the generator waited for a CPU {level_words(generator, lambda v: f'{v:.0f} ms/s')} "
                     f"vs {generator['baseline']:.0f} ms/s")
    psi = named.get("psi.cpu.some_us")
    if psi and psi["spike"] is not None:
        parts.append(f"CPU pressure {level_words(psi, lambda v: f'{v / 1e4:.1f}%')} vs {psi['baseline'] / 1e4:.1f}%")
    if own_ratio is not None:
        parts.append(f"target CPU use {own_ratio:.2f}× its baseline" + (f" {own_place}" if own_place != IN_SPIKE else ""))
    summary = "CPU contention: " + ("; ".join(parts) if parts else "no CPU signal moved")
    if throttled >= 0.5:
        summary += " (but the cgroup was throttled: see cpu_throttling)"
    if blocked_on_io >= 0.5:
        summary += " (but the target was blocked on storage I/O: see io_stall)"
    if self_loaded >= 0.5:
        summary += (f" (but its offered load rose {offered:.1f}×" + (f" {load_place}" if load_place != IN_SPIKE else "")
                    + ": it waited on its own work, see queue_saturation)")
    return summary
