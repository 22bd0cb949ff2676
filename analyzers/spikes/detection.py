"""P99 spikes: detection, per-spike stage decomposition, and ranked causes.

Detection is the tail-share test of :mod:`.tail_share`: windows holding
significantly (Bonferroni over all windows and scales, alpha 1%) and
materially more requests above the baseline P99 than the 1% a steady run
holds. It works from 0.5 to 20,000 requests/s and for incidents up to half
the run (benchmarks/detection_sweep.py, docs/analyzers/spikes.md), keeps a
steady run free of spikes with probability at least 99%, and calls a run with
too few samples after the warm-up too short to tell (:func:`shortness`).
Flagged detection windows of one episode (:meth:`~.tail_share.TailTestResult.episodes`)
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

from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from tailscope.analysis_model.spikes import (
    AnswerLength,
    Decomposition,
    LongerAnswer,
    MeanP50,
    RecurringStalls,
    Spike,
    SpikeDetection,
    StageGrowth,
    TooShort,
)
from tailscope.analyzers.causes.protocol import DetectorRegistry, SpikeContext, available_inputs
from tailscope.analyzers.inputs.queues import QueuePoints
from tailscope.analyzers.inputs.records import RequestArrays, int_column
from tailscope.analyzers.inputs.retained import RetainedView
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.spikes.evidence_series import evidence_series
from tailscope.analyzers.spikes.stalls import NS_PER_MS, StallRules, find_stalls, group, quiet_tail, stall_sentence
from tailscope.analyzers.spikes.tail_share import TailTestResult, TailTestRules, tail_test, too_short
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
    """The tail-share test's thresholds (:class:`~.tail_share.TailTestRules`) plus how windows merge."""

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
           retained: RetainedView | None = None, per_length: np.ndarray | None = None) -> TailTestResult | None:
    """The tail-share test over a run's latency samples after the warm-up (:func:`warmup_ns`),
    on the window table's time range.

    A retained run (``retained``, its :func:`~.retained.retained_view`) is tested on its
    per-window latency histograms, which count every successful request, not on its
    records: those are complete only in the keep intervals and a 1–2 % sample elsewhere,
    so a sampled window holds a handful of records where the detection window was sized
    for 20, and one slow record among two passes a larger-scale group's member rule —
    a spike the exact records do not show (the window table of such a run comes from
    the same histograms, so both are on the harness's window grid).

    ``per_length`` (:func:`length_adjusted_ms`, an LLM run whose answers differ in length): the
    test runs on each request's e2e latency adjusted for its answer's length instead (ms at the
    run's median answer length; requests without an output-token count are left out), so a burst
    of long answers is not a spike and a slowdown per token is."""
    if retained is not None:
        time_ns, values_ms, counts = retained.latency_samples()
        return detect_series(time_ns, values_ms, windows, rules, weights=counts)
    if per_length is not None:
        return detect_series(req.scheduled_ns[req.in_latency], per_length[req.in_latency], windows, rules)
    return detect_series(req.scheduled_ns[req.in_latency], req.latency_ms[req.in_latency], windows, rules)


#: Output-token spread (coefficient of variation) from which an LLM run's e2e latency is judged for
#: its answer's length: answers of about one length leave e2e latency comparable across requests.
OUTPUT_TOKENS_MIN_CV = 0.25
#: Share of the latency samples that must have an output-token count for the length-adjusted test.
OUTPUT_TOKENS_MIN_SHARE = 0.5
#: Most requests the e2e-vs-length line is fitted on (Theil–Sen, O(k²)).
MAX_FIT_POINTS = 1000


