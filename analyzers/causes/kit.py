"""What the cause detectors share: confidence ramps, signal evidence, the latency split.

Confidence in every detector is a product of factors in [0, 1], each a
*ramp*: 0 below a lower bound, 1 above an upper bound, linear between. A
factor states one piece of evidence ("the signal is far above its baseline":
robust z from 2 to 6; "the change is material": an absolute excess in the
signal's units; "the spike is on the server side": the server's share of
the latency growth not spent in late sends). Multiplying them makes a finding strong only when every
piece holds, and each factor is reported in the evidence so a reader can see
which one held a finding back.

Evidence one cause lends another detector lives here too (the end of this
module), so detectors never import each other: throttling, memory paging and
blocked-on-I/O evidence, and the offered-load ratio, each ignoring latency.

**Evidence that belongs to the target outranks host-wide evidence**
(:func:`owned_strongest`): where a cause has signals of the target's own (its
process, its cgroup) and host-wide ones (``/proc/vmstat``, host PSI, iowait),
and the target's own were recorded, each host-wide signal counts at most
``HOST_ONLY_CAP + (1 − HOST_ONLY_CAP) × the target's own best`` (0.45 when the
target's own are flat: below the 0.5 at which a finding is a cause). Another
process paging or writing on the same host then never outranks a cause the
target's own signals show; a target whose own signals moved is corroborated by
the host's in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis_model import evidence as shapes
from tailscope.analysis_model.codec import encode
from tailscope.analyzers.causes.protocol import SpikeContext
from tailscope.analyzers.inputs.run_inputs import GRID_NS, margin_ns
from tailscope.analyzers.inputs.signal_index import Contrast, place_words
from tailscope.analyzers.stages.presets import STAGE_PRESETS, split_selector

#: Robust z at which a signal's change starts / fully counts.
Z_LOW, Z_HIGH = 2.0, 6.0
#: Other traffic's share of a surge's excess (prompt tokens/s, requests/s) at which it starts / fully
#: counts as load from elsewhere rather than the run's own variation.
OTHER_SHARE_LOW, OTHER_SHARE_HIGH = 0.25, 0.5


def ramp(x: float | None, low: float, high: float) -> float:
    """0 at or below ``low``, 1 at or above ``high``, linear between; 0 for None/NaN."""
    if x is None or not np.isfinite(x):
        return 0.0
    if high <= low:
        return 1.0 if x >= high else 0.0
    return float(min(1.0, max(0.0, (x - low) / (high - low))))


def unlikely(p_value: float, p_none: float, p_full: float) -> float:
    """0 → 1 as a chance ``p_value`` falls from ``p_none`` to ``p_full`` (log-linear): how far a
    surge is from the run's own variation."""
    return ramp(-np.log10(max(p_value, 1e-300)), -np.log10(p_none), -np.log10(p_full))


@dataclass(frozen=True)
class SignalEvidence:
    """One series' contrast and the confidence it lends: ramp(z) × ramp(excess / material)."""

    name: str
    contrast: Contrast
    material: float
    confidence: float

    def typed(self, **whose) -> shapes.SignalContrast:
        """This evidence as the analysis states it (``evidence.signals[]``); ``whose``: its
        ``belongs_to`` and ``counted`` where :func:`owned_strongest` weighed it."""
        return shapes.SignalContrast(series=self.name, **self.contrast.as_dict(), material_excess=self.material,
                                     confidence=round(self.confidence, 4), **whose)

    def as_dict(self) -> dict:
        return encode(self.typed())


def signal_evidence(ctx: SpikeContext, name: str, material: float, floor: float = 0.0,
                    values: np.ndarray | None = None) -> SignalEvidence | None:
    """Evidence from one series (or precomputed per-bin ``values``) for the spike; None without data.

    ``material`` is the excess over the baseline (series units, per s for counters) that counts fully.
    """
    inputs = ctx.inputs
    found = (inputs.contrast_values(values, ctx.start_ns, ctx.end_ns, floor) if values is not None
             else inputs.contrast(name, ctx.start_ns, ctx.end_ns, floor))
    if found is None:
        return None
    confidence = ramp(found.z, Z_LOW, Z_HIGH) * ramp(found.excess, 0.25 * material, material)
    return SignalEvidence(name, found, material, confidence)


