"""Log-bucketed duration histograms: the mergeable form of latency in ``windows.arrow``.

Bucket ``i`` holds durations in ``[FLOOR·G^i, FLOOR·G^(i+1))`` ns with
``FLOOR = 1 µs`` and ``G = 1.02``; everything below 1 µs shares bucket 0 and
everything above ``FLOOR·G^BUCKETS`` (≈ 5.6 h) the last bucket. A quantile read
from a histogram is the bucket's geometric middle, so it is within
``RELATIVE_ERROR`` (√1.02 − 1 ≈ 0.995 %, i.e. ±1 %) of the exact order statistic,
relative, whatever the distribution. Buckets are 2 % wide (upper / lower bound =
``GROWTH``); ±1 % is half of that on a log scale. This module is the one home of
the layout: the live recorder and the analyzers import it.

Histograms are stored sparse — ascending bucket indexes and their counts — and
merge by adding counts, so per-window rows written by several processes or
several flushes add up to the same histogram as one pass over every request.
Memory of a dense histogram: ``BUCKETS`` int64 counters (9.6 kB).
"""

from __future__ import annotations

import math

import numpy as np

#: Upper bound of bucket 0, ns (1 µs).
FLOOR_NS = 1_000
#: Upper bound / lower bound of every bucket.
GROWTH = 1.02
#: Number of buckets (the last one also holds everything above ≈ 5.6 h).
BUCKETS = 1200
#: Largest relative error of a quantile read as its bucket's geometric middle.
RELATIVE_ERROR = math.sqrt(GROWTH) - 1.0
_INV_LOG_GROWTH = 1.0 / math.log(GROWTH)


def bucket_of(duration_ns: int) -> int:
    """Bucket index of one duration in ns (O(1))."""
    if duration_ns <= FLOOR_NS:
        return 0
    return min(int(math.log(duration_ns / FLOOR_NS) * _INV_LOG_GROWTH), BUCKETS - 1)


def buckets_of(durations_ns: np.ndarray) -> np.ndarray:
    """Bucket indexes of many durations (vectorised; NaN-free int or float ns)."""
    values = np.maximum(np.asarray(durations_ns, dtype=np.float64), FLOOR_NS)
    index = np.floor(np.log(values / FLOOR_NS) * _INV_LOG_GROWTH).astype(np.int64)
    return np.clip(index, 0, BUCKETS - 1)


def bucket_value_ms(index) -> np.ndarray | float:
    """Representative duration of bucket(s) in ms: the geometric middle of its bounds."""
    return FLOOR_NS * GROWTH ** (np.asarray(index, dtype=np.float64) + 0.5) / 1e6


def to_sparse(dense: np.ndarray) -> tuple[list[int], list[int]]:
    """(bucket indexes, counts) of the non-empty buckets of a dense histogram."""
    index = np.flatnonzero(dense)
    return index.tolist(), dense[index].tolist()


def add_sparse(dense: np.ndarray, index, counts) -> None:
    """Add a sparse histogram into ``dense`` in place (indexes may repeat)."""
    if index is not None and len(index):
        np.add.at(dense, np.asarray(index, dtype=np.int64), np.asarray(counts, dtype=np.int64))


def quantile_ms(dense: np.ndarray, q: float) -> float | None:
    """Nearest-rank ``q``-quantile (0..1) of a dense histogram in ms; None when empty."""
    total = int(dense.sum())
    if total == 0:
        return None
    rank = min(total, max(1, math.ceil(q * total - 1e-9)))
    return float(bucket_value_ms(int(np.searchsorted(np.cumsum(dense), rank, side="left"))))


def rank_value_ms(dense: np.ndarray, rank: int) -> float | None:
    """The value of 1-based ``rank`` in a dense histogram, ms (None when out of range)."""
    total = int(dense.sum())
    if total == 0 or rank < 1 or rank > total:
        return None
    return float(bucket_value_ms(int(np.searchsorted(np.cumsum(dense), rank, side="left"))))


def max_ms(dense: np.ndarray) -> float | None:
    """Upper-bucket representative of the largest value, ms; None when empty."""
    index = np.flatnonzero(dense)
    return float(bucket_value_ms(int(index[-1]))) if len(index) else None
