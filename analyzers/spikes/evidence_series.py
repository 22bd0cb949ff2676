"""The series a spike's top cause rests on, cut out around the spike for the report to draw.

The detectors contrast per-second values of a few series with their baseline
(:mod:`~tailscope.analyzers.inputs.signal_index`); this module hands the same
values to the report, so that every number of a cause's evidence can be found
on a chart beside it. For the top cause of a spike, at most ``MAX_SERIES`` (3)
entries, each on the detectors' 1-s grid (``RunInputs.edges``) from ``pad``
before the spike to ``pad`` after it (``pad`` = the spike's length, at least
``MIN_PAD_S`` = 10 s and at most ``MAX_PAD_S`` = 600 s), in the units the
detector read them (a counter as its rate per second in its own unit, a gauge
as read): each an :class:`~tailscope.analysis_model.spikes.EvidenceSeries` (``name``, ``kind``
``"signal"`` or ``"events"``, ``unit``, ``counter``, ``t_ns``: bin centres or event starts,
``values``, ``spike``/``baseline``/``spread``, ``place``, ``marks``: :class:`EvidenceMark`).

``spike``/``baseline``/``spread`` are the numbers the finding states (its
contrast: the spike level, the baseline median, the robust spread); ``marks``
are other levels the finding names. What each cause contributes:

- signal causes (``evidence.signals[]``, ``evidence.generator_runqueue_wait``):
  the contrasted series, by the confidence each lent;
- ``gc``: the target's GC pauses in the window (one point per pause at its
  start, its duration in ms), the longest marked;
- ``process_stall``: the target's stalls seen in its spans, drawn the same way
  (``target.stall_ms``);
- ``queue_saturation``: offered load per second (and its contrast) and the
  mean ``queue.depth`` per second, with the normal P99 depth, the slow
  requests' median depth and the capacity marked;
- ``generator``: the share of sends more than 1 ms late per second (and its
  contrast) and the generator's CPU;
- the LLM causes (:data:`SERVER_ROLE_ENTRIES`): the stage preset's server roles, named
  ``server.<role>`` in the role's unit — ``kv_cache_pressure``: KV-cache usage (0..1),
  preemptions/s and requests waiting; ``prefill_interference``: prompt tokens prefilled per
  second and requests running; ``queue_saturation`` on an LLM server: requests waiting
  (after offered load), each with the levels the finding states;
- ``unexplained`` and unknown kinds: none.

At most ``MAX_POINTS`` (600) points per series (min/max buckets). Per-second
series are computed once per run (``cache``), then sliced per spike.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.spikes import CauseFinding, EvidenceMark, EvidenceSeries
from tailscope.analyzers.causes.protocol import SpikeContext
from tailscope.analyzers.inputs.cpu_accounting import other_processes_cores
from tailscope.analyzers.inputs.records import NS_PER_S
from tailscope.analyzers.inputs.signal_index import Contrast
from tailscope.analyzers.inputs.signal_series import downsample_minmax
from tailscope.analyzers.stages.presets import ROLES
from tailscope.support.units import LATE_THRESHOLD_MS as LATE_MS

MAX_SERIES = 3
MIN_PAD_S, MAX_PAD_S = 10.0, 600.0
MAX_POINTS = 600
#: Derived series: the one the CPU-contention detector computes without a sampled series.
OTHERS_CORES = "others.cpu_cores"


def _number(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def window_bins(ctx: SpikeContext) -> slice:
    """Grid bins from ``pad`` before the spike to ``pad`` after it (module docstring)."""
    edges = ctx.inputs.edges
    length = (ctx.end_ns - ctx.start_ns) / NS_PER_S
    pad = int(min(max(length, MIN_PAD_S), MAX_PAD_S) * NS_PER_S)
    first = int(np.searchsorted(edges, ctx.start_ns - pad, side="right")) - 1
    last = int(np.searchsorted(edges, ctx.end_ns + pad, side="left"))
    return slice(max(first, 0), min(max(last, 0), len(edges) - 1))


def _grid_entry(ctx: SpikeContext, name: str, values: np.ndarray, unit: str, counter: bool,
                found: dict | Contrast | None, marks: list[EvidenceMark] | None = None) -> EvidenceSeries | None:
    part = window_bins(ctx)
    edges = ctx.inputs.edges
    centres = (edges[part] + edges[part.start + 1:part.stop + 1]) // 2
    chosen = np.asarray(values, dtype=np.float64)[part]
    keep = np.isfinite(chosen)
    if not keep.any():
        return None
    t, v = downsample_minmax(centres[keep], chosen[keep], MAX_POINTS)
    if isinstance(found, Contrast):
        found = found.as_dict()
    found = found or {}
    return EvidenceSeries(
        name=name, kind="signal", unit=unit, counter=counter, t_ns=tuple(int(x) for x in t),
        values=tuple(float(x) for x in v), spike=_number(found.get("spike")),
        baseline=_number(found.get("baseline")), spread=_number(found.get("spread")),
        marks=tuple(marks or ()), place=found.get("place"))


def _cached(cache: dict, key: str, compute) -> np.ndarray:
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def signal_entries(ctx: SpikeContext, evidence: dict, cache: dict) -> list[EvidenceSeries]:
    """Entries of the contrasted signal series a finding lists, strongest first."""
    listed = [e for e in (evidence.get("signals") or []) if isinstance(e, dict) and e.get("series")]
    runqueue = evidence.get("generator_runqueue_wait")
    if isinstance(runqueue, dict) and runqueue.get("series"):
        listed.append(runqueue)
    listed.sort(key=lambda e: -(e.get("confidence") or 0.0))
    signals = ctx.inputs.signals
    out = []
    for entry in listed:
        name = entry["series"]
        if name == OTHERS_CORES:
            values = _cached(cache, name, lambda: other_processes_cores(ctx.inputs))
            unit, counter = "cores", False
        elif signals.has(name):
            values = _cached(cache, name, lambda name=name: ctx.inputs.binned(name))
            unit, counter = signals.unit(name), signals.kind(name) == "counter"
        else:
            continue
        if values is None:
            continue
        made = _grid_entry(ctx, name, values, unit, counter, entry)
        if made is not None:
            out.append(made)
        if len(out) == MAX_SERIES:
            break
    return out


def gc_entries(ctx: SpikeContext, evidence: dict) -> list[EvidenceSeries]:
    """The target's GC pauses inside the window, the longest marked."""
    return pause_entries(ctx, ctx.inputs.gc_pauses, "gc.pause_ms", evidence.get("longest_pause_ms"))