def length_adjusted_ms(req: RequestArrays, output_tokens: np.ndarray | None) -> np.ndarray | None:
    """Each request's e2e latency adjusted for its answer's length (ms; NaN without at least one
    output token), or None when the e2e test should run on latency itself: no token counts (not an
    LLM run), fewer than ``OUTPUT_TOKENS_MIN_SHARE`` of the latency samples with one, answers of
    about one length (output tokens' coefficient of variation below ``OUTPUT_TOKENS_MIN_CV``), or
    e2e latency that does not grow with the length.

    The run's e2e-vs-length line ``e(n) = a + b·n`` (Theil–Sen over at most ``MAX_FIT_POINTS``
    successful requests: robust to an incident holding up to about a quarter of them) gives each
    request its expected e2e for its ``n`` output tokens; the adjusted value is ``e2e / e(n) ·
    e(median n)``: what the request would have taken at the median answer length. A long answer
    then weighs as a typical one, a slower decode raises it in proportion, and a queue delay
    raises it too — dividing e2e by ``n`` alone would not do the last: for a short answer the
    first token's wait dominates, so the quotient's tail is the short answers' and a queue burst
    disappears in it (the LLM lab's overload went unseen). ``e(n)`` is floored at a tenth of
    ``e(median n)``."""
    if output_tokens is None or not req.in_latency.any():
        return None
    tokens = np.where(np.isfinite(output_tokens) & (output_tokens >= 1), output_tokens, np.nan)
    counted = tokens[req.in_latency]
    counted = counted[np.isfinite(counted)]
    if len(counted) < OUTPUT_TOKENS_MIN_SHARE * int(req.in_latency.sum()) or counted.mean() <= 0:
        return None
    if float(counted.std() / counted.mean()) < OUTPUT_TOKENS_MIN_CV:
        return None
    fit = np.flatnonzero(req.is_ok & np.isfinite(tokens) & np.isfinite(req.latency_ms))
    if len(fit) > MAX_FIT_POINTS:
        fit = fit[np.linspace(0, len(fit) - 1, MAX_FIT_POINTS).round().astype(np.int64)]
    slope, intercept, _, _ = stats.theilslopes(req.latency_ms[fit], tokens[fit])
    if not slope > 0:
        return None  # e2e does not grow with the answer's length: judged as is
    typical = float(np.median(tokens[fit]))
    expected = np.maximum(intercept + slope * tokens, 0.1 * (intercept + slope * typical))
    return req.latency_ms / expected * (intercept + slope * typical)


def detect_series(scheduled_ns: np.ndarray, values_ms: np.ndarray, windows: dict[str, np.ndarray],
                  rules: SpikeRules = SpikeRules(), weights: np.ndarray | None = None) -> TailTestResult | None:
    """The tail-share test over any per-request series in ms (latency, or an LLM request's
    TTFT or TPOT), each value placed at its request's scheduled send, after the warm-up, on
    the window table's time range. NaN values are left out. ``weights``: how many requests
    each value stands for (histogram counts, :func:`~.tail_share.tail_test`; None: one each).
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
              retained: RetainedView | None = None) -> TooShort | None:
    """Why the run is too short to tell whether its P99 spiked, or None when it is not (or has no
    windows): :func:`~.tail_share.too_short` of the latency samples after the warm-up, with the
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
    return TooShort(samples=short["samples"], needed=short["needed"], rate_per_s=short["rate_per_s"],
                    enough_s=short["enough_s"], warmup_s=warmup / 1e9, load_s=load)


def short_sentence(short: TooShort) -> str:
    """What :func:`shortness` found, in words: "too short to tell: …"."""
    enough = (f"; at {short.rate_per_s:.3g} requests/s about {short.load_s:.0f} s of load would be enough"
              if short.load_s is not None else "")
    return (f"too short to tell whether the P99 spiked: {short.samples} latency samples after the "
            f"{short.warmup_s:.0f}-s warm-up, the spike test needs {short.needed}{enough}")


def detection_facts(result: TailTestResult | None, rules: SpikeRules, method: str,
                    load_start_ns: int | None = None, short: TooShort | None = None,
                    judged_on: str = "latency", longer: list[LongerAnswer] | None = None) -> SpikeDetection:
    """The ``spike_detection`` section: how spikes were looked for, after which warm-up
    (``warmup_s``: from ``load_start_ns`` to the first detection window), against what baseline
    (``baseline_p99_ms`` is τ, the quiet samples' ``baseline_quantile``: 0.99 unless fewer than
    ``min_samples`` quiet samples; ``baseline_samples`` of them). ``short``: :func:`shortness`
    when the test did not run for that reason (``too_short``, else None). ``judged_on``:
    ``"latency"``, or ``"e2e_for_answer_length"`` for an LLM run whose answers differ in length
    (``baseline_p99_ms`` is then τ of the length-adjusted e2e, :func:`length_adjusted_ms`);
    ``longer``: :func:`longer_answers`."""
    if result is None:
        return SpikeDetection(performed=False, method=method, detection_window_s=None, baseline_p99_ms=None,
                              baseline_quantile=None, baseline_samples=0, expected_slow_share=1.0 - rules.tail_p,
                              alpha=rules.alpha, tests=0, iterations=0, warmup_s=0.0, too_short=short,
                              judged_on=judged_on, longer_answers=tuple(longer or ()))
    warmup = (result.origin_ns - load_start_ns) / 1e9 if load_start_ns is not None else 0.0
    return SpikeDetection(performed=True, method=method, detection_window_s=result.window_ns / 1e9,
                          baseline_p99_ms=result.threshold_ms, baseline_quantile=result.quantile,
                          baseline_samples=result.baseline_samples, expected_slow_share=result.expected_share,
                          alpha=rules.alpha, tests=result.tests, iterations=result.iterations,
                          warmup_s=max(warmup, 0.0), too_short=None, judged_on=judged_on,
                          longer_answers=tuple(longer or ()))


