"""Which time windows hold significantly more slow requests than a steady run would.

The test, and why it works at any rate
--------------------------------------
Let τ be the run's *baseline* P99: the 0.99-quantile of the latencies of the
requests outside every flagged window (computed iteratively, below). In a
steady run each request is above τ with probability p0 = 1 − 0.99 = 1%, so the
number of slow requests k among the n requests of a window follows
Binomial(n, p0). A window's P99 exceeds τ exactly when its share of requests
above τ exceeds 1%, so the one-sided binomial test ``P(Binomial(n, p0) >= k)``
is the exact, distribution-free test of "this window's P99 is above the
baseline P99" — and unlike a window P99 it needs no 459 samples: at 20
requests/s, 4 slow requests out of 20 in one second is already significant
after correction.

Windows are tested at several scales (1, 2, 4, 8 consecutive detection windows,
non-overlapping), so a long moderate spike is found as well as a short sharp
one; of a group flagged at a larger scale, only the windows that are elevated
on their own (uncorrected p < ``member_alpha`` and share >= the material
share) join the spike, so quiet edges do not widen it. Multiple testing: Bonferroni over every window tested at every scale, so
the probability that a steady run shows any flagged window is at most
``alpha`` (1% by default), whatever its length.

Significance alone is not enough at 20,000 requests/s (a 1.3% share is
"significant" there), so a window is flagged only when also *material*: its
slow share is at least ``min_tail_ratio`` × p0 (4%), it holds at least
``min_slow_requests`` slow requests, and the median latency of its slow
requests is at least ``max(τ·(1 + min_relative_excess), τ + min_excess_ms)``.

The detection window is the display window (``window_s``) made longer, in whole
multiples, until ``min_expected_per_window`` (20) latency samples are expected
in it, so very low rates still get testable windows.

Iteration: a spike holding more than 1% of the run's requests would lift τ
into itself and hide. So τ is first the P99 of the samples outside *outlying*
windows — windows whose median or P90 lies more than ``outlier_k`` scaled MADs
(and ``min_relative_excess``) above the median over windows of that
statistic; after each test, τ is recomputed from the samples outside every
window outlying or flagged so far and the test repeated (at most
``max_iterations`` times, or until no window joins the excluded set). The
excluded set only grows, so τ only falls: outlying windows beside a spike that
the test does not flag cannot come back into τ, lift it above the spike and
make it vanish on the next iteration (seen in a 10 s lab run: τ went 285 →
514 ms and the overload spike was lost). Only the binomial test flags
windows; the outlier screen only keeps windows out of τ.

Weighted samples: an element may stand for several samples of one value
(``weights``): a retained run is tested on its per-window latency histograms,
one element per bucket weighted by its count, which gives the same test as the
samples expanded (but for the outlier screen's subsample above 500,000 samples;
:mod:`tailscope.analyzers.spikes.detection`).

Cost: O(n) per iteration for the counts plus O(k log k) for the k slow
requests' medians; memory O(n) booleans and int64 window indices (n: elements;
weighted quantiles sort the elements, O(n log n)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from tailscope.analyzers.stats.percentiles import group_sort, grouped_quantile, nearest_rank_value, weighted_grouped_quantiles


@dataclass(frozen=True)
class TailTestRules:
    """Thresholds of the tail-share test (see the module docstring)."""

    alpha: float = 0.01
    tail_p: float = 0.99
    min_tail_ratio: float = 4.0
    min_slow_requests: int = 3
    min_relative_excess: float = 0.25
    min_excess_ms: float = 1.0
    min_expected_per_window: float = 20.0
    scales: tuple[int, ...] = (1, 2, 4, 8)
    max_iterations: int = 4
    min_samples: int = 100
    outlier_k: float = 5.0
    member_alpha: float = 0.05


@dataclass(frozen=True)
class TailTestResult:
    """Per detection window (length ``window_ns``): counts, test outcome and the final baseline."""

    origin_ns: int
    window_ns: int
    n: np.ndarray  # latency samples per window
    slow: np.ndarray  # samples above ``threshold_ms`` per window
    p_value: np.ndarray  # one-sided binomial p-value at scale 1 (1.0 for empty windows)
    flagged: np.ndarray  # bool
    threshold_ms: float  # τ: baseline P99 from samples outside flagged windows
    expected_share: float  # p0 = 1 − tail_p
    tests: int  # number of windows tested over all scales (the Bonferroni divisor)
    iterations: int

    def window_bounds(self, first: int, last: int) -> tuple[int, int]:
        """(start, end) epoch ns of detection windows ``first..last`` inclusive."""
        return self.origin_ns + first * self.window_ns, self.origin_ns + (last + 1) * self.window_ns


def detection_window_ns(samples: int, duration_ns: int, window_ns: int, rules: TailTestRules) -> int:
    """The display window times the smallest whole factor giving ``min_expected_per_window`` samples."""
    if samples <= 0 or duration_ns <= 0:
        return window_ns
    expected = samples * window_ns / duration_ns
    factor = max(1, int(np.ceil(rules.min_expected_per_window / max(expected, 1e-12))))
    return window_ns * factor


MAD_TO_SIGMA = 1.4826


#: The outlier screen reads at most this many samples (seeded subsample): per-window medians
#: and P90s from a few hundred samples each are accurate enough to choose a starting τ.
OUTLIER_SCREEN_SAMPLES = 500_000


def _count(index: np.ndarray, m: int, weights: np.ndarray | None) -> np.ndarray:
    """Samples per window (int64): one per element, or its weight."""
    return np.bincount(index, weights=weights, minlength=m).astype(np.int64)


def _total(chosen: np.ndarray, weights: np.ndarray | None) -> int:
    """Samples among the chosen elements (a boolean mask)."""
    return int(chosen.sum()) if weights is None else int(weights[chosen].sum())


def _window_quantiles(index: np.ndarray, values: np.ndarray, m: int, qs: tuple[float, ...],
                      weights: np.ndarray | None) -> dict[float, np.ndarray]:
    """Nearest-rank quantiles of each window's samples (NaN where none)."""
    if weights is not None:
        return weighted_grouped_quantiles(index, values, weights, m, qs)
    order = group_sort(index, values)
    counts = np.bincount(index, minlength=m)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return {q: grouped_quantile(values[order], starts, counts, q) for q in qs}