def stall_entries(ctx: SpikeContext, evidence: dict) -> list[EvidenceSeries]:
    """The target's stalls seen in its spans (:mod:`~.inputs.span_stalls`) inside the window, the longest marked."""
    return pause_entries(ctx, ctx.inputs.span_stalls.pauses, "target.stall_ms", evidence.get("longest_stall_ms"))


def pause_entries(ctx: SpikeContext, pauses, name: str, longest) -> list[EvidenceSeries]:
    """One ``events`` entry ``name``: each pause inside the window at its start, its length in ms."""
    if len(pauses) == 0:
        return []
    part = window_bins(ctx)
    edges = ctx.inputs.edges
    lo, hi = edges[part.start], edges[part.stop]
    inside = (pauses.start_ns < hi) & (pauses.end_ns > lo)
    if not inside.any():
        return []
    t = pauses.start_ns[inside]
    ms = (pauses.end_ns[inside] - pauses.start_ns[inside]) / 1e6
    t, ms = downsample_minmax(t, ms, MAX_POINTS)
    return [EvidenceSeries(name=name, kind="events", unit="ms", counter=False, t_ns=tuple(int(x) for x in t),
                           values=tuple(float(x) for x in ms), spike=_number(longest), baseline=None, spread=None,
                           marks=())]


def queue_entries(ctx: SpikeContext, evidence: dict, cache: dict) -> list[EvidenceSeries]:
    """Offered load per second with its contrast; mean queue depth per second with the finding's levels."""
    inputs = ctx.inputs
    out = []
    rate = _cached(cache, "offered_rps", lambda: inputs.per_second(inputs.req.scheduled_ns)
                   + (inputs.per_second(inputs.external_arrivals_ns) if len(inputs.external_arrivals_ns) else 0.0))
    load = _grid_entry(ctx, "offered_rps", rate, "req/s", False, inputs.contrast_values(rate, ctx.start_ns, ctx.end_ns))
    if load is not None:
        out.append(load)
    queue = inputs.queue
    if len(queue):
        def mean_depth():
            bins = len(inputs.edges) - 1
            index = np.floor_divide(queue.t_ns - inputs.origin_ns, inputs.edges[1] - inputs.edges[0])
            ok = (index >= 0) & (index < bins) & np.isfinite(queue.depth)
            sums = np.bincount(index[ok], weights=queue.depth[ok], minlength=bins)
            counts = np.bincount(index[ok], minlength=bins)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        depth = _cached(cache, "queue.depth", mean_depth)
        marks = [EvidenceMark(_number(evidence.get(key)), label) for key, label in (
            ("normal_p99_queue_depth", "normal P99 depth"), ("median_slow_queue_depth", "median depth, slow requests"),
            ("queue_capacity", "capacity")) if _number(evidence.get(key)) is not None]
        made = _grid_entry(ctx, "queue.depth", depth, "requests", False, None, marks)
        if made is not None:
            out.append(made)
    return out