def _mean_p50(values: np.ndarray) -> MeanP50:
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return MeanP50(None, None, 0)
    return MeanP50(float(values.mean()), float(np.quantile(values, 0.5, method="inverted_cdf")), int(len(values)))


def matrix_rows(matrix: StageMatrix, n_requests: int) -> np.ndarray:
    """Stage-matrix row of every request (-1: not joined)."""
    row_of = np.full(n_requests, -1, dtype=np.int64)
    row_of[matrix.request_index] = np.arange(len(matrix.request_index))
    return row_of


def stage_side(rows: np.ndarray, matrix: StageMatrix) -> dict[str, MeanP50]:
    """Each stage's mean and median (ms) over these stage-matrix rows."""
    return {stage: _mean_p50(matrix.ms[rows, j]) for j, stage in enumerate(matrix.stages)}


def joined_rows(index: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Stage-matrix rows of the joined requests among ``index``."""
    rows = row_of[index]
    return rows[rows >= 0]


def decompose(slow_index: np.ndarray, normal_index: np.ndarray, matrix: StageMatrix, n_requests: int,
              row_of: np.ndarray | None = None, normal: dict[str, MeanP50] | None = None) -> Decomposition:
    """Stage means/medians of slow vs normal requests and the stage that grew most.

    ``row_of`` (:func:`matrix_rows`) and ``normal`` (:func:`stage_side` of the normal
    requests' rows) can be passed when decomposing several spikes of a run: every spike
    shares one normal set, so its statistics (a pass over nearly every request) are
    computed once."""
    if row_of is None:
        row_of = matrix_rows(matrix, n_requests)
    slow_rows = joined_rows(slow_index, row_of)
    normal_rows = joined_rows(normal_index, row_of)
    counts = {"slow_requests": int(len(slow_index)), "joined_slow_requests": int(len(slow_rows)),
              "normal_requests": int(len(normal_index)), "joined_normal_requests": int(len(normal_rows))}
    if len(slow_rows) == 0 or len(normal_rows) == 0:
        return Decomposition(**counts, stages={}, dominant_stage=None,
                             summary=f"{NO_SPANS_JOINED}; no stage decomposition", available=False,
                             unavailable_reason=NO_SPANS_JOINED)
    slow_side = stage_side(slow_rows, matrix)
    normal_side = normal if normal is not None else stage_side(normal_rows, matrix)
    stages = {}
    for stage in matrix.stages:
        slow, normal = slow_side[stage], normal_side[stage]
        growth = (slow.mean_ms - normal.mean_ms) if slow.count and normal.count else None
        stages[stage] = StageGrowth(slow, normal, growth)
    candidates = {s: v.growth_ms for s, v in stages.items() if s != "server" and v.growth_ms is not None}
    dominant, summary = None, None
    if candidates:
        dominant = max(candidates, key=candidates.get)
        entry = stages[dominant]
        summary = (f"{dominant} grew most: mean {entry.normal.mean_ms:.1f} ms → "
                   f"{entry.slow.mean_ms:.1f} ms (+{entry.growth_ms:.1f} ms) in "
                   f"{len(slow_rows)} slow requests vs {len(normal_rows)} normal requests")
    return Decomposition(**counts, stages=stages, dominant_stage=dominant, summary=summary, available=True,
                         unavailable_reason=None)


def find_spikes(req: RequestArrays, windows: dict[str, np.ndarray], matrix: StageMatrix, run,
                registry: DetectorRegistry | None = None, rules: SpikeRules = SpikeRules(),
                stage_map=None, *, detection: TailTestResult | None = None, method: str = "detectors",
                span_request: np.ndarray | None = None, queue: QueuePoints | None = None,
                retained: RetainedView | None = None, per_length: np.ndarray | None = None,
                output_tokens: np.ndarray | None = None, e2e_tau: float | None = None) -> list[Spike]:
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

    ``per_length`` (:func:`length_adjusted_ms`, with the run's ``output_tokens``): the test ran on
    e2e latency adjusted for answer length (:func:`detect`); which windows are spikes follows that
    test, while a spike's slow requests — the ones its causes are judged on — are, as in any run,
    those above the plain e2e test's τ (``e2e_tau``), or, when none of the spike's requests is
    (answers longer elsewhere raised that τ), those whose adjusted and plain e2e are both above the
    adjusted τ; its ``baseline_p99_ms`` is the normal requests' e2e P99
    (P99 and baseline stay plain e2e; ``excess_ms`` their difference, which answers longer outside
    the spike can make negative), and each spike gains ``answer_length`` (:func:`length_judgement`).
    """
    if method not in METHODS:
        raise ValueError(f"unknown cause method {method!r}; expected one of {', '.join(METHODS)}")
    result = detection if detection is not None else detect(req, windows, rules, per_length=per_length)
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
        record = _spike_record(req, result, first, last, lo, hi, tau, in_any, normal_index, matrix, run,
                               inputs, available, registry, method, stage_map, row_of, normal, series_cache,
                               retained, per_length, e2e_tau)
        if per_length is not None:
            inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi) & req.is_ok
            judged = length_judgement(per_length, output_tokens, inside, normal_index, tau)
            baseline = e2e_p99(req, normal_index)
            record = replace(record, baseline_p99_ms=baseline,
                             excess_ms=record.p99_ms - baseline if baseline is not None else None,
                             answer_length=judged)
        spikes.append(record)
    if stalls is not None:
        spikes.append(_stall_record(req, result, stalls, normal_index, matrix, run, inputs, available, registry,
                                    method, stage_map, row_of, normal))
        spikes.sort(key=lambda spike: spike.start_ns)
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
                  stage_map, row_of, normal) -> Spike:
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
    summary = stall_sentence(found, causes[0].kind if causes and causes[0].kind != "unexplained" else None)
    return Spike(
        start_ns=int(lo), end_ns=int(hi), peak_ns=int(peak),
        p99_ms=found["p99_ms"], p99_claimed=tested >= min_samples_for_claim(0.99, 0),
        percentiles_from="records", records_kept=tested,
        baseline_p99_ms=found["quiet_p99_ms"], baseline_quantile=0.99,
        excess_ms=found["p99_ms"] - found["quiet_p99_ms"],
        slow_requests=found["requests"], slow_share=found["requests"] / tested if tested else 0.0,
        expected_slow_share=result.expected_share, p_value=found["p_value"],
        peak_window_slow_share=1.0, requests=tested, windows=found["count"],
        recurring_stalls=RecurringStalls(
            count=found["count"], period_s=found["period_s"], interval_cv=found["interval_cv"],
            regular=found["regular"], pause_ms=found["pause_ms"], requests=found["requests"],
            quiet_p99_ms=found["quiet_p99_ms"], summary=summary,
            starts_ns=tuple(int(st["start_ns"]) for st in found["stalls"][:MAX_STALL_STARTS]),
            # the causes' evidence is read in this stall, not over the whole stretch
            evidence_ns=(int(biggest["start_ns"]), int(biggest["end_ns"]))),
        decomposition=decomposition, causes=tuple(causes),
        evidence_series=evidence_series(ctx, causes, {}),
        representative_trace=representative_trace(req, slow_index, run.spans, stage_map or DEFAULT_STAGE_MAP,
                                                  inputs.span_request),
    )


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


