"""P99 spike detection over windows, with per-spike stage decomposition.

A window is *eligible* with at least ``min_requests`` successful requests.
The baseline is the median of the eligible windows' P99 and the spread is
their MAD scaled to a standard deviation (×1.4826). A window is *flagged*
when its P99 exceeds ``baseline + k·MAD`` **and** the excess is at least
``max(min_excess_ms, min_relative_excess·baseline)`` — the floor keeps a
steady run (whose MAD can be tiny) free of spikes — or when the same floor is
met and its count of requests above the run's P99 is improbable under
Binomial(n, 0.01) (one-sided p < 0.01 / windows). Flagged windows at most
``merge_gap`` windows apart merge into one spike.

Per spike: the slow requests (scheduled inside it, latency above the
baseline P99) are compared with the normal requests (outside every spike)
stage by stage; the stage whose mean grew most is named with its numbers.
Causes come from a :class:`~.causes.DetectorRegistry` (``unexplained`` when
none fires). Cost: O(windows + requests) after the window table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .causes import DetectorRegistry, SpikeContext, available_inputs
from .percentiles import nearest_rank
from .records import RequestArrays
from .stages import StageMatrix

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class SpikeRules:
    """Thresholds of the spike test (see the module docstring)."""

    k: float = 5.0
    min_excess_ms: float = 10.0
    min_relative_excess: float = 0.5
    min_requests: int = 10
    min_windows: int = 5
    merge_gap: int = 1
    alpha: float = 0.01


def baseline_p99(windows: dict[str, np.ndarray], rules: SpikeRules) -> tuple[float, float] | None:
    """(median, scaled MAD) of eligible windows' P99 in ms; None with too few windows."""
    eligible = windows["ok"] >= rules.min_requests
    values = windows["p99_ms"][eligible]
    if len(values) < rules.min_windows:
        return None
    median = float(np.median(values))
    return median, float(np.median(np.abs(values - median)) * MAD_TO_SIGMA)


def flag_windows(windows: dict[str, np.ndarray], baseline: float, mad: float, rules: SpikeRules) -> np.ndarray:
    """Boolean mask of flagged windows (vectorised)."""
    ok = windows["ok"]
    eligible = ok >= rules.min_requests
    p99 = np.nan_to_num(windows["p99_ms"], nan=-np.inf)
    floor = max(rules.min_excess_ms, rules.min_relative_excess * baseline)
    big_enough = (p99 - baseline) >= floor
    by_p99 = p99 > baseline + rules.k * mad
    slow = np.rint(np.nan_to_num(windows["slow_share"]) * ok)
    p_value = stats.binom.sf(slow - 1, ok, 0.01)
    by_share = p_value < rules.alpha / max(int(eligible.sum()), 1)
    return eligible & big_enough & (by_p99 | by_share)


def merge_runs(flagged: np.ndarray, merge_gap: int) -> list[tuple[int, int]]:
    """[(first, last)] window indices of flagged runs, joining gaps <= merge_gap."""
    index = np.flatnonzero(flagged)
    if len(index) == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) > merge_gap + 1)
    firsts = np.concatenate(([index[0]], index[breaks + 1]))
    lasts = np.concatenate((index[breaks], [index[-1]]))
    return list(zip(firsts.tolist(), lasts.tolist()))


def _mean_p50(values: np.ndarray) -> dict:
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return {"mean_ms": None, "p50_ms": None, "count": 0}
    return {"mean_ms": float(values.mean()),
            "p50_ms": float(np.quantile(values, 0.5, method="inverted_cdf")), "count": int(len(values))}


def decompose(slow_index: np.ndarray, normal_index: np.ndarray, matrix: StageMatrix, n_requests: int) -> dict:
    """Stage means/medians of slow vs normal requests and the stage that grew most."""
    row_of = np.full(n_requests, -1, dtype=np.int64)
    row_of[matrix.request_index] = np.arange(len(matrix.request_index))
    slow_rows = row_of[slow_index][row_of[slow_index] >= 0]
    normal_rows = row_of[normal_index][row_of[normal_index] >= 0]
    result = {"slow_requests": int(len(slow_index)), "joined_slow_requests": int(len(slow_rows)),
              "normal_requests": int(len(normal_index)), "joined_normal_requests": int(len(normal_rows)),
              "stages": {}, "dominant_stage": None, "summary": None}
    if len(slow_rows) == 0 or len(normal_rows) == 0:
        result["summary"] = "no spans joined to the slow or normal requests; no stage decomposition"
        return result
    for j, stage in enumerate(matrix.stages):
        slow, normal = _mean_p50(matrix.ms[slow_rows, j]), _mean_p50(matrix.ms[normal_rows, j])
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
                registry: DetectorRegistry | None = None, rules: SpikeRules = SpikeRules()) -> list[dict]:
    """The spikes of a run, each with decomposition and causes (see module docstring)."""
    base = baseline_p99(windows, rules)
    if base is None:
        return []
    baseline, mad = base
    runs = merge_runs(flag_windows(windows, baseline, mad, rules), rules.merge_gap)
    if not runs:
        return []
    registry = registry if registry is not None else DetectorRegistry()
    available = available_inputs(run)
    starts, ends = windows["start_ns"], windows["end_ns"]
    in_any = np.zeros(req.n, dtype=bool)
    spans = [(int(starts[a]), int(ends[b])) for a, b in runs]
    for lo, hi in spans:
        in_any |= (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    normal_index = np.flatnonzero(req.is_ok & ~in_any)
    spikes = []
    for (first, last), (lo, hi) in zip(runs, spans):
        inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
        latency = np.sort(req.latency_ms[inside & req.is_ok])
        p99 = float(latency[nearest_rank(len(latency), 0.99) - 1])
        peak = first + int(np.nanargmax(windows["p99_ms"][first:last + 1]))
        slow_index = np.flatnonzero(inside & req.is_ok & (req.latency_ms > baseline))
        decomposition = decompose(slow_index, normal_index, matrix, req.n)
        peak_ns = int((starts[peak] + ends[peak]) // 2)
        ctx = SpikeContext(run, lo, hi, peak_ns, slow_index, normal_index, decomposition, available)
        spikes.append({
            "start_ns": lo, "end_ns": hi, "peak_ns": peak_ns,
            "p99_ms": p99, "peak_window_p99_ms": float(windows["p99_ms"][peak]),
            "baseline_p99_ms": baseline, "baseline_mad_ms": mad, "excess_ms": p99 - baseline,
            "requests": int(inside.sum()), "windows": last - first + 1,
            "decomposition": decomposition, "causes": registry.attribute(ctx),
        })
    return spikes

