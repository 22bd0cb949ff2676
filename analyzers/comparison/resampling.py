"""Resampling one side of a comparison: its runs, then time blocks within each run.

A comparison side is one or more runs of the same scenario. Requests are not independent: a run
has its own machine state, warm-up and GC phase (a level shift for all its requests), and within a
run neighbouring seconds share queue state. So a replicate of a side is drawn the way the side was
made (a *hierarchical block bootstrap*):

1. draw ``R`` runs with replacement from the side's ``R`` runs (with one run: that run);
2. for every drawn run, draw its ``K`` time blocks with replacement from its own ``K`` blocks
   (blocks of :data:`BLOCK_S` consecutive seconds of the load period, counted from the run's first
   scheduled send; a request belongs to the block of its scheduled send);
3. the replicate's figure (a percentile, a rate, a share) is computed over every request of every
   drawn block, counted as often as its block was drawn.

The draws are expressed as weights: :func:`replicate_weights` gives a ``(resamples, blocks)``
matrix whose entry is how many times the replicate drew that block, and a figure's replicates
come from per-block sufficient statistics (a histogram of the block's values for a percentile;
sums for a rate or share) multiplied by that matrix. Percentile replicates are read from
histograms on log-spaced bins :data:`BIN_RELATIVE_WIDTH` wide (each bin stands for the mean of the
values in it), so a replicate costs O(blocks × bins), whatever the number of requests. The same
weights serve every figure of a side, so figures keep their correlation.

Block length: 5 s by default — longer than the correlation of queueing on the services tailscope
targets (a queue built by a burst drains within a second or two at the rates run), short enough
that a 20-s run still has 4 blocks and a 60-s run 12; a run longer than
``BLOCK_S × MAX_BLOCKS_PER_RUN`` (10 minutes) gets longer blocks, at most
:data:`MAX_BLOCKS_PER_RUN` per run (the cost stays bounded; longer blocks only widen intervals).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.inputs.records import NS_PER_S

#: Default block length in seconds (docs/analyzers/compare.md justifies it).
BLOCK_S = 5.0
#: A run is cut in at most this many blocks (longer runs get longer blocks).
MAX_BLOCKS_PER_RUN = 120
#: Relative width of the histogram bins percentile replicates are read from (0.5%).
BIN_RELATIVE_WIDTH = 0.005


@dataclass(frozen=True)
class BlockLayout:
    """The time blocks of a side's runs: per run, its load start (epoch ns), block length (ns)
    and number of blocks. Global block ids run over the runs in order."""

    starts_ns: tuple[int, ...]
    block_ns: tuple[int, ...]
    counts: tuple[int, ...]

    @classmethod
    def of_periods(cls, periods: list[tuple[int, int] | None], block_s: float = BLOCK_S) -> BlockLayout:
        """The layout of runs whose load periods (start, end epoch ns; None when empty) are given."""
        starts, lengths, counts = [], [], []
        for period in periods:
            start, end = period if period else (0, 0)
            duration = max(end - start, 1)
            length = max(int(block_s * NS_PER_S), -(-duration // MAX_BLOCKS_PER_RUN))
            starts.append(int(start))
            lengths.append(int(length))
            counts.append(max(1, int(round(duration / length))))
        return cls(tuple(starts), tuple(lengths), tuple(counts))

    @property
    def runs(self) -> int:
        return len(self.counts)

    @property
    def total(self) -> int:
        """Blocks over all runs."""
        return int(sum(self.counts))

    @property
    def block_s(self) -> float:
        """The longest block length of the side's runs, in seconds."""
        return max(self.block_ns) / NS_PER_S if self.block_ns else BLOCK_S

    def block_ids(self, run_index: int, t_ns: np.ndarray) -> np.ndarray:
        """Global block ids of times ``t_ns`` (epoch ns) in run ``run_index`` (clipped to its blocks)."""
        offset = int(sum(self.counts[:run_index]))
        local = (np.asarray(t_ns, dtype=np.int64) - self.starts_ns[run_index]) // self.block_ns[run_index]
        return offset + np.clip(local, 0, self.counts[run_index] - 1)


def replicate_weights(layout: BlockLayout, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, layout.total)`` float matrix: how often each replicate drew each block
    (runs drawn with replacement, then each drawn run's blocks with replacement)."""
    runs = layout.runs
    if runs == 1:
        run_draws = np.ones((resamples, 1), dtype=np.int64)
    else:
        picks = rng.integers(0, runs, size=(resamples, runs))
        run_draws = np.stack([(picks == r).sum(axis=1) for r in range(runs)], axis=1)
    weights = np.zeros((resamples, layout.total))
    offset = 0
    for r, k in enumerate(layout.counts):
        weights[:, offset:offset + k] = rng.multinomial(run_draws[:, r] * k, np.full(k, 1.0 / k))
        offset += k
    return weights


def log_bins(*samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(edges, representative value per bin) of log-spaced bins covering every value of
    ``samples``; each bin stands for the mean of the values that fall in it."""
    values = np.concatenate([np.asarray(s, dtype=np.float64) for s in samples])
    values = values[np.isfinite(values)]
    positive = values[values > 0]
    if len(positive) == 0:
        return np.array([0.0, 1.0]), np.array([0.0])
    lo, hi = float(positive.min()), float(positive.max())
    n_bins = max(1, int(np.ceil(np.log(hi / lo) / np.log1p(BIN_RELATIVE_WIDTH))) + 1)
    edges = lo * np.exp(np.linspace(0.0, n_bins * np.log1p(BIN_RELATIVE_WIDTH), n_bins + 1))
    edges[0] = -np.inf  # zero and tiny values fall in the first bin
    index = bin_index(edges, values)
    counts = np.bincount(index, minlength=n_bins)
    sums = np.bincount(index, weights=values, minlength=n_bins)
    centres = np.sqrt(np.maximum(edges[:-1], lo) * edges[1:])
    represent = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
    return edges, represent


def bin_index(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def quantile_replicates(values: np.ndarray, blocks: np.ndarray, weights: np.ndarray, edges: np.ndarray,
                        represent: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """``(len(quantiles), resamples)`` nearest-rank quantile replicates of ``values`` (one per
    request, in global block ``blocks``) under block ``weights``; NaN for a replicate that drew
    no value."""
    n_bins = len(represent)
    n_blocks = weights.shape[1]
    histogram = np.bincount(blocks * n_bins + bin_index(edges, values), minlength=n_blocks * n_bins)
    cumulative = np.cumsum(weights @ histogram.reshape(n_blocks, n_bins).astype(np.float64), axis=1)
    total = cumulative[:, -1]
    out = np.empty((len(quantiles), weights.shape[0]))
    for i, p in enumerate(quantiles):
        rank = np.maximum(np.ceil(total * p - 1e-9), 1.0)
        position = np.minimum((cumulative < rank[:, None]).sum(axis=1), n_bins - 1)
        out[i] = np.where(total > 0, represent[position], np.nan)
    return out


def ratio_replicates(numerator: np.ndarray, denominator: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Replicates of sum(numerator) / sum(denominator) over the drawn blocks (per-block sums
    given, one entry per global block); NaN where a replicate's denominator is 0."""
    num = weights @ np.asarray(numerator, dtype=np.float64)
    den = weights @ np.asarray(denominator, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