def outlying_windows(index: np.ndarray, latency_ms: np.ndarray, m: int, rules: TailTestRules,
                     weights: np.ndarray | None = None) -> np.ndarray:
    """Windows whose median or P90 is far above the typical window's (robust z > outlier_k).
    ``weights``: samples each element stands for (None: one each)."""
    if weights is None and len(index) > OUTLIER_SCREEN_SAMPLES:
        pick = np.random.default_rng(0).choice(len(index), size=OUTLIER_SCREEN_SAMPLES, replace=False)
        index, latency_ms = index[pick], latency_ms[pick]
    counts = _count(index, m, weights)
    outlying = np.zeros(m, dtype=bool)
    enough = counts >= 5
    if enough.sum() < 3:
        return outlying
    quantiles = _window_quantiles(index, latency_ms, m, (0.5, 0.9), weights)
    for p in (0.5, 0.9):
        values = quantiles[p]
        typical = float(np.median(values[enough]))
        spread = float(np.median(np.abs(values[enough] - typical))) * MAD_TO_SIGMA
        limit = max(typical + rules.outlier_k * spread, typical * (1.0 + rules.min_relative_excess))
        outlying |= enough & (values > limit)
    return outlying


def _baseline_threshold(latency_ms: np.ndarray, clean: np.ndarray, p: float, weights: np.ndarray | None) -> float:
    if weights is None:
        return nearest_rank_value(latency_ms[clean], p)
    return float(weighted_grouped_quantiles(np.zeros(int(clean.sum()), dtype=np.int64), latency_ms[clean],
                                            weights[clean], 1, (p,))[p][0])


