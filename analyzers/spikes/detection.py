"""P99 spikes: detection, per-spike stage decomposition, and ranked causes.

Detection is the tail-share test of :mod:`.tail_test`: windows holding
significantly (Bonferroni over all windows and scales, alpha 1%) and
materially more requests above the baseline P99 than the 1% a steady run
holds. It works from 0.5 to 20,000 requests/s and for incidents up to half
the run (benchmarks/detection_sweep.py, docs/analyzers/spikes.md), keeps a
steady run free of spikes with probability at least 99%, and calls a run with
too few samples after the warm-up too short to tell (:func:`shortness`).
Flagged detection windows of one episode (:meth:`~.tail_test.TailTestResult.episodes`)
are one spike with start, end, peak (its window with the highest slow share)
and excess (the spike's P99 over the baseline).

Per spike: the slow requests (scheduled inside it, latency above the
baseline P99) are compared with the normal requests (outside every spike)
stage by stage; the stage whose mean grew most is named with its numbers.
Causes come from a :class:`~.causes.DetectorRegistry` (``method="detectors"``,
``unexplained`` when none fires) or the BARO-style baseline ranker
(``method="baro"``, :mod:`.baro`). Cost: O(requests) per test iteration, plus
the detectors' work per spike.

Warm-up: the first seconds of a run are its warm-up (connections opening,
caches and lazily imported code filling, the generator's own first sends)
and are kept out of spike detection — out of the test and out of the
baseline P99. The rule (:func:`warmup_ns`): the first 5% of the load period,
at least 2 s and at most 10 s, never more than a quarter of the run, rounded
to whole display windows. Warm-up requests still count in every
whole-run number; ``spike_detection.warmup_s`` says how long it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.causes.protocol import DetectorRegistry, SpikeContext, available_inputs
from tailscope.analyzers.inputs.queues import QueuePoints
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.inputs.retained import RetainedView
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.spikes.evidence_series import evidence_series
from tailscope.analyzers.spikes.stalls import NS_PER_MS, StallRules, find_stalls, group, quiet_tail, stall_sentence
from tailscope.analyzers.spikes.tail_test import TailTestResult, TailTestRules, tail_test, too_short
from tailscope.analyzers.stages.decomposition import DEFAULT_STAGE_MAP, StageMatrix
from tailscope.analyzers.stages.representative_trace import representative_trace
from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank, nearest_rank_value

#: Cause-attribution methods ``find_spikes`` accepts.
METHODS = ("detectors", "baro")
#: Why a retained run's spike has no stage split (``decomposition.unavailable_reason``).
NO_RECORDS_KEPT = "no full records kept in this window (retention)"
#: Why a spike has no stage split when its slow or normal requests joined no span.
NO_SPANS_JOINED = "no spans joined to the slow or normal requests"


@dataclass(frozen=True)
class SpikeRules(TailTestRules):
    """The tail-share test's thresholds (:class:`~.tail_test.TailTestRules`) plus how windows merge."""

    merge_gap: int = 1
    #: Warm-up kept out of detection: this share of the load period, clamped to
    #: [warmup_min_s, warmup_max_s] and to warmup_max_share of the run (module docstring).
    warmup_share: float = 0.05
    warmup_min_s: float = 2.0
    warmup_max_s: float = 10.0
    warmup_max_share: float = 0.25


