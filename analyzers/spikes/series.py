"""Spikes in a per-request series other than latency: an LLM request's TTFT or TPOT.

A TTFT (or TPOT) spike is found exactly like a latency spike: the tail-share
test of :mod:`.tail_share` (:func:`~.detection.detect_series`: after the
warm-up, Bonferroni over every window and scale, alpha 1%, material excess)
on the series' values, each placed at its request's scheduled send. Flagged
detection windows at most ``merge_gap`` apart merge into one spike. No cause
is attributed here: the detectors explain latency spikes, and a TTFT spike
usually shows as one (queueing, prefill interference); this names when the
token-level metric itself rose. Cost: that of one tail-share test.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.spikes.detection import SpikeRules, detect_series, detection_facts
from tailscope.analyzers.spikes.tail_share import TailTestResult
from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank


def series_spikes(scheduled_ns: np.ndarray, values_ms: np.ndarray, windows: dict[str, np.ndarray] | None,
                  rules: SpikeRules = SpikeRules()) -> tuple[dict, list[dict]]:
    """(detection facts, spikes) of one series (ms, NaN where a request has no value)
    over the window table's range; ``windows`` None: not performed.

    The facts are :func:`~.detection.detection_facts` without ``method``; each spike is
    ``{start_ns, end_ns, p99_ms, p99_claimed, baseline_p99_ms, baseline_quantile, excess_ms, requests,
    slow_requests, slow_share}`` (``requests``: values in it; ``slow``: above the baseline P99)."""
    result = detect_series(scheduled_ns, values_ms, windows, rules) if windows is not None else None
    load_start = int(windows["start_ns"][0]) if windows is not None and len(windows["start_ns"]) else None
    facts = encode(detection_facts(result, rules, "", load_start))
    for key in ("method", "judged_on", "longer_answers"):  # latency-only facts
        facts.pop(key, None)
    return facts, _spikes(scheduled_ns, values_ms, result, rules)


def _spikes(scheduled_ns: np.ndarray, values_ms: np.ndarray, result: TailTestResult | None,
            rules: SpikeRules) -> list[dict]:
    if result is None:
        return []
    spikes = []
    tau = float(result.threshold_ms)
    for first, last in result.episodes(rules.merge_gap):
        lo, hi = result.window_bounds(first, last)
        inside = (scheduled_ns >= lo) & (scheduled_ns < hi) & ~np.isnan(values_ms)
        values = np.sort(values_ms[inside])
        if not len(values):
            continue
        p99 = float(values[nearest_rank(len(values), 0.99) - 1])
        slow = int(result.slow[first:last + 1].sum())
        count = int(result.n[first:last + 1].sum())
        spikes.append({"start_ns": int(lo), "end_ns": int(hi), "p99_ms": p99,
                       "p99_claimed": len(values) >= min_samples_for_claim(0.99, 0),
                       "baseline_p99_ms": tau, "baseline_quantile": result.quantile,
                       "excess_ms": p99 - tau, "requests": count,
                       "slow_requests": slow, "slow_share": slow / count if count else 0.0})
    return spikes