def strongest(evidence: list[SignalEvidence | None], weights: dict[str, float] | None = None) -> tuple[float, list[dict]]:
    """(combined confidence, evidence dicts): the best weighted signal, firmed up by the second best.

    combined = best × (0.75 + 0.25 × second best): one strong signal can fire on its own,
    a corroborating one adds the last quarter.
    """
    present = [e for e in evidence if e is not None]
    if not present:
        return 0.0, []
    weights = weights or {}
    return combine([e.confidence * weights.get(e.name, 1.0) for e in present]), [e.as_dict() for e in present]


def combine(confidences: list[float]) -> float:
    """best × (0.75 + 0.25 × second best) of some signals' confidences (0 for none)."""
    scored = sorted(confidences, reverse=True)
    if not scored:
        return 0.0
    best = scored[0]
    second = scored[1] if len(scored) > 1 else 0.0
    return best * (0.75 + 0.25 * second)


#: Most a host-wide signal counts when the target's own signals of the same cause were recorded
#: and stayed flat: below DEFAULT_MIN_CONFIDENCE (0.5), so host-wide evidence alone names no cause.
HOST_ONLY_CAP = 0.45


def host_allowance(own_best: float) -> float:
    """The most a host-wide signal counts beside the target's own best confidence ``own_best``:
    HOST_ONLY_CAP + (1 − HOST_ONLY_CAP) × own_best (0.45 with the target's own flat, 1 with them firm)."""
    return HOST_ONLY_CAP + (1.0 - HOST_ONLY_CAP) * max(0.0, min(1.0, own_best))


@dataclass(frozen=True)
class OwnedEvidence:
    """A cause's evidence split by whom it belongs to (:func:`owned_strongest`).

    ``confidence``: as the cause's own finding (host-wide signals capped by :func:`host_allowance`);
    ``owned``: the part the target's own signals vouch for, min(confidence, the target's own best),
    as a discount lent to another detector (the host-wide confidence when nothing of the target's
    own was recorded); ``watched``: whether it was; ``evidence``: each signal's dict with
    ``belongs_to`` (``target`` or ``host``) and, for host-wide ones, the ``counted`` confidence.
    """

    confidence: float
    owned: float
    watched: bool
    evidence: list[dict]


def owned_strongest(own: list[SignalEvidence | None], host: list[SignalEvidence | None],
                    host_weights: dict[str, float] | None = None) -> OwnedEvidence:
    """Combine the target's own signals ``own`` and host-wide ones ``host`` (see the module docstring):
    confidence = combine(own ∪ {min(weight × host signal, host_allowance(own best))}), the allowance
    applying only when some ``own`` signal was recorded."""
    mine = [e for e in own if e is not None]
    hosts = [e for e in host if e is not None]
    weights = host_weights or {}
    watched = bool(mine)
    own_best = max((e.confidence for e in mine), default=0.0)
    allowance = host_allowance(own_best) if watched else 1.0
    counted = [min(e.confidence * weights.get(e.name, 1.0), allowance) for e in hosts]
    confidence = combine([e.confidence for e in mine] + counted)
    evidence = ([encode(e.typed(belongs_to="target")) for e in mine]
                + [encode(e.typed(belongs_to="host", counted=round(c, 4))) for e, c in zip(hosts, counted)])
    return OwnedEvidence(confidence, min(confidence, own_best) if watched else confidence, watched, evidence)