def _scaled(counts: np.ndarray, scale: int) -> np.ndarray:
    """Sums over non-overlapping groups of ``scale`` consecutive windows (last group may be short)."""
    groups = -(-len(counts) // scale)
    padded = np.zeros(groups * scale, dtype=counts.dtype)
    padded[:len(counts)] = counts
    return padded.reshape(groups, scale).sum(axis=1)


def _flag_once(index: np.ndarray, latency_ms: np.ndarray, m: int, tau: float, rules: TailTestRules,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    p0 = 1.0 - rules.tail_p
    is_slow = latency_ms > tau
    slow_weights = weights[is_slow] if weights is not None else None
    n = _count(index, m, weights)
    k = _count(index[is_slow], m, slow_weights)
    slow_index, slow_latency = index[is_slow], latency_ms[is_slow]
    floor_ms = max(tau * (1.0 + rules.min_relative_excess), tau + rules.min_excess_ms)
    tests = int(sum(np.count_nonzero(_scaled(n, s)) for s in rules.scales))
    cutoff = rules.alpha / max(tests, 1)
    flagged = np.zeros(m, dtype=bool)
    p_unit = np.ones(m)
    for scale in rules.scales:
        n_s, k_s = _scaled(n, scale), _scaled(k, scale)
        p_s = np.where(n_s > 0, stats.binom.sf(k_s - 1, np.maximum(n_s, 1), p0), 1.0)
        if scale == 1:
            p_unit = p_s
        medians = _window_quantiles(slow_index // scale, slow_latency, len(n_s), (0.5,), slow_weights)[0.5]
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(n_s > 0, k_s / np.maximum(n_s, 1), 0.0)
        passed = ((p_s < cutoff) & (share >= rules.min_tail_ratio * p0) & (k_s >= rules.min_slow_requests)
                  & (np.nan_to_num(medians, nan=-np.inf) >= floor_ms))
        if not passed.any():
            continue
        member = np.repeat(passed, scale)[:m]
        if scale == 1:
            flagged |= member
        else:  # only the elevated windows of a flagged group, so its quiet edges do not widen the spike
            with np.errstate(invalid="ignore", divide="ignore"):
                unit_share = np.where(n > 0, k / np.maximum(n, 1), 0.0)
            flagged |= (member & (unit_share >= rules.min_tail_ratio * p0)
                        & (p_unit < rules.member_alpha))
    return flagged, n, k, p_unit, tests


def tail_test(scheduled_ns: np.ndarray, latency_ms: np.ndarray, origin_ns: int, end_ns: int,
              window_ns: int, rules: TailTestRules = TailTestRules(),
              weights: np.ndarray | None = None) -> TailTestResult | None:
    """Run the test on latency samples (scheduled time epoch ns, latency ms); None with too few samples.

    ``window_ns`` is the display window; the detection window is a whole multiple of it
    (:func:`detection_window_ns`). ``weights`` (non-negative integers, or None: one each)
    says how many samples each element stands for: a histogram bucket of one window is
    one element weighted by its count (its time must then place it in a single detection
    window: the window's start, on a grid the detection windows are whole multiples of).
    """
    total = len(latency_ms) if weights is None else int(weights.sum())
    if total < rules.min_samples or end_ns <= origin_ns:
        return None
    det_ns = detection_window_ns(total, end_ns - origin_ns, window_ns, rules)
    m = max(1, int(-(-(end_ns - origin_ns) // det_ns)))
    index = np.clip((scheduled_ns - origin_ns) // det_ns, 0, m - 1)
    flagged = np.zeros(m, dtype=bool)
    excluded = outlying_windows(index, latency_ms, m, rules, weights)
    if _total(~excluded[index], weights) < rules.min_samples:
        excluded[:] = False
    iterations = 0
    while True:
        iterations += 1
        clean = ~excluded[index]
        if _total(clean, weights) < rules.min_samples:
            break
        tau = _baseline_threshold(latency_ms, clean, rules.tail_p, weights)
        flagged, n, k, p_unit, tests = _flag_once(index, latency_ms, m, tau, rules, weights)
        # a window once outlying or flagged stays out of τ, so τ only falls and the iteration settles
        grown = excluded | flagged
        if (np.array_equal(grown, excluded) or iterations >= rules.max_iterations
                or _total(~grown[index], weights) < rules.min_samples):
            break
        excluded = grown
    return TailTestResult(origin_ns, det_ns, n, k, p_unit, flagged, tau, 1.0 - rules.tail_p, tests, iterations)


def merge_runs(flagged: np.ndarray, merge_gap: int) -> list[tuple[int, int]]:
    """[(first, last)] window indices of flagged runs, joining gaps of at most ``merge_gap`` windows."""
    index = np.flatnonzero(flagged)
    if len(index) == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) > merge_gap + 1)
    firsts = np.concatenate(([index[0]], index[breaks + 1]))
    lasts = np.concatenate((index[breaks], [index[-1]]))
    return list(zip(firsts.tolist(), lasts.tolist()))