def e2e_p99(req: RequestArrays, index: np.ndarray) -> float | None:
    """Nearest-rank e2e latency P99 (ms) of these requests; None without any."""
    latency = req.latency_ms[index]
    latency = latency[np.isfinite(latency)]
    return nearest_rank_value(latency, 0.99) if len(latency) else None


def length_judgement(per_length: np.ndarray, output_tokens: np.ndarray, inside: np.ndarray,
                     normal_index: np.ndarray, tau: float) -> AnswerLength:
    """A spike judged on e2e adjusted for answer length (:func:`length_adjusted_ms`): ``p99_ms``
    of its successful requests' adjusted e2e, ``threshold_ms`` (the test's τ), their ``ratio``, the
    median ``output_tokens_ratio`` (its requests over the normal ones) and a ``summary``: "e2e for
    its answer length rose 2.7× (P99 3760 vs 1383 ms at the median answer length); output tokens
    ×1.1"."""
    values = per_length[inside]
    values = values[np.isfinite(values)]
    p99 = nearest_rank_value(values, 0.99) if len(values) else None
    ratio = p99 / tau if p99 is not None and tau > 0 else None
    tokens = output_tokens[inside]
    tokens, normal_tokens = tokens[np.isfinite(tokens)], output_tokens[normal_index]
    normal_tokens = normal_tokens[np.isfinite(normal_tokens)]
    tokens_ratio = (float(np.median(tokens) / np.median(normal_tokens))
                    if len(tokens) and len(normal_tokens) and np.median(normal_tokens) > 0 else None)
    summary = ("e2e for its answer length rose " + (f"{ratio:.1f}×" if ratio is not None else "—")
               + (f" (P99 {p99:.0f} vs {tau:.0f} ms at the median answer length)" if p99 is not None else "")
               + (f"; output tokens ×{tokens_ratio:.1f}" if tokens_ratio is not None else ""))
    return AnswerLength(p99_ms=p99, threshold_ms=tau, ratio=ratio, output_tokens_ratio=tokens_ratio, summary=summary)