@dataclass(frozen=True)
class LatencySplit:
    """Mean growth (ms) of the slow requests over normal ones, split by where the time went."""

    latency_ms: float
    server_ms: float | None  # None without joined spans
    outside_server_ms: float | None
    lateness_ms: float

    @property
    def server_share(self) -> float | None:
        """Share of the latency growth spent inside the server's spans (None without spans)."""
        if self.server_ms is None or self.latency_ms <= 0:
            return None
        return float(np.clip(self.server_ms / self.latency_ms, 0.0, 1.0))

    @property
    def lateness_share(self) -> float:
        """Share of the latency growth spent before the request left the generator."""
        if self.latency_ms <= 0:
            return 0.0
        return float(np.clip(self.lateness_ms / self.latency_ms, 0.0, 1.0))

    def typed(self) -> shapes.LatencySplit:
        """The split as the analysis states it (``evidence.latency_split``; ms rounded to 3 decimals)."""
        def r(x):
            return None if x is None else round(float(x), 3)
        return shapes.LatencySplit(r(self.latency_ms), r(self.server_ms), r(self.outside_server_ms),
                                   r(self.lateness_ms), r(self.server_share))

    def as_dict(self) -> dict:
        return encode(self.typed())


def latency_split(ctx: SpikeContext) -> LatencySplit:
    """Where the slow requests' extra latency went: server, outside-server, send lateness."""
    req = ctx.inputs.req
    slow, normal = ctx.slow_request_index, ctx.inputs.normal_sample(ctx.normal_request_index)

    def growth(values):
        a, b = values[slow], values[normal]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        return float(a.mean() - b.mean()) if len(a) and len(b) else 0.0

    stages = ctx.decomposition.stages
    server = stages["server"].growth_ms if "server" in stages else None
    client = stages["outside_server"].growth_ms if "outside_server" in stages else None
    return LatencySplit(growth(req.latency_ms), server, client, growth(np.nan_to_num(req.lateness_ms)))


def server_side_factor(split: LatencySplit) -> float:
    """How much a target-side cause can explain: ramp(1 − lateness share of the growth, 0.2, 0.5).

    Only time *proven* to be the generator's — sends that left late — counts against a
    target-side cause. Client/network time (service time − server span) is ambiguous: a
    target whose event loop is blocked (a GC pause, a throttled process) reads requests and
    writes responses late, outside its own spans, and that shows up there too.
    """
    return ramp(1.0 - split.lateness_share, 0.2, 0.5)


@dataclass(frozen=True)
class PauseOverlap:
    """How a spike's slow requests, against its normal ones, overlapped a set of pauses of the
    target (GC pause events, stalls seen in its spans): the evidence ``gc`` and ``process_stall``
    share. Times in ms; intervals [sent, end] in epoch ns."""

    begin_ns: np.ndarray  # the slow requests' sends
    end_ns: np.ndarray  # the slow requests' ends
    overlap_slow_ms: np.ndarray  # pause time inside each slow request
    share_slow: float  # share of slow requests that overlapped a pause
    share_normal: float  # the same share of the normal requests (0.0 without any)
    extra_ms: float  # median latency of the slow requests above the normal median (or the threshold)
    median_overlap_ms: float  # median pause time inside the slow requests that overlapped one

    def factors(self, explains: str) -> dict[str, float]:
        """``overlap_lift`` (slow − normal share, ramped 0.2 → 0.6) and ``explains`` (median
        overlap ÷ extra latency, ramped 0.15 → 0.5): the two factors both detectors multiply."""
        covered = self.median_overlap_ms / self.extra_ms if self.extra_ms > 0 else 0.0
        return {"overlap_lift": ramp(self.share_slow - self.share_normal, 0.2, 0.6),
                explains: ramp(covered, 0.15, 0.5)}


def pause_overlap(ctx: SpikeContext, pauses) -> PauseOverlap | None:
    """The spike's :class:`PauseOverlap` with ``pauses`` (anything with ``overlap_ms(begin_ns,
    end_ns)`` and ``len``); None without pauses or without slow requests."""
    inputs, slow = ctx.inputs, ctx.slow_request_index
    if len(pauses) == 0 or len(slow) == 0:
        return None
    normal = inputs.normal_sample(ctx.normal_request_index)
    begin, end = inputs.request_interval(slow)
    overlap_slow = pauses.overlap_ms(begin, end)
    overlap_normal = pauses.overlap_ms(*inputs.request_interval(normal)) if len(normal) else np.zeros(0)
    latency = inputs.req.latency_ms
    typical = float(np.median(latency[normal])) if len(normal) else float(ctx.threshold_ms or 0.0)
    hit = overlap_slow > 0
    return PauseOverlap(
        begin_ns=begin, end_ns=end, overlap_slow_ms=overlap_slow,
        share_slow=float(np.mean(hit)),
        share_normal=float(np.mean(overlap_normal > 0)) if len(overlap_normal) else 0.0,
        extra_ms=float(np.median(latency[slow] - typical)),
        median_overlap_ms=float(np.median(overlap_slow[hit])) if hit.any() else 0.0)