def warmup_ns(origin_ns: int, end_ns: int, window_ns: int, rules: SpikeRules = SpikeRules()) -> int:
    """Length (ns) of the warm-up left out of spike detection: ``warmup_share`` of the period,
    clamped to [``warmup_min_s``, ``warmup_max_s``] and to ``warmup_max_share`` of the period,
    rounded to whole windows of ``window_ns`` (at least one; still at most ``warmup_max_share``)."""
    duration = max(end_ns - origin_ns, 0)
    wanted = min(max(rules.warmup_share * duration, rules.warmup_min_s * 1e9), rules.warmup_max_s * 1e9)
    cap = rules.warmup_max_share * duration
    length = min(wanted, cap)
    if length <= 0 or window_ns <= 0:
        return 0
    whole = max(1, int(round(length / window_ns))) * window_ns
    return int(whole if whole <= cap else (int(cap) // window_ns) * window_ns)


def detect(req: RequestArrays, windows: dict[str, np.ndarray], rules: SpikeRules = SpikeRules(),
           retained: RetainedView | None = None) -> TailTestResult | None:
    """The tail-share test over a run's latency samples after the warm-up (:func:`warmup_ns`),
    on the window table's time range.

    A retained run (``retained``, its :func:`~.retained.retained_view`) is tested on its
    per-window latency histograms, which count every successful request, not on its
    records: those are complete only in the keep intervals and a 1–2 % sample elsewhere,
    so a sampled window holds a handful of records where the detection window was sized
    for 20, and one slow record among two passes a larger-scale group's member rule —
    a spike the exact records do not show (the window table of such a run comes from
    the same histograms, so both are on the harness's window grid)."""
    if retained is not None:
        time_ns, values_ms, counts = retained.latency_samples()
        return detect_series(time_ns, values_ms, windows, rules, weights=counts)
    return detect_series(req.scheduled_ns[req.in_latency], req.latency_ms[req.in_latency], windows, rules)


def detect_series(scheduled_ns: np.ndarray, values_ms: np.ndarray, windows: dict[str, np.ndarray],
                  rules: SpikeRules = SpikeRules(), weights: np.ndarray | None = None) -> TailTestResult | None:
    """The tail-share test over any per-request series in ms (latency, or an LLM request's
    TTFT or TPOT), each value placed at its request's scheduled send, after the warm-up, on
    the window table's time range. NaN values are left out. ``weights``: how many requests
    each value stands for (histogram counts, :func:`~.tail_test.tail_test`; None: one each).
    None without windows."""
    if len(windows["start_ns"]) == 0:
        return None
    origin, end = int(windows["start_ns"][0]), int(windows["end_ns"][-1])
    window_ns = int(windows["end_ns"][0] - windows["start_ns"][0])
    origin += warmup_ns(origin, end, window_ns, rules)
    mask = (scheduled_ns >= origin) & ~np.isnan(values_ms)
    return tail_test(scheduled_ns[mask], values_ms[mask], origin, end, window_ns, rules,
                     weights[mask] if weights is not None else None)


def shortness(req: RequestArrays, windows: dict[str, np.ndarray] | None, rules: SpikeRules = SpikeRules(),
              retained: RetainedView | None = None) -> dict | None:
    """Why the run is too short to tell whether its P99 spiked, or None when it is not (or has no
    windows): :func:`~.tail_test.too_short` of the latency samples after the warm-up, with the
    warm-up (``warmup_s``) and the load it takes in all (``enough_s`` + ``warmup_s``: ``load_s``)."""
    if windows is None or len(windows["start_ns"]) == 0:
        return None
    origin, end = int(windows["start_ns"][0]), int(windows["end_ns"][-1])
    warmup = warmup_ns(origin, end, int(windows["end_ns"][0] - windows["start_ns"][0]), rules)
    if retained is not None:
        time_ns, _, counts = retained.latency_samples()
        samples = int(counts[time_ns >= origin + warmup].sum())
    else:
        samples = int(np.count_nonzero(req.scheduled_ns[req.in_latency] >= origin + warmup))
    short = too_short(samples, end - origin - warmup, rules)
    if short is None:
        return None
    load = short["enough_s"] + warmup / 1e9 if short["enough_s"] is not None else None
    return {**short, "warmup_s": warmup / 1e9, "load_s": load}


def short_sentence(short: dict) -> str:
    """What :func:`shortness` found, in words: "too short to tell: …"."""
    rate = short["rate_per_s"]
    enough = (f"; at {rate:.3g} requests/s about {short['load_s']:.0f} s of load would be enough"
              if short["load_s"] is not None else "")
    return (f"too short to tell whether the P99 spiked: {short['samples']} latency samples after the "
            f"{short['warmup_s']:.0f}-s warm-up, the spike test needs {short['needed']}{enough}")


def detection_facts(result: TailTestResult | None, rules: SpikeRules, method: str,
                    load_start_ns: int | None = None, short: dict | None = None) -> dict:
    """The ``spike_detection`` section: how spikes were looked for, after which warm-up
    (``warmup_s``: from ``load_start_ns`` to the first detection window), against what baseline
    (``baseline_p99_ms`` is τ, the quiet samples' ``baseline_quantile``: 0.99 unless fewer than
    ``min_samples`` quiet samples; ``baseline_samples`` of them). ``short``: :func:`shortness`
    when the test did not run for that reason (``too_short``, else None)."""
    if result is None:
        return {"performed": False, "method": method, "detection_window_s": None, "baseline_p99_ms": None,
                "baseline_quantile": None, "baseline_samples": 0,
                "expected_slow_share": 1.0 - rules.tail_p, "alpha": rules.alpha, "tests": 0, "iterations": 0,
                "warmup_s": 0.0, "too_short": short}
    warmup = (result.origin_ns - load_start_ns) / 1e9 if load_start_ns is not None else 0.0
    return {"performed": True, "method": method, "detection_window_s": result.window_ns / 1e9,
            "baseline_p99_ms": result.threshold_ms, "baseline_quantile": result.quantile,
            "baseline_samples": result.baseline_samples, "expected_slow_share": result.expected_share,
            "alpha": rules.alpha, "tests": result.tests, "iterations": result.iterations,
            "warmup_s": max(warmup, 0.0), "too_short": None}


def _mean_p50(values: np.ndarray) -> dict:
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return {"mean_ms": None, "p50_ms": None, "count": 0}
    return {"mean_ms": float(values.mean()),
            "p50_ms": float(np.quantile(values, 0.5, method="inverted_cdf")), "count": int(len(values))}


def matrix_rows(matrix: StageMatrix, n_requests: int) -> np.ndarray:
    """Stage-matrix row of every request (-1: not joined)."""
    row_of = np.full(n_requests, -1, dtype=np.int64)
    row_of[matrix.request_index] = np.arange(len(matrix.request_index))
    return row_of


def stage_side(rows: np.ndarray, matrix: StageMatrix) -> dict[str, dict]:
    """``{stage: {"mean_ms", "p50_ms", "count"}}`` over these stage-matrix rows."""
    return {stage: _mean_p50(matrix.ms[rows, j]) for j, stage in enumerate(matrix.stages)}


def joined_rows(index: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Stage-matrix rows of the joined requests among ``index``."""
    rows = row_of[index]
    return rows[rows >= 0]


def decompose(slow_index: np.ndarray, normal_index: np.ndarray, matrix: StageMatrix, n_requests: int,
              row_of: np.ndarray | None = None, normal: dict[str, dict] | None = None) -> dict:
    """Stage means/medians of slow vs normal requests and the stage that grew most.

    ``row_of`` (:func:`matrix_rows`) and ``normal`` (:func:`stage_side` of the normal
    requests' rows) can be passed when decomposing several spikes of a run: every spike
    shares one normal set, so its statistics (a pass over nearly every request) are
    computed once."""
    if row_of is None:
        row_of = matrix_rows(matrix, n_requests)
    slow_rows = joined_rows(slow_index, row_of)
    normal_rows = joined_rows(normal_index, row_of)
    result = {"slow_requests": int(len(slow_index)), "joined_slow_requests": int(len(slow_rows)),
              "normal_requests": int(len(normal_index)), "joined_normal_requests": int(len(normal_rows)),
              "stages": {}, "dominant_stage": None, "summary": None, "available": True,
              "unavailable_reason": None}
    if len(slow_rows) == 0 or len(normal_rows) == 0:
        result.update(available=False, unavailable_reason=NO_SPANS_JOINED,
                      summary=f"{NO_SPANS_JOINED}; no stage decomposition")
        return result
    slow_side = stage_side(slow_rows, matrix)
    normal_side = normal if normal is not None else stage_side(normal_rows, matrix)
    for stage in matrix.stages:
        slow, normal = slow_side[stage], normal_side[stage]
        growth = (slow["mean_ms"] - normal["mean_ms"]) if slow["count"] and normal["count"] else None
        result["stages"][stage] = {"slow": slow, "normal": normal, "growth_ms": growth}
    candidates = {s: v["growth_ms"] for s, v in result["stages"].items()
                  if s != "server" and v["growth_ms"] is not None}
    if candidates:
        dominant = max(candidates, key=candidates.get)
        entry = result["stages"][dominant]
        result["dominant_stage"] = dominant
        result["summary"] = (f"{dominant} grew most: mean {entry['normal']['mean_ms']:.1f} ms → "
                             f"{entry['slow']['mean_ms']:.1f} ms (+{entry['growth_ms']:.1f} ms) in "
                             f"{len(slow_rows)} slow requests vs {len(normal_rows)} normal requests")
    return result


def find_spikes(req: RequestArrays, windows: dict[str, np.ndarray], matrix: StageMatrix, run,
                registry: DetectorRegistry | None = None, rules: SpikeRules = SpikeRules(),
                stage_map=None, *, detection: TailTestResult | None = None, method: str = "detectors",
                span_request: np.ndarray | None = None, queue: QueuePoints | None = None,
                retained: RetainedView | None = None) -> list[dict]:
    """The spikes of a run, each with decomposition, causes and a representative slow trace
    (:mod:`.traces`; ``stage_map`` names the stage of each span, default the span-name map).

    ``retained``: the run's :func:`~.retained.retained_view` when a retention policy kept its
    records selectively. Each spike's ``p99_ms`` and ``requests`` then come from the per-window
    histograms, which count every request (``percentiles_from: "histograms"``), and a spike
    whose windows kept no slow record gets no stage split (``decomposition.available`` false,
    :data:`NO_RECORDS_KEPT`) instead of a crash: a live keeper may not have kept a window
    in full that the histograms later show to be a spike.

    ``detection`` is :func:`detect`'s result when the caller already has it; ``method`` is
    ``"detectors"`` (the registry; default :func:`~.detectors.default_registry`) or ``"baro"``;
    ``span_request`` is :func:`~.stages.request_of_span` of ``run.spans`` when the caller has it
    (the detectors and the representative trace then need no span join of their own), ``queue``
    the run's :func:`~.queues.queue_points` when the caller read them.
    """
    if method not in METHODS:
        raise ValueError(f"unknown cause method {method!r}; expected one of {', '.join(METHODS)}")
    result = detection if detection is not None else detect(req, windows, rules)
    if result is None:
        return []
    runs = result.episodes(rules.merge_gap)
    end_ns = int(windows["end_ns"][-1])
    stalls = recurring_stalls(req, result, end_ns, runs) if retained is None else None
    if stalls is not None:  # the short spikes the stalls explain are shown in their group
        runs = [run_ for i, run_ in enumerate(runs) if i not in stalls[2]]
    bounds = [result.window_bounds(first, last) for first, last in runs]
    in_any = np.zeros(req.n, dtype=bool)
    for lo, hi in bounds:
        in_any |= (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    if not runs and stalls is None:
        return []
    if registry is None:
        from tailscope.analyzers.causes.registry import default_registry
        registry = default_registry()
    in_stall = stalls[1] if stalls is not None else np.zeros(req.n, dtype=bool)
    normal_index = np.flatnonzero(req.is_ok & ~in_any & ~in_stall)
    tau = result.threshold_ms
    inputs = RunInputs(run, req, matrix, int(windows["start_ns"][0]), end_ns, tau, bounds,
                       span_request, queue)
    available = available_inputs(run)
    row_of = matrix_rows(matrix, req.n)
    normal = stage_side(joined_rows(normal_index, row_of), matrix)
    spikes, series_cache = [], {}
    for (first, last), (lo, hi) in zip(runs, bounds):
        spikes.append(_spike_record(req, result, first, last, lo, hi, tau, in_any, normal_index, matrix, run,
                                    inputs, available, registry, method, stage_map, row_of, normal, series_cache,
                                    retained))
    if stalls is not None:
        spikes.append(_stall_record(req, result, stalls, normal_index, matrix, run, inputs, available, registry,
                                    method, stage_map, row_of, normal))
        spikes.sort(key=lambda spike: spike["start_ns"])
    return spikes


def recurring_stalls(req: RequestArrays, result: TailTestResult, end_ns: int, runs: list[tuple[int, int]],
                     rules: StallRules = StallRules()) -> tuple[dict, np.ndarray, list[int]] | None:
    """Recurring stalls (:func:`~.stalls.find_stalls`) among the latency samples scheduled in
    [``result.origin_ns``, end_ns), with the window spikes they explain: a spike of at most
    ``MAX_STALL_SPIKE_WINDOWS`` detection windows holding exactly one stall is that stall (its index
    in ``runs`` is returned, and the spike is shown in the group, not on its own); the stalls inside
    a longer spike, or several inside one spike (a burst of pauses: GC pressure), belong to that
    spike. (summary, bool per request: completed in a grouped stall, indices of the absorbed
    spikes), or None when fewer than ``min_stalls`` remain."""
    chosen = np.flatnonzero(req.in_latency & (req.scheduled_ns >= result.origin_ns) & (req.scheduled_ns < end_ns))
    found = find_stalls(req.scheduled_ns[chosen], req.latency_ms[chosen], result.origin_ns, end_ns, rules)
    if found is None:
        return None
    def owner_of(stall: dict) -> int | None:
        for i, (first, last) in enumerate(runs):
            lo, hi = result.window_bounds(first, last)
            if lo <= stall["end_ns"] < hi or lo <= stall["start_ns"] < hi:
                return i
        return None

    owners = [owner_of(stall) for stall in found["stalls"]]
    held = {i: owners.count(i) for i in set(owners) if i is not None}
    # a short spike that is one stall joins the group; one holding several pauses is a burst and keeps them
    absorbed = {i for i, count in held.items() if count == 1
                and runs[i][1] - runs[i][0] + 1 <= MAX_STALL_SPIKE_WINDOWS}
    kept = [stall for stall, owner in zip(found["stalls"], owners) if owner is None or owner in absorbed]
    sites = len(kept)
    grouped = group(kept, len(chosen), found["median_ms"], found["gap_ms"], rules)
    if grouped is None or sites < rules.min_stalls:
        return None
    on_beat = _spikes_on_the_beat(req, result, runs, chosen, grouped, set(held) | absorbed, rules)
    if on_beat:
        absorbed |= set(on_beat)
        kept = sorted(kept + list(on_beat.values()), key=lambda stall: stall["start_ns"])
        grouped = group(kept, len(chosen), found["median_ms"], found["gap_ms"], rules)
    in_stall = np.zeros(req.n, dtype=bool)
    in_stall[chosen[grouped["request_mask"]]] = True
    outside = np.ones(len(chosen), dtype=bool)
    for i in absorbed:
        lo, hi = result.window_bounds(*runs[i])
        outside &= ~((req.scheduled_ns[chosen] >= lo) & (req.scheduled_ns[chosen] < hi))
    for i, (first, last) in enumerate(runs):  # the quiet time is outside every stall and every other spike
        if i not in absorbed:
            lo, hi = result.window_bounds(first, last)
            outside &= ~((req.scheduled_ns[chosen] >= lo) & (req.scheduled_ns[chosen] < hi))
    latency = req.latency_ms[chosen]
    p99, quiet = quiet_tail(latency, grouped["request_mask"] | ~outside)
    return ({**grouped, "p99_ms": p99, "quiet_p99_ms": quiet, "tested_requests": int(len(chosen))},
            in_stall, sorted(absorbed))


#: A window spike this short (detection windows) holding a stall is shown as one of the recurring stalls.
MAX_STALL_SPIKE_WINDOWS = 2
#: A short spike whose bounds come within this share of the period of a stall the rhythm predicts
#: is one of the stalls (:func:`_spikes_on_the_beat`).
BEAT_TOLERANCE = 0.15


def _spikes_on_the_beat(req, result, runs, chosen, grouped, taken, rules) -> dict[int, dict]:
    """{spike index: stall} for the short spikes (at most ``MAX_STALL_SPIKE_WINDOWS`` windows, holding
    no stall the completion test found) that lie where a regular rhythm puts a stall: the nearest
    grouped stall's start plus a whole number of periods falls within ``BEAT_TOLERANCE`` × period of
    the spike. The window test found each significant on its own; the rhythm says it is one of the
    pauses (its requests are too few for the completion test: two raised completions, seen on the
    real FastAPI service stopped 150 ms every 4 s). The stall is the spike's raised requests."""
    if not grouped["regular"] or grouped["period_s"] <= 0:
        return {}
    period_ns = grouped["period_s"] * 1e9
    starts = np.array([st["start_ns"] for st in grouped["stalls"]], dtype=np.float64)
    latency, times = req.latency_ms[chosen], req.scheduled_ns[chosen]
    raised = latency > nearest_rank_value(latency, rules.raised_quantile) + grouped["median_ms"]
    out = {}
    for i, (first, last) in enumerate(runs):
        if i in taken or last - first + 1 > MAX_STALL_SPIKE_WINDOWS:
            continue
        lo, hi = result.window_bounds(first, last)
        nearest = starts[np.argmin(np.abs(starts - (lo + hi) / 2))]
        predicted = nearest + round(((lo + hi) / 2 - nearest) / period_ns) * period_ns
        members = np.flatnonzero(raised & (times >= lo) & (times < hi))
        if len(members) == 0 or not (lo - BEAT_TOLERANCE * period_ns <= predicted <= hi + BEAT_TOLERANCE * period_ns):
            continue
        done = times[members] + (latency[members] * NS_PER_MS).astype(np.int64)
        pause = float(latency[members].max() - grouped["median_ms"])
        out[i] = {"start_ns": int(done.max()) - int(pause * NS_PER_MS), "end_ns": int(done.max()),
                  "requests": int(len(members)), "pause_ms": pause, "members": members,
                  "p_value": min(1.0, result.tests * result.tail_p_value(int(result.slow[first:last + 1].sum()),
                                                                         int(result.n[first:last + 1].sum())))}
    return out


#: Stall starts kept in a spike's ``recurring_stalls.starts_ns`` (the count says how many there were).
MAX_STALL_STARTS = 500


def _stall_record(req, result, stalls, normal_index, matrix, run, inputs, available, registry, method,
                  stage_map, row_of, normal) -> dict:
    """Recurring stalls as one spike record (``recurring_stalls`` set): from the first stall's start to
    the last one's end; P99 the tested samples', baseline the quiet time's P99 (outside every stall and
    spike); causes from the detectors on the stall requests, in the largest stall's interval."""
    found, in_stall, _ = stalls
    slow_index = np.flatnonzero(in_stall & req.is_ok)
    decomposition = decompose(slow_index, normal_index, matrix, req.n, row_of, normal)
    biggest = max(found["stalls"], key=lambda stall: stall["requests"])
    lo, hi = found["stalls"][0]["start_ns"], found["stalls"][-1]["end_ns"]
    peak = (biggest["start_ns"] + biggest["end_ns"]) // 2
    ctx = SpikeContext(run, biggest["start_ns"], biggest["end_ns"], peak, slow_index, normal_index, decomposition,
                       available, inputs, found["quiet_p99_ms"])
    if method == "baro":
        from tailscope.analyzers.causes.baro import baro_causes
        causes = baro_causes(ctx)
    else:
        causes = registry.attribute(ctx)
    tested = found["tested_requests"]
    summary = stall_sentence(found, causes[0]["kind"] if causes and causes[0]["kind"] != "unexplained" else None)
    return {
        "start_ns": int(lo), "end_ns": int(hi), "peak_ns": int(peak),
        "p99_ms": found["p99_ms"], "p99_claimed": tested >= min_samples_for_claim(0.99, 0),
        "percentiles_from": "records", "records_kept": tested,
        "baseline_p99_ms": found["quiet_p99_ms"], "baseline_quantile": 0.99,
        "excess_ms": found["p99_ms"] - found["quiet_p99_ms"],
        "slow_requests": found["requests"], "slow_share": found["requests"] / tested if tested else 0.0,
        "expected_slow_share": result.expected_share, "p_value": found["p_value"],
        "peak_window_slow_share": 1.0, "requests": tested, "windows": found["count"],
        "recurring_stalls": {"count": found["count"], "period_s": found["period_s"],
                             "interval_cv": found["interval_cv"], "regular": found["regular"],
                             "pause_ms": found["pause_ms"], "requests": found["requests"],
                             "quiet_p99_ms": found["quiet_p99_ms"], "summary": summary,
                             "starts_ns": [int(st["start_ns"]) for st in found["stalls"][:MAX_STALL_STARTS]]},
        "decomposition": decomposition, "causes": causes,
        "evidence_series": evidence_series(ctx, causes, {}),
        "representative_trace": representative_trace(req, slow_index, run.spans, stage_map or DEFAULT_STAGE_MAP,
                                                     inputs.span_request),
    }


def spike_latency(req: RequestArrays, lo: int, hi: int, retained: RetainedView | None):
    """(ascending latency sample in ms of the successful requests scheduled in [lo, hi), requests
    scheduled there, where both came from): the per-window histograms of a retained run
    (exact counts, values ±1 %), else the records. The sample supports ``len`` and indexing.

    Never empty for a spike :func:`detect` flagged: its windows hold slow samples in the
    source the test read (the histograms of a retained run, else the records), and this
    reads the same source on the same window starts. In a retained run, a window whose kept
    records outnumber its histograms' requests (the last histogram rows cut short by a kill)
    is read from the records."""
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    records = np.sort(req.latency_ms[inside & req.in_latency])
    if retained is not None:
        view, requests = retained.spike_window(lo, hi)
        # A kill can cut the last histogram rows short while the records of that second reached
        # the disk: the source holding more of the window's requests is the truer one.
        if int(inside.sum()) <= requests or not len(records):
            return view, requests, "histograms"
    return records, int(inside.sum()), "records"


def _spike_record(req, result, first, last, lo, hi, tau, in_any, normal_index, matrix, run, inputs,
                  available, registry, method, stage_map, row_of, normal, series_cache=None,
                  retained: RetainedView | None = None) -> dict:
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    latency, requests, source = spike_latency(req, lo, hi, retained)
    p99 = float(latency[nearest_rank(len(latency), 0.99) - 1])  # never empty: see spike_latency
    n_slow, n_all = int(result.slow[first:last + 1].sum()), int(result.n[first:last + 1].sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(result.n[first:last + 1] > 0, result.slow[first:last + 1] / np.maximum(result.n[first:last + 1], 1), 0)
    peak = first + int(np.argmax(shares))
    peak_lo, peak_hi = result.window_bounds(peak, peak)
    slow_index = np.flatnonzero(inside & req.is_ok & (req.latency_ms > tau))
    decomposition = decompose(slow_index, normal_index, matrix, req.n, row_of, normal)
    if retained is not None and len(slow_index) == 0:
        decomposition = {**decomposition, "available": False, "unavailable_reason": NO_RECORDS_KEPT,
                         "summary": f"stage split unavailable: {NO_RECORDS_KEPT}"}
    elif retained is not None and len(slow_index) < n_slow and decomposition["available"]:
        decomposition = {**decomposition, "summary": (
            f"{decomposition['summary']} (the {len(slow_index)} of {n_slow} slow requests whose "
            "records retention kept)")}
    ctx = SpikeContext(run, lo, hi, (peak_lo + peak_hi) // 2, slow_index, normal_index, decomposition, available,
                       inputs, tau)
    if method == "baro":
        from tailscope.analyzers.causes.baro import baro_causes
        causes = baro_causes(ctx)
    else:
        causes = registry.attribute(ctx)
    return {
        "start_ns": lo, "end_ns": hi, "peak_ns": (peak_lo + peak_hi) // 2,
        "p99_ms": p99, "p99_claimed": len(latency) >= min_samples_for_claim(0.99, 0),
        "percentiles_from": source, "records_kept": int(inside.sum()),
        "baseline_p99_ms": tau, "baseline_quantile": result.quantile, "excess_ms": p99 - tau,
        "slow_requests": n_slow, "slow_share": n_slow / n_all if n_all else 0.0,
        "expected_slow_share": result.expected_share,
        "p_value": result.tail_p_value(n_slow, n_all),
        "peak_window_slow_share": float(shares[peak - first]),
        "requests": requests, "windows": last - first + 1,
        "decomposition": decomposition, "causes": causes,
        "evidence_series": evidence_series(ctx, causes, series_cache),
        "representative_trace": representative_trace(req, slow_index, run.spans, stage_map or DEFAULT_STAGE_MAP,
                                                     inputs.span_request),
    }