#: Length-adjusted e2e ratio (median of the slow requests over the normal ones) up to which a
#: longer-answer episode counts as flat for its length.
FLAT_FOR_LENGTH = 1.25


def longer_answers(req: RequestArrays, windows: dict[str, np.ndarray], per_length: np.ndarray,
                   output_tokens: np.ndarray, spikes: list[Spike], rules: SpikeRules = SpikeRules(),
                   plain: TailTestResult | None = None) -> list[LongerAnswer]:
    """Where e2e latency P99 rose only because answers got longer: the episodes the tail-share test
    finds on e2e latency itself (:func:`detect` without ``per_length``) that overlap no spike of the
    length-adjusted test (``spikes``). Each ``{start_ns, end_ns, p99_ms, baseline_p99_ms (the e2e
    test's τ), output_tokens_ratio, length_adjusted_ratio, summary}``: the ratios are medians of the episode's
    slow requests (e2e above τ) over the requests outside every episode; the summary reads "at 29–45 s
    e2e P99 rose 2.6× only with output length — longer answers: output tokens ×3.2, e2e for their
    length flat (×0.9)". Not incidents: listed in ``spike_detection.longer_answers``, never as spikes.
    ``plain``: the plain e2e test's result when the caller has it."""
    result = plain if plain is not None else detect(req, windows, rules)
    if result is None:
        return []
    tau = float(result.threshold_ms)
    origin = int(windows["start_ns"][0])
    episodes = [result.window_bounds(first, last) for first, last in result.episodes(rules.merge_gap)]
    outside = req.is_ok.copy()
    for lo, hi in episodes:
        outside &= ~((req.scheduled_ns >= lo) & (req.scheduled_ns < hi))

    def median(values: np.ndarray) -> float | None:
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else None
    normal_tokens, normal_adjusted = median(output_tokens[outside]), median(per_length[outside])
    out = []
    for lo, hi in episodes:
        if any(s.start_ns < hi and s.end_ns > lo for s in spikes):
            continue
        inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi) & req.is_ok
        slow = inside & (req.latency_ms > tau)
        p99 = e2e_p99(req, np.flatnonzero(inside))
        tokens, adjusted = median(output_tokens[slow]), median(per_length[slow])
        tokens_ratio = tokens / normal_tokens if tokens is not None and normal_tokens else None
        adjusted_ratio = adjusted / normal_adjusted if adjusted is not None and normal_adjusted else None
        if p99 is None or tokens_ratio is None or adjusted_ratio is None:
            continue
        flat = "flat" if adjusted_ratio <= FLAT_FOR_LENGTH else "raised, but no spike"
        at = f"{(lo - origin) / 1e9:.0f}–{(hi - origin) / 1e9:.0f} s"
        out.append(LongerAnswer(
            start_ns=int(lo), end_ns=int(hi), p99_ms=p99, baseline_p99_ms=tau, output_tokens_ratio=tokens_ratio,
            length_adjusted_ratio=adjusted_ratio,
            summary=(f"at {at} e2e P99 rose {p99 / tau:.1f}× only with output length — longer answers: "
                     f"output tokens ×{tokens_ratio:.1f}, e2e for their length {flat} (×{adjusted_ratio:.1f})")))
    return out


