"""Recurring stalls: short stop-the-world pauses that recur, found against the quiet time between them.

A 150-ms pause every 4 s slows 4% of a run's requests — more than the 1% above a P99 —
so the windowed tail test (:mod:`.tail_share`) takes it into its baseline: τ lies inside the
stalls and no window stands out ("No latency P99 spike rose significantly"). A pause leaves
a sharper mark than any window statistic: every request in service during it finishes at
its end, so the *completion times* of the raised requests bunch within a service time of
one another.

The test. Raised requests are those above the run's P90 (``raised_quantile``) plus its median
latency m: a pause adds its length to every request in service, far beyond a request class's
ordinary spread (a run of short and long requests has a third of them above 2 m).
Sorted by completion time (scheduled send + latency), raised requests completing at most
``gap`` = max(m, ``min_gap_ms``) apart form a cluster. With no stall, raised completions are
a Poisson stream at the run's raised rate λ (all raised requests over the tested time: an
overestimate when stalls exist, so the test is conservative); a cluster of k completions
spanning w is a stall when ``P(Poisson(λ (w + gap)) >= k) × (duration / gap) < alpha``
(a scan-statistic Bonferroni over the run's gap-long stretches) and k >= ``min_requests``.
At least ``min_stalls`` stalls outside the run's spikes are *recurring stalls*: their count,
period and its coefficient of variation (:func:`rhythm`: an interval spanning stalls too weak
to be seen counts as several periods; "every ~4.1 s" when the CV is at most
``max_regular_cv``, else "irregular"), and each pause's length — the largest excess over m
among its requests (the request that arrived as it began waited all of it), median over
the stalls. The quiet time is every request outside the stalls: its P99 beside the run's
says how much of the tail the stalls are.

Rates: each stall must hold ``min_requests`` (3) raised requests, so a 150-ms pause is
found from about 20 requests/s; below that a stall holds one or two and stays unseen
(say so rather than guess). Cost: O(n log n) for the sort of the raised requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from tailscope.analyzers.stats.percentiles import nearest_rank_value
from tailscope.support.units import NS_PER_MS


@dataclass(frozen=True)
class StallRules:
    """Thresholds of the recurring-stall test (module docstring)."""

    raised_quantile: float = 0.9
    min_gap_ms: float = 2.0
    min_requests: int = 3
    min_stalls: int = 3
    alpha: float = 0.01
    max_regular_cv: float = 0.5


def find_stalls(scheduled_ns: np.ndarray, latency_ms: np.ndarray, origin_ns: int, end_ns: int,
                rules: StallRules = StallRules()) -> dict | None:
    """Recurring stalls among these latency samples (scheduled epoch ns, ms), or None.

    Returns ``{"stalls": [{"start_ns", "end_ns", "requests", "pause_ms", "members", "p_value"}], "count", "period_s",
    "interval_cv", "regular", "pause_ms", "request_mask" (bool per sample: completed in a stall),
    "requests", "median_ms", "gap_ms", "p_value_max"}``: a stall's start is its end less its pause,
    its end the last raised completion; ``p_value_max`` the largest corrected p-value of a stall
    (the expected number of chance clusters at least as strong over the run), and ``p_value`` the
    chance of ``count`` such clusters by chance: P(Poisson(p_value_max) >= count)."""
    n = len(latency_ms)
    duration_ns = end_ns - origin_ns
    if n < rules.min_requests * rules.min_stalls or duration_ns <= 0:
        return None
    median = float(np.median(latency_ms))
    gap_ms = max(median, rules.min_gap_ms)
    raised = np.flatnonzero(latency_ms > nearest_rank_value(latency_ms, rules.raised_quantile) + median)
    if len(raised) < rules.min_requests * rules.min_stalls:
        return None
    done_ns = scheduled_ns[raised] + (latency_ms[raised] * NS_PER_MS).astype(np.int64)
    order = np.argsort(done_ns, kind="stable")
    raised, done_ns = raised[order], done_ns[order]
    gap_ns = int(gap_ms * NS_PER_MS)
    breaks = np.flatnonzero(np.diff(done_ns) > gap_ns) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks, [len(done_ns)])) - 1
    counts = lasts - firsts + 1
    rate_per_ns = len(raised) / duration_ns
    width_ns = done_ns[lasts] - done_ns[firsts] + gap_ns
    tests = max(duration_ns / gap_ns, 1.0)
    p = np.minimum(stats.poisson.sf(counts - 1, rate_per_ns * width_ns) * tests, 1.0)
    keep = np.flatnonzero((counts >= rules.min_requests) & (p < rules.alpha))
    if len(keep) < rules.min_stalls:
        return None
    stalls = []
    for c in keep:
        members = raised[firsts[c]:lasts[c] + 1]
        pause = float(np.max(latency_ms[members]) - median)
        end = int(done_ns[lasts[c]])
        stalls.append({"start_ns": end - int(pause * NS_PER_MS), "end_ns": end, "requests": int(len(members)),
                       "pause_ms": pause, "members": members, "p_value": float(p[c])})
    return group(stalls, n, median, gap_ms, rules)


def group(stalls: list[dict], n: int, median_ms: float, gap_ms: float, rules: StallRules = StallRules()) -> dict | None:
    """The recurring-stall summary of these stalls (each with ``members``: sample indices), or None
    with fewer than ``min_stalls`` (see :func:`find_stalls`)."""
    if len(stalls) < rules.min_stalls:
        return None
    mask = np.zeros(n, dtype=bool)
    for stall in stalls:
        mask[stall["members"]] = True
    period, cv = rhythm(np.array([st["start_ns"] for st in stalls], dtype=np.float64) / 1e9)
    return {"stalls": stalls, "count": len(stalls), "period_s": period, "interval_cv": cv,
            "regular": cv <= rules.max_regular_cv, "pause_ms": float(np.median([st["pause_ms"] for st in stalls])),
            "request_mask": mask, "requests": int(mask.sum()), "median_ms": median_ms, "gap_ms": gap_ms,
            "p_value_max": float(max(st["p_value"] for st in stalls)),
            "p_value": float(stats.poisson.sf(len(stalls) - 1, max(st["p_value"] for st in stalls)))}


def rhythm(starts_s: np.ndarray) -> tuple[float, float]:
    """(period s, coefficient of variation) of stall starts, counting stalls too weak to be seen:
    the period is first the intervals' lower quartile, each interval then counts as the whole
    number k >= 1 of periods nearest it, and the period is their total over Σk; the CV is that of
    interval / k (0 for a perfect rhythm with gaps)."""
    intervals = np.diff(np.sort(starts_s))
    if len(intervals) == 0 or intervals.max() <= 0:
        return 0.0, float("inf")
    first = float(np.quantile(intervals, 0.25)) or float(intervals[intervals > 0].min())
    k = np.maximum(np.round(intervals / first), 1.0)
    period = float(intervals.sum() / k.sum())
    per = intervals / k
    return period, float(per.std() / per.mean())


def quiet_tail(latency_ms: np.ndarray, in_stall: np.ndarray) -> tuple[float, float]:
    """(P99 of the whole sample, P99 of the quiet time: the samples outside every stall), ms."""
    return nearest_rank_value(latency_ms, 0.99), nearest_rank_value(latency_ms[~in_stall], 0.99)


def stall_sentence(found: dict, cause: str | None = None) -> str:
    """"28 stalls, every ~4.1 s, each ~150 ms[, cause …]" (irregular: "28 stalls, irregular, …")."""
    rhythm = f"every ~{found['period_s']:.1f} s" if found["regular"] else (
        f"irregular (typical interval {found['period_s']:.1f} s)")
    text = f"{found['count']} stalls, {rhythm}, each ~{found['pause_ms']:.0f} ms"
    return f"{text}, cause {cause}" if cause else text