def percent(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


#: Where a contrast's level was measured when it lies inside the spike's own window.
IN_SPIKE = shapes.IN_SPIKE


def level_words(found: Contrast | dict, shown) -> str:
    """A contrast's level (a :class:`Contrast` or its ``as_dict``) for a sentence, formatted by
    ``shown``: the figure measured inside the spike's own [start, end) first, and the level the
    confidence was judged on with its place when that lay outside the spike — "0.80", "0.80 in the
    spike (peak 1.60 in the 2 s after the spike)", or "1.60 in the 2 s after the spike" when the
    spike itself has no reading."""
    get = found.get if isinstance(found, dict) else lambda key: getattr(found, key)
    spike, inside, place = get("spike"), get("inside"), get("place") or IN_SPIKE
    if place == IN_SPIKE or spike is None:
        return shown(inside if inside is not None else spike)
    if inside is None:
        return f"{shown(spike)} {place}"
    return f"{shown(inside)} in the spike (peak {shown(spike)} {place})"


def places(**found: Contrast | None) -> dict[str, str]:
    """``{evidence key: where its figure was measured}`` for the figures taken from a contrast whose
    level lay outside the spike's own window (reports/evidence_text.py appends the place)."""
    return {key: c.place for key, c in found.items() if c is not None and c.place != IN_SPIKE}


# -- Evidence shared between detectors (each ignores latency: the caller weighs it) ---------------

#: Material excess of CFS throttling: throttled ns per s, throttled periods per s (10 elapse per s).
THROTTLED_NS_MATERIAL = 50e6
THROTTLED_PERIODS_MATERIAL = 2.0
#: Host-wide paging signals count less than the target's own major faults (and at most
#: host_allowance(the target's own best) when those were recorded).
PAGING_WEIGHTS = {"host.vm.pgmajfault": 0.8, "psi.memory.some_us": 0.8}
#: Material excess of the target's own paging: major faults per s, memory stall µs per s of its cgroup,
#: swap held by its cgroup (bytes).
MAJOR_FAULTS_MATERIAL = 20.0
MEMORY_STALL_US_MATERIAL = 50e3
CGROUP_SWAP_BYTES_MATERIAL = 16 * 2**20
#: Material excess of blocked-on-I/O signals: mean threads in state D, I/O stall µs per s, iowait s per s.
BLOCKED_THREADS_MATERIAL = 0.1
PSI_IO_US_MATERIAL = 100e3
IOWAIT_S_MATERIAL = 0.1
#: Host-wide blocked-on-I/O signals count less: another process's I/O raises them too (and at most
#: host_allowance(the target's own best) when the target's own were recorded).
BLOCKED_WEIGHTS = {"psi.io.some_us": 0.8, "host.cpu.iowait_s": 0.6}


def throttling_confidence(ctx: SpikeContext) -> tuple[float, list[dict]]:
    """(confidence, evidence) that the cgroup was throttled during the spike, ignoring latency
    (``cpu_throttling``'s evidence; ``cpu_contention`` discounts its finding by it: throttled
    threads wait in the run queue too)."""
    return strongest([
        signal_evidence(ctx, "cgroup.cpu.throttled_ns", THROTTLED_NS_MATERIAL, floor=1e6),
        signal_evidence(ctx, "cgroup.cpu.nr_throttled", THROTTLED_PERIODS_MATERIAL, floor=0.1),
    ])


def paging_confidence(ctx: SpikeContext) -> OwnedEvidence:
    """Evidence that the target's memory pages were read back from swap or disk during the spike,
    ignoring latency (``swap``'s evidence as ``confidence``; the io_stall detector discounts its
    finding by the ``owned`` part).

    The target's own: its major faults (material 20/s), its cgroup's memory stall
    ``cgroup.psi.memory.some_us`` (50 ms/s) and swap held ``cgroup.mem.swap_current_bytes``
    (16 MiB). Host-wide (:func:`owned_strongest`): swap-ins (100 pages/s, about 0.4 MB/s),
    major faults (50/s, weight 0.8), memory stall (50 ms/s, weight 0.8)."""
    return owned_strongest([
        signal_evidence(ctx, "proc.major_faults", MAJOR_FAULTS_MATERIAL, floor=1.0),
        signal_evidence(ctx, "cgroup.psi.memory.some_us", MEMORY_STALL_US_MATERIAL, floor=1e3),
        signal_evidence(ctx, "cgroup.mem.swap_current_bytes", CGROUP_SWAP_BYTES_MATERIAL, floor=2**20),
    ], [
        signal_evidence(ctx, "host.vm.pswpin", 100.0, floor=5.0),
        signal_evidence(ctx, "host.vm.pgmajfault", 50.0, floor=2.0),
        signal_evidence(ctx, "psi.memory.some_us", MEMORY_STALL_US_MATERIAL, floor=1e3),
    ], PAGING_WEIGHTS)


def blocked_on_io_confidence(ctx: SpikeContext) -> OwnedEvidence:
    """Evidence that the target's threads were blocked on I/O during the spike, ignoring latency
    (``io_stall``'s blocked evidence as ``confidence``; the cpu_contention detector discounts its
    finding by the ``owned`` part: the kernel threads that write a process's data back take CPU
    beside it).

    The target's own: its threads in state D (mean, material 0.1) and its cgroup's I/O stall
    (100 ms/s). Host-wide (:func:`owned_strongest`; other processes' I/O — a neighbour paging,
    the harness writing its run directory under a burst, a backup — raises them too):
    ``psi.io`` (100 ms/s, weight 0.8), iowait (0.1 s/s, weight 0.6)."""
    return owned_strongest([
        signal_evidence(ctx, "proc.threads_blocked", BLOCKED_THREADS_MATERIAL, floor=0.02),
        signal_evidence(ctx, "cgroup.psi.io.some_us", PSI_IO_US_MATERIAL, floor=1e3),
    ], [
        signal_evidence(ctx, "psi.io.some_us", PSI_IO_US_MATERIAL, floor=1e3),
        signal_evidence(ctx, "host.cpu.iowait_s", IOWAIT_S_MATERIAL, floor=0.01),
    ], BLOCKED_WEIGHTS)


def load_contrast(ctx: SpikeContext) -> tuple[Contrast | None, str]:
    """(the spike's offered rate per s contrasted with the baseline, what was counted).

    Offered load is the harness's *scheduled* sends plus SERVER spans of traces it did not send
    (other clients): ``queue_saturation``'s surge evidence, and ``cpu_contention``'s test of a
    target that waited on its own load."""
    inputs = ctx.inputs
    external = inputs.external_arrivals_ns
    rate = inputs.per_second(inputs.req.scheduled_ns)
    label = "offered load"
    if len(external):
        rate = rate + inputs.per_second(external)
        label = "offered load (harness + other clients)"
    return inputs.contrast_values(rate, ctx.start_ns, ctx.end_ns), label


def load_ratio(ctx: SpikeContext) -> tuple[float | None, str]:
    """(spike offered rate / baseline median rate, what was counted); None without a baseline rate
    (:func:`load_contrast`; the spike's rate is the confidence's level, its place in the contrast)."""
    found, label = load_contrast(ctx)
    if found is None or found.baseline <= 0:
        return None, label
    return found.spike / found.baseline, label


# -- LLM servers: the preset's server series (analyzers/stages/server_metrics.py) -------------------

#: KV-cache use (0..1) at which the cache counts as near its limit / full.
KV_NEAR_LIMIT, KV_FULL = 0.85, 0.95
#: Rise of KV-cache use over the baseline (fraction of the cache) that starts / fully counts.
KV_RISE_LOW, KV_RISE_HIGH = 0.1, 0.3
#: Material excess of preemptions per s.
PREEMPTIONS_MATERIAL = 1.0


@dataclass(frozen=True)
class KvPressure:
    """Whether the KV cache was near its limit during a spike, ignoring latency (:func:`kv_pressure`).

    ``confidence`` = near limit × max(ramp(its rise, KV_RISE_LOW, KV_RISE_HIGH), preemptions) ×
    (0.75 + 0.25 × preemptions), where *preemptions* is the preemption rate's signal evidence
    (robust z and PREEMPTIONS_MATERIAL per s) and *near limit* = max(ramp(spike KV use, KV_NEAR_LIMIT,
    KV_FULL), preemptions): an engine preempts a running request only when it cannot allocate a KV
    block (vLLM's scheduler, SGLang's retraction), so rising preemptions are the engine's own word that
    the cache ran full — whatever the scrapes of its usage gauge caught. Preempting frees blocks, so
    KV use averaged over the spike sits below the limit it keeps hitting (the real vLLM with a 64-block
    cache: 0.84–0.89 over the spike, 1.0 at its peaks), and an engine too busy to answer ``/metrics``
    promptly is scraped seconds apart (the real vLLM on 2 busy cores: 2.8-s scrapes, 4-s gaps; the
    readings it did answer read 0.41 at most while it preempted 30 times). The peak is the highest
    raw reading (0..1, :func:`kv_peak`) in the spike widened by its margin, quoted as evidence.
    ``watched``: the run has a KV-use series; the rest are the numbers behind it."""

    confidence: float
    watched: bool
    kv_spike: float | None = None
    kv_baseline: float | None = None
    preemptions_per_s: float | None = None
    preemptions_baseline_per_s: float | None = None
    factors: dict | None = None
    series: tuple[str, ...] = ()
    places: dict | None = None  # evidence key -> where its level was measured, when outside the spike (:func:`places`)
    kv_peak: float | None = None

    def as_dict(self) -> dict:
        def r(x):
            return None if x is None else round(float(x), 4)
        return {"kv_usage_spike": r(self.kv_spike), "kv_usage_baseline": r(self.kv_baseline),
                "kv_usage_peak": r(self.kv_peak),
                "preemptions_per_s": r(self.preemptions_per_s),
                "preemptions_baseline_per_s": r(self.preemptions_baseline_per_s),
                "series": list(self.series), "factors": self.factors or {}, "places": self.places or {}}


def kv_peak(ctx: SpikeContext) -> float | None:
    """The highest KV-use reading (0..1, the raw scrapes, not per-bin means) in the spike widened by
    its margin, over every series of the ``kv_usage`` role; None without one."""
    inputs = ctx.inputs
    margin = margin_ns(ctx.start_ns, ctx.end_ns)
    scale = inputs.server_series.scale.get("kv_usage", 1.0)
    peaks = []
    for name in inputs.server_series.names("kv_usage"):
        t, v = inputs.signals.readings(name)
        chosen = (t >= ctx.start_ns - margin) & (t <= ctx.end_ns + margin) & np.isfinite(v)
        if chosen.any():
            peaks.append(float(v[chosen].max()) * scale)
    return max(peaks) if peaks else None


def kv_pressure(ctx: SpikeContext) -> KvPressure:
    """KV-cache pressure during the spike from the preset's ``kv_usage`` and ``preemptions`` roles
    (``kv_cache_pressure``'s evidence; ``queue_saturation`` yields by it: a queue that grew because
    the KV cache was full is KV pressure, not saturation). Not watched without a ``kv_usage`` series."""
    inputs = ctx.inputs
    usage = inputs.server_role("kv_usage")
    if usage is None:
        return KvPressure(0.0, False)
    kv = inputs.contrast_values(np.nan_to_num(usage), ctx.start_ns, ctx.end_ns)
    if kv is None:
        return KvPressure(0.0, True)
    rate = inputs.server_role("preemptions")
    preempted = (signal_evidence(ctx, "preemptions", PREEMPTIONS_MATERIAL, floor=0.1, values=np.nan_to_num(rate))
                 if rate is not None else None)
    preempting = preempted.confidence if preempted is not None else 0.0
    peak = kv_peak(ctx)
    factors = {"near_limit": max(ramp(kv.spike, KV_NEAR_LIMIT, KV_FULL), preempting),
               "rose": ramp(kv.spike - kv.baseline, KV_RISE_LOW, KV_RISE_HIGH),
               "preempting": preempting}
    confidence = factors["near_limit"] * max(factors["rose"], preempting) * (0.75 + 0.25 * preempting)
    names = inputs.server_series.names("kv_usage") + inputs.server_series.names("preemptions")
    return KvPressure(confidence, True, kv.spike, kv.baseline,
                      preempted.contrast.spike if preempted is not None else None,
                      preempted.contrast.baseline if preempted is not None else None, factors, names,
                      {**places(kv_usage_spike=kv, preemptions_per_s=preempted.contrast if preempted is not None else None),
                       **({"kv_usage_peak": widened_place(ctx)} if peak is not None else {})},
                      kv_peak=peak)


def widened_place(ctx: SpikeContext) -> str:
    """Where a figure taken over the spike widened by its margin was measured: "from 2 s before the
    spike to 2 s after it" (:func:`~.signal_index.place_words`)."""
    margin = margin_ns(ctx.start_ns, ctx.end_ns)
    return place_words(ctx.start_ns - margin, ctx.end_ns + margin, ctx.start_ns, ctx.end_ns)


def server_role_prefixes(*roles: str) -> tuple[str, ...]:
    """The signal series (``prom.<metric>``) that play ``roles`` in any stage preset's metric map:
    a detector's ``reads`` for evidence it takes from server roles."""
    names = []
    for preset in STAGE_PRESETS.values():
        for role in roles:
            source = preset.metrics.get(role)
            names += [f"prom.{split_selector(name)[0]}" for name in (source.names if source is not None else ())]
    return tuple(dict.fromkeys(names))


def baseline_prompt_tokens(ctx: SpikeContext) -> np.ndarray:
    """Prompt tokens of the harness's requests sent in the baseline's bins (the run's quiet time,
    :attr:`~.run_inputs.RunInputs.baseline_bins`); empty in a run without token counts."""
    inputs = ctx.inputs
    if inputs.llm is None:
        return np.zeros(0)
    prompts = inputs.llm.prompt_tokens
    bins = np.floor_divide(inputs.req.sent_ns - inputs.origin_ns, GRID_NS)
    on_grid = (bins >= 0) & (bins < len(inputs.baseline_bins)) & np.isfinite(prompts)
    in_baseline = np.zeros(len(prompts), dtype=bool)
    in_baseline[on_grid] = inputs.baseline_bins[bins[on_grid]]
    return prompts[in_baseline]


def other_traffic_prompts(ctx: SpikeContext, long_tokens: float | None) -> dict:
    """Other traffic's prompts that started in the spike widened by its margin: ``requests`` (spans
    with a prompt count), ``mean_tokens``, and ``long`` — 0 → 1 as their mean rises from half of
    ``long_tokens`` (the baseline's P90 of our prompts) to all of it; 1 without that threshold or
    without counts. A surge of other traffic's *short* prompts is more requests, not longer
    prefills: 50 chat requests/s of 64 tokens beside 3 of ours filled the running batch and slowed
    every step (``queue_saturation``'s batch path), and had been named ``prefill_interference`` on
    its TTFT spike."""
    other = ctx.inputs.other_traffic
    margin = margin_ns(ctx.start_ns, ctx.end_ns)
    inside = (other.prompt_at_ns >= ctx.start_ns - margin) & (other.prompt_at_ns < ctx.end_ns + margin)
    requests = int(inside.sum())
    mean = float(other.prompt_tokens[inside].mean()) if requests else None
    long = ramp(mean / long_tokens, 0.5, 1.0) if mean is not None and long_tokens else 1.0
    return {"requests": requests, "mean_tokens": mean, "long": long}