def output_tokens_of(requests) -> np.ndarray | None:
    """The request table's ``output_tokens`` as float64 (NaN where null), or None without that column."""
    if "output_tokens" not in requests.column_names:
        return None
    values, present = int_column(requests, "output_tokens")
    return np.where(present, values.astype(np.float64), np.nan)


def _spike_record(req, result, first, last, lo, hi, tau, in_any, normal_index, matrix, run, inputs,
                  available, registry, method, stage_map, row_of, normal, series_cache=None,
                  retained: RetainedView | None = None, per_length: np.ndarray | None = None,
                  e2e_tau: float | None = None) -> Spike:
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    latency, requests, source = spike_latency(req, lo, hi, retained)
    p99 = float(latency[nearest_rank(len(latency), 0.99) - 1])  # never empty: see spike_latency
    n_slow, n_all = int(result.slow[first:last + 1].sum()), int(result.n[first:last + 1].sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(result.n[first:last + 1] > 0, result.slow[first:last + 1] / np.maximum(result.n[first:last + 1], 1), 0)
    peak = first + int(np.argmax(shares))
    peak_lo, peak_hi = result.window_bounds(peak, peak)
    slow_index = np.flatnonzero(inside & req.is_ok & (req.latency_ms > (tau if e2e_tau is None else e2e_tau)))
    if per_length is not None and (e2e_tau is None or not len(slow_index)):
        # slow for its length, and slower than τ outright
        slow_index = np.flatnonzero(inside & req.is_ok & (req.latency_ms > tau)
                                    & (np.nan_to_num(per_length, nan=-np.inf) > tau))
    decomposition = decompose(slow_index, normal_index, matrix, req.n, row_of, normal)
    if retained is not None and len(slow_index) == 0:
        decomposition = replace(decomposition, available=False, unavailable_reason=NO_RECORDS_KEPT,
                                summary=f"stage split unavailable: {NO_RECORDS_KEPT}")
    elif retained is not None and len(slow_index) < n_slow and decomposition.available:
        decomposition = replace(decomposition, summary=(
            f"{decomposition.summary} (the {len(slow_index)} of {n_slow} slow requests whose "
            "records retention kept)"))
    ctx = SpikeContext(run, lo, hi, (peak_lo + peak_hi) // 2, slow_index, normal_index, decomposition, available,
                       inputs, tau)
    if method == "baro":
        from tailscope.analyzers.causes.baro import baro_causes
        causes = baro_causes(ctx)
    else:
        causes = registry.attribute(ctx)
    return Spike(
        start_ns=lo, end_ns=hi, peak_ns=(peak_lo + peak_hi) // 2,
        p99_ms=p99, p99_claimed=len(latency) >= min_samples_for_claim(0.99, 0),
        percentiles_from=source, records_kept=int(inside.sum()),
        baseline_p99_ms=tau, baseline_quantile=result.quantile, excess_ms=p99 - tau,
        slow_requests=n_slow, slow_share=n_slow / n_all if n_all else 0.0,
        expected_slow_share=result.expected_share,
        p_value=result.tail_p_value(n_slow, n_all),
        peak_window_slow_share=float(shares[peak - first]),
        requests=requests, windows=last - first + 1,
        decomposition=decomposition, causes=tuple(causes),
        evidence_series=evidence_series(ctx, causes, series_cache),
        representative_trace=representative_trace(req, slow_index, run.spans, stage_map or DEFAULT_STAGE_MAP,
                                                   inputs.span_request),
    )
