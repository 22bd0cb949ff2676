"""BARO-style baseline ranker: the comparison method the lab scores beside our detectors.

BARO (RCAEval, ASE'24/WWW'25, the strongest metric-based root-cause method
there) ranks every metric by a robust score of its change at the anomaly:
each series is scaled with the median and inter-quartile range of the data
*before* the anomaly, and scored by its largest absolute scaled value after
the anomaly start. The top-ranked metric names the root cause.

Here, for one spike:

- series: every sampled signal (counters as rates per second, gauges as read,
  on the 1-s grid of :class:`~.run_inputs.RunInputs`), plus what our
  detectors read from spans, events and requests, as metrics: GC pause time
  per second, the target's stall time per second (:mod:`~.inputs.span_stalls`), mean queue depth, server arrivals per second and mean send
  lateness — so the comparison is about the *method*, not the inputs;
- before: the bins before ``start − margin`` (at least 5; else every baseline bin);
- after: the bins of ``[start, end + margin)``;
- score = max over after-bins of ``|x − median(before)| / IQR(before)``
  (IQR 0 → scale 1, as scikit-learn's RobustScaler does);
- each series maps to the cause kind of the detector that declares it in
  its ``reads`` (:data:`SERIES_KINDS`, the longest matching prefix; the
  derived metrics are ``derived.*``); kinds are ranked by their best series. Confidence is the kind's
  share of the summed scores of all ranked kinds (relative, not calibrated).

Output: the same shape as the detectors' causes (``{kind, confidence,
evidence}``, best first); BARO always names a cause (it has no
"unexplained"). Cost: O(series × bins).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.spikes import CauseFinding
from tailscope.analyzers.causes.protocol import SpikeContext
from tailscope.analyzers.causes.registry import series_kinds
from tailscope.analyzers.inputs.run_inputs import margin_ns

#: Series-name prefix → cause kind, longest prefix first (the first match is the most specific);
#: derived from the detectors' ``reads`` (registry.series_kinds). Unmatched series rank but name no kind.
SERIES_KINDS = series_kinds()
TOP_SERIES = 10


def kind_of(series: str) -> str | None:
    """The cause kind a series points to, or None."""
    for prefix, kind in SERIES_KINDS:
        if series.startswith(prefix):
            return kind
    return None


def derived_series(ctx: SpikeContext) -> dict[str, np.ndarray]:
    """Per-bin metrics built from events, spans and requests."""
    inputs = ctx.inputs
    edges = inputs.edges
    out = {}
    pauses = inputs.gc_pauses
    if len(pauses):
        paused = pauses.paused_before(edges)
        out["derived.gc_pause_ms_per_s"] = np.diff(paused) / 1e6 / (np.diff(edges) / 1e9)
    stalls = inputs.span_stalls.pauses if len(inputs.run.spans) else ()
    if len(stalls):
        stalled = stalls.paused_before(edges)
        out["derived.stall_ms_per_s"] = np.diff(stalled) / 1e6 / (np.diff(edges) / 1e9)
    _, start, depth, _ = inputs.queue_spans()
    if len(depth):
        out["derived.queue_depth"] = _bin_mean(edges, start, depth)
    if len(inputs.server_starts_ns):
        out["derived.server_arrivals_per_s"] = inputs.per_second(inputs.server_starts_ns)
    req = inputs.req
    if req.has_sent.any():
        out["derived.lateness_ms"] = _bin_mean(edges, req.scheduled_ns[req.has_sent], req.lateness_ms[req.has_sent])
    return out


def _bin_mean(edges: np.ndarray, t_ns: np.ndarray, values: np.ndarray) -> np.ndarray:
    index = np.searchsorted(edges, t_ns, side="right") - 1
    inside = (index >= 0) & (index < len(edges) - 1)
    sums = np.bincount(index[inside], weights=values[inside], minlength=len(edges) - 1)
    counts = np.bincount(index[inside], minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def robust_score(values: np.ndarray, before: np.ndarray, after: np.ndarray) -> float | None:
    """Max |x − median(before)| / IQR(before) over the after-bins; None without data."""
    base = values[before]
    base = base[np.isfinite(base)]
    later = values[after]
    later = later[np.isfinite(later)]
    if len(base) < 3 or len(later) == 0:
        return None
    q1, median, q3 = np.quantile(base, [0.25, 0.5, 0.75])
    scale = float(q3 - q1) if q3 > q1 else 1.0
    return float(np.max(np.abs(later - median)) / scale)


def rank_series(ctx: SpikeContext) -> list[tuple[str, float]]:
    """Every series with a score, best first."""
    inputs = ctx.inputs
    margin = margin_ns(ctx.start_ns, ctx.end_ns)
    before = inputs.bins_between(inputs.origin_ns, ctx.start_ns - margin)
    if before.sum() < 5:
        before = inputs.baseline_bins
    after = inputs.bins_between(ctx.start_ns, ctx.end_ns + margin)
    series = {name: inputs.binned(name) for name in inputs.signals.names()}
    series.update(derived_series(ctx))
    scored = []
    for name, values in series.items():
        score = robust_score(values, before, after)
        if score is not None and np.isfinite(score):
            scored.append((name, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored


def baro_causes(ctx: SpikeContext) -> list[CauseFinding]:
    """Cause kinds ranked by their best series' robust score (confidence: its share of the kinds' scores)."""
    scored = rank_series(ctx)
    best: dict[str, tuple[str, float]] = {}
    for name, score in scored:
        kind = kind_of(name)
        if kind is not None and kind not in best:
            best[kind] = (name, score)
    total = sum(score for _, score in best.values())
    top = [{"series": name, "score": round(score, 4), "kind": kind_of(name)} for name, score in scored[:TOP_SERIES]]
    if not best:
        return [CauseFinding("unexplained", 0.0,
                             {"summary": "BARO: no series to rank", "method": "baro", "top_series": top})]
    causes = []
    for kind, (name, score) in sorted(best.items(), key=lambda item: -item[1][1]):
        confidence = score / total if total > 0 else 0.0
        causes.append(CauseFinding(kind, round(float(confidence), 4), {
            "summary": f"BARO: {name} moved {score:.1f} IQRs from its pre-spike median",
            "method": "baro", "series": name, "score": score, "top_series": top}))
    return causes
