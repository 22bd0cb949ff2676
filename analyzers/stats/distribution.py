"""Compact latency distributions: fixed log-spaced histograms per request class.

Every run uses the same bin grid — ``BINS_PER_DECADE`` (20) log-spaced bins
per decade from ``MIN_MS`` (0.01 ms) to ``MAX_MS`` (10^6 ms = 1,000 s), 160
bins in all — so the histograms of two runs are directly comparable and
mergeable (add the counts). Values below ``MIN_MS`` count in the first bin,
values above ``MAX_MS`` in the last. A bin spans a factor of 10^(1/20) ≈
1.122, so any quantile read from a histogram is within ±6 % of the exact one.

Only the bins between the lowest and the highest non-empty bin (over all
classes) are kept: at most 161 edges and 160 counts per class, about 2 kB of
JSON per class whatever the run's length. Cost: O(n) per class (one
``np.searchsorted`` + ``np.bincount``).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.records import ClassCounts, Distribution
from tailscope.analyzers.inputs.records import RequestArrays

MIN_MS = 0.01
MAX_MS = 1_000_000.0
BINS_PER_DECADE = 20
#: Name of the all-requests entry in ``classes``.
ALL_CLASSES = "all"


def bin_edges_ms() -> np.ndarray:
    """The fixed grid: 161 edges in ms, log-spaced, from MIN_MS to MAX_MS."""
    decades = int(round(np.log10(MAX_MS / MIN_MS)))
    return MIN_MS * np.power(10.0, np.arange(decades * BINS_PER_DECADE + 1) / BINS_PER_DECADE)


def bin_counts(values_ms: np.ndarray, edges: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Counts per bin of the full grid (len(edges) − 1); NaN values are ignored. ``weights``: how
    many requests each value stands for (e.g. a histogram bucket's count; None: one each)."""
    keep = ~np.isnan(values_ms)
    index = np.clip(np.searchsorted(edges, values_ms[keep], side="right") - 1, 0, len(edges) - 2)
    if weights is None:
        return np.bincount(index, minlength=len(edges) - 1)
    return np.bincount(index, weights=weights[keep], minlength=len(edges) - 1).astype(np.int64)


def latency_distribution(req: RequestArrays) -> Distribution:
    """The ``distribution`` section (:class:`~tailscope.analysis_model.records.Distribution`) of
    successful requests' latency.

    ``classes`` holds ``"all"`` first, then each request class by name; the
    edges are trimmed to the non-empty range (empty lists for a run without
    successful requests).
    """
    edges = bin_edges_ms()
    ok = req.is_ok
    full = {ALL_CLASSES: bin_counts(req.latency_ms[ok], edges)}
    for name in req.class_names(ok):
        full[name] = bin_counts(req.latency_ms[ok & req.class_mask(name)], edges)
    return distribution_section(full, edges)


def distribution_section(full: dict[str, np.ndarray], edges: np.ndarray) -> Distribution:
    """The section from per-class counts on the full grid (``"all"`` first): edges and counts
    trimmed to the bins between the lowest and the highest non-empty one."""
    occupied = np.flatnonzero(full[ALL_CLASSES])
    if len(occupied) == 0:
        return Distribution("ms", [], {ALL_CLASSES: ClassCounts(0, [])})
    lo, hi = int(occupied[0]), int(occupied[-1]) + 1
    return Distribution(
        unit="ms",
        bin_edges_ms=[float(e) for e in edges[lo:hi + 1]],
        classes={name: ClassCounts(n=int(counts.sum()), counts=counts[lo:hi].tolist()) for name, counts in full.items()},
    )
