"""Percentiles with 95% confidence intervals and the MLPerf early-stopping rule.

Point estimate: the nearest-rank order statistic, ``x_(ceil(n·p))`` of the
sorted sample (1-based ranks), so every reported value is a measured value.

Confidence interval (distribution-free, from order statistics): the ranks
``floor(n·p − z·sqrt(n·p·(1−p)))`` and ``ceil(n·p + z·sqrt(n·p·(1−p)))``,
clipped to ``[1, n]``, with z = 1.96 for 95%. Exact binomial coverage is
95.0–97.6% for n >= 1,000 and p in {0.5, 0.9, 0.99}; it drops below 95% when
the upper rank is clipped at n (too few samples for that percentile).

Claiming (MLPerf LoadGen early stopping, 99% confidence): with t samples above
a bound, the bound is a valid upper bound for the p-quantile when
``P(Binomial(n, 1−p) <= t) < 0.01``; the smallest total that allows a claim is
459 / 662 / 838 samples for P99 with t = 0 / 1 / 2 and 44 / 64 / 81 for P90.
A percentile is *claimed* when some t >= 0 qualifies (n >= 459 for P99); its
``bound_ms`` is then the early-stopping upper bound, the (t_max+1)-th largest
value. Cost: O(n) per percentile set (a partition at the ranks read,
:func:`order_statistics`); callers with sorted data pass it to :func:`percentile_ci`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats

from tailscope.analysis_model.percentiles import MaxValue, Percentile, PercentileSet

#: z for a two-sided 95% interval.
Z_95 = 1.959963984540054
#: Confidence of the early-stopping claim (MLPerf LoadGen uses 99%).
CLAIM_CONFIDENCE = 0.99

#: The percentiles every summary reports, as (name, fraction).
STANDARD_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))


def nearest_rank(n: int, p: float) -> int:
    """1-based nearest rank of the p-quantile in a sample of n (n >= 1)."""
    return min(n, max(1, math.ceil(n * p - 1e-9)))


def ci_ranks(n: int, p: float, z: float = Z_95) -> tuple[int, int]:
    """1-based ranks (low, high) of the order-statistic confidence interval."""
    spread = z * math.sqrt(n * p * (1.0 - p))
    low = math.floor(n * p - spread)
    high = math.ceil(n * p + spread)
    return min(n, max(1, low)), min(n, max(1, high))


@lru_cache(maxsize=4096)
def min_samples_for_claim(p: float, t: int, confidence: float = CLAIM_CONFIDENCE) -> int:
    """Smallest total h + t with ``P(Binomial(h+t, 1−p) <= t) < 1 − confidence``.

    MLPerf LoadGen's early-stopping sample size: 459 for P99 with t = 0.
    The CDF falls as the total grows, so a binary search finds it in O(log).
    """
    alpha = 1.0 - confidence
    low, high = t + 1, max(t + 2, 16)
    while stats.binom.cdf(t, high, 1.0 - p) >= alpha:
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        if stats.binom.cdf(t, mid, 1.0 - p) < alpha:
            high = mid
        else:
            low = mid + 1
    return low


def max_tail_for_claim(n: int, p: float, confidence: float = CLAIM_CONFIDENCE) -> int | None:
    """Largest t with ``min_samples_for_claim(p, t) <= n``; None when n is too small.

    Equivalent to the largest t with ``P(Binomial(n, 1−p) <= t) < 1 − confidence``.
    """
    if n <= 0:
        return None
    alpha = 1.0 - confidence
    k = int(stats.binom.ppf(alpha, n, 1.0 - p))
    while k >= 0 and stats.binom.cdf(k, n, 1.0 - p) >= alpha:
        k -= 1
    while stats.binom.cdf(k + 1, n, 1.0 - p) < alpha:
        k += 1
    return k if k >= 0 else None


def percentile_ranks(n: int, p: float, z: float = Z_95) -> tuple[int, ...]:
    """The 1-based ranks :func:`percentile_ci` reads in a sample of n (n >= 1): the
    estimate, the CI bounds and, when claimed, the early-stopping bound."""
    low, high = ci_ranks(n, p, z)
    tail = max_tail_for_claim(n, p)
    return (nearest_rank(n, p), low, high) + (() if tail is None else (n - tail,))


def order_statistics(values: np.ndarray, ranks) -> np.ndarray:
    """A copy of ``values`` (float64) in which every 1-based rank of ``ranks`` holds the
    value a full ascending sort would put there (the rest is in no particular order).

    ``np.partition`` at those ranks: O(n) per region between them instead of a sort's
    O(n log n), several times faster for the handful of ranks a percentile reads."""
    values = np.asarray(values, dtype=np.float64)
    kth = sorted({int(r) - 1 for r in ranks if 1 <= r <= len(values)})
    return np.partition(values, kth) if kth else values.copy()


def nearest_rank_value(values: np.ndarray, p: float) -> float:
    """The nearest-rank p-quantile of a non-empty sample (no sort: :func:`order_statistics`)."""
    rank = nearest_rank(len(values), p)
    return float(order_statistics(values, (rank,))[rank - 1])


def percentile_ci(sorted_ms: np.ndarray, p: float, z: float = Z_95) -> dict:
    """The p-quantile of an ascending sample in ms, with its 95% CI and claim.

    Only the ranks of :func:`percentile_ranks` are read, so an :func:`order_statistics`
    array at those ranks serves as well as a sorted one.
    Returns ``{"value_ms", "ci_low_ms", "ci_high_ms", "n", "claimed", "bound_ms"}``;
    values are None when the sample is empty; ``bound_ms`` is None unless claimed.
    """
    n = int(len(sorted_ms))
    if n == 0:
        return {"value_ms": None, "ci_low_ms": None, "ci_high_ms": None, "n": 0,
                "claimed": False, "bound_ms": None}
    estimate, low, high, *bound = percentile_ranks(n, p, z)
    return {
        "value_ms": float(sorted_ms[estimate - 1]),
        "ci_low_ms": float(sorted_ms[low - 1]),
        "ci_high_ms": float(sorted_ms[high - 1]),
        "n": n,
        "claimed": bool(bound),
        "bound_ms": float(sorted_ms[bound[0] - 1]) if bound else None,
    }


def percentile_set(values_ms: np.ndarray) -> dict:
    """P50/P90/P95/P99/P99.9 (each with CI and claim) and ``max`` = ``{value_ms, n}`` of a sample in ms.

    The maximum is a measured value, never an estimate, so it carries no CI or claim.
    Cost: one partition at the ranks read (:func:`order_statistics`), not a sort.
    """
    values = np.asarray(values_ms, dtype=np.float64)
    n = len(values)
    ranks = [rank for _, p in STANDARD_PERCENTILES for rank in percentile_ranks(n, p)] + [n] if n else []
    ordered = order_statistics(values, ranks)
    result = {name: percentile_ci(ordered, p) for name, p in STANDARD_PERCENTILES}
    result["max"] = {"value_ms": float(ordered[-1]) if n else None, "n": int(n)}
    return result


def typed_percentile_set(values_ms: np.ndarray) -> PercentileSet:
    """:func:`percentile_set` as the analysis's :class:`~tailscope.analysis_model.percentiles.PercentileSet`
    (ms; the same values), for the sections built as types."""
    return as_percentile_set(percentile_set(values_ms))


def as_percentile_set(figures: dict) -> PercentileSet:
    """A :func:`percentile_set`-shaped dict (each entry as :func:`percentile_ci`'s, ``max`` as
    ``{value_ms, n}``) as a :class:`~tailscope.analysis_model.percentiles.PercentileSet`."""
    return PercentileSet(**{name: Percentile(**figures[name]) for name, _ in STANDARD_PERCENTILES},
                         max=MaxValue(**figures["max"]))


def grouped_quantile(sorted_values: np.ndarray, group_starts: np.ndarray,
                     group_counts: np.ndarray, p: float) -> np.ndarray:
    """Nearest-rank p-quantile of each group of a group-sorted array (vectorised).

    ``sorted_values`` is sorted by (group, value); group g occupies
    ``[group_starts[g], group_starts[g] + group_counts[g])``. Empty groups give NaN.
    """
    counts = np.asarray(group_counts, dtype=np.int64)
    ranks = np.clip(np.ceil(counts * p - 1e-9).astype(np.int64), 1, None)
    index = np.asarray(group_starts, dtype=np.int64) + ranks - 1
    out = np.full(len(counts), np.nan)
    has = counts > 0
    out[has] = sorted_values[index[has]]
    return out


def stable_group_order(groups: np.ndarray) -> np.ndarray:
    """Indices sorting int ``groups`` ascending, keeping the given order within a group
    (a radix sort, O(n), when the groups fit 16 bits; else numpy's stable merge sort)."""
    if len(groups) and groups.min() >= 0 and int(groups.max()) < 2**16:
        groups = groups.astype(np.uint16)  # numpy's stable sort is a radix sort for 16-bit keys
    return np.argsort(groups, kind="stable")


def group_sort(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Indices sorting by (group, value): a value sort, then a stable radix sort of the int groups.

    Same order as ``np.lexsort((values, groups))`` (ties aside), several times faster at
    millions of rows, since lexsort compares both keys in every pass. When the values
    are a subset of requests' latencies, :meth:`~.records.RequestArrays.latency_rows`
    and :func:`stable_group_order` share one latency sort between callers instead.
    """
    by_value = np.argsort(values)
    return by_value[stable_group_order(groups[by_value])]


def weighted_grouped_quantiles(groups: np.ndarray, values: np.ndarray, weights: np.ndarray,
                               n_groups: int, qs: tuple[float, ...]) -> dict[float, np.ndarray]:
    """Nearest-rank quantiles of many weighted samples at once, without expanding them.

    Element i stands for ``weights[i]`` (a non-negative integer, e.g. a histogram bucket's
    count) samples of value ``values[i]`` in group ``groups[i]`` (int in ``[0, n_groups)``).
    The q-quantile of a group is the value at 1-based rank ``ceil(total·q)`` (at least 1) of
    its expanded ascending sample — the same rank as :func:`grouped_quantile`. Groups of
    total weight 0 give NaN. Cost: O(E log E) for E elements."""
    out = {q: np.full(n_groups, np.nan) for q in qs}
    if len(groups) == 0:
        return out
    order = group_sort(groups, values)
    sorted_values = values[order]
    cumulative = np.cumsum(np.asarray(weights, dtype=np.int64)[order])
    totals = np.bincount(groups, weights=weights, minlength=n_groups).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(totals)[:-1]))
    has = totals > 0
    for q in qs:
        ranks = np.clip(np.ceil(totals * q - 1e-9).astype(np.int64), 1, None)
        index = np.searchsorted(cumulative, offsets + ranks, side="left")
        out[q][has] = sorted_values[np.minimum(index, len(sorted_values) - 1)][has]
    return out