def generator_entries(ctx: SpikeContext, cache: dict) -> list[EvidenceSeries]:
    """Share of sends more than 1 ms late per second (with its contrast), and the generator's CPU."""
    inputs = ctx.inputs
    req = inputs.req
    sent = req.has_sent & np.isfinite(req.lateness_ms)

    def late_share():
        late = inputs.per_second(req.scheduled_ns[sent & (np.nan_to_num(req.lateness_ms) > LATE_MS)])
        total = inputs.per_second(req.scheduled_ns[sent])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, late / np.maximum(total, 1e-12), np.nan)
    share = _cached(cache, "late_share", late_share)
    out = []
    made = _grid_entry(ctx, "generator.late_share", share, "share", False,
                       inputs.contrast_values(share, ctx.start_ns, ctx.end_ns))
    if made is not None:
        out.append(made)
    name = "generator.cpu_percent"
    if inputs.signals.has(name):
        values = _cached(cache, name, lambda: inputs.binned(name))
        made = _grid_entry(ctx, name, values, "%", False, inputs.contrast(name, ctx.start_ns, ctx.end_ns, floor=1.0))
        if made is not None:
            out.append(made)
    return out


#: Per LLM cause: the server roles drawn, each with the evidence keys of its spike and baseline levels.
SERVER_ROLE_ENTRIES = {
    "kv_cache_pressure": (("kv_usage", "kv_usage_spike", "kv_usage_baseline"),
                          ("preemptions", "preemptions_per_s", "preemptions_baseline_per_s"),
                          ("waiting", None, None)),
    "prefill_interference": (("prompt_tokens", "prompt_tokens_per_s", "prompt_tokens_per_s_baseline"),
                             ("running", None, None)),
    "queue_saturation": (("waiting", "server_waiting", None),),
}


def server_entries(ctx: SpikeContext, kind: str, evidence: dict, cache: dict) -> list[EvidenceSeries]:
    """An LLM cause's server roles (:data:`SERVER_ROLE_ENTRIES`), each named ``server.<role>`` in the
    role's unit (analyzers/stages/presets.py ``ROLES``), with the levels the finding states. For
    ``prefill_interference`` without a ``prompt_tokens`` series, the prompt tokens sent per second
    (ours and the other traffic's) stand in for it, as in the detector."""
    out = []
    for role, spike_key, baseline_key in SERVER_ROLE_ENTRIES.get(kind, ()):
        values = _cached(cache, f"server.{role}", lambda role=role: ctx.inputs.server_role(role))
        if values is None and role == "prompt_tokens":
            values = _cached(cache, "server.prompt_tokens_sent", lambda: sum(ctx.inputs.prompt_tokens_per_second))
        if values is None:
            continue
        stated = evidence.get(spike_key) if spike_key else None
        if isinstance(stated, dict):  # a contrast (queue_saturation's server_waiting)
            found = stated
        else:
            found = {"spike": _number(stated), "baseline": _number(evidence.get(baseline_key)) if baseline_key else None}
        unit = ROLES[role].unit
        made = _grid_entry(ctx, f"server.{role}", values, unit, False, found)
        if made is not None:
            out.append(made)
    return out


def evidence_series(ctx: SpikeContext, causes: list[CauseFinding], cache: dict | None = None) -> tuple[EvidenceSeries, ...]:
    """The series the spike's top cause rests on (module docstring); none for ``unexplained``."""
    if not causes:
        return ()
    top = causes[0]
    kind, evidence = top.kind, top.evidence or {}
    cache = {} if cache is None else cache
    if kind == "gc":
        found = gc_entries(ctx, evidence)
    elif kind == "process_stall":
        found = stall_entries(ctx, evidence)
    elif kind == "queue_saturation":
        found = queue_entries(ctx, evidence, cache)
        found = found[:MAX_SERIES - 1] + server_entries(ctx, kind, evidence, cache) if evidence.get("server_waiting") else found
    elif kind in SERVER_ROLE_ENTRIES:
        found = server_entries(ctx, kind, evidence, cache)
    elif kind == "generator":
        found = generator_entries(ctx, cache)
    elif kind == "unexplained":
        found = []
    else:
        found = signal_entries(ctx, evidence, cache)
    return tuple(found[:MAX_SERIES])
