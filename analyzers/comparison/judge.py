"""Judging one figure of a comparison: resampled intervals and the regression rule.

Shared by the latency comparison (:mod:`.baseline`) and the LLM figures (:mod:`.llm_compare`).
A figure's replicates on each side come from the side's resampling (:mod:`.resampling`: runs,
then time blocks within each run; ``CompareRules.method == "hierarchical"``, the default), or,
for reference only, from a per-request bootstrap that treats every request as independent
(``method == "request"``: :func:`bootstrap_quantiles`, one Beta draw per replicate, see
:mod:`.baseline`). :func:`judge_change` judges a change: *significant* when its interval excludes
0, *regressed* when it moved the bad way by more than ``threshold`` (relative), the interval lies
on that side of 0 and both sides can claim the figure (early stopping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.comparison.resampling import BLOCK_S, log_bins, quantile_replicates
from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank

#: The resampling methods: ``hierarchical`` (runs, then time blocks; the judge) and ``request``
#: (every request independent; kept to show what it gets wrong, docs/analyzers/compare.md).
METHODS = ("hierarchical", "request")


@dataclass(frozen=True)
class CompareRules:
    """``threshold``: relative change that counts (0.10 = 10%); ``confidence`` of the intervals;
    ``resamples`` replicates per side; ``method`` (:data:`METHODS`); ``block_s``: the time-block
    length in seconds (:mod:`.resampling`)."""

    threshold: float = 0.10
    confidence: float = 0.95
    resamples: int = 4000
    seed: int = 0
    method: str = "hierarchical"
    block_s: float = BLOCK_S

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown comparison method {self.method!r} (expected one of {', '.join(METHODS)})")


@dataclass(frozen=True, slots=True)
class Judged:
    """A figure's change ``current − baseline`` judged (:func:`judge_change`), in the figure's unit:
    each side's value with its interval at the rules' confidence, the change with its interval
    (``significant`` when it excludes 0) and its gate interval (read at :func:`gate_confidence`:
    ``regressed`` / ``improved``), the relative change (None when the baseline is 0) and whether
    both sides can claim the figure. Intervals are ``(low, high)``."""

    baseline: float
    baseline_ci: tuple[float, float]
    current: float
    current_ci: tuple[float, float]
    change: float
    change_ci: tuple[float, float]
    gate_ci: tuple[float, float]
    relative_change: float | None
    significant: bool
    regressed: bool
    improved: bool
    claimable: bool


@dataclass(frozen=True, slots=True)
class JudgedPercentile:
    """One percentile (``name``, e.g. ``p99``) of both sides judged, with the sides' sample sizes."""

    name: str
    judged: Judged
    baseline_n: int
    current_n: int


@dataclass(frozen=True)
class Figure:
    """One figure's values on one side (e.g. all requests' latency, ms): ``values`` (one per
    request, any order), ``blocks`` (each value's global time block, :class:`.resampling.BlockLayout`)
    and the side's replicate ``weights`` (``(resamples, blocks)``; None under ``method="request"``)."""

    values: np.ndarray
    blocks: np.ndarray
    weights: np.ndarray | None

    def __len__(self) -> int:
        return len(self.values)


def bootstrap_quantiles(sorted_values: np.ndarray, p: float, resamples: int,
                        rng: np.random.Generator) -> np.ndarray:
    """``resamples`` per-request bootstrap replicates of the nearest-rank p-quantile of a sorted
    sample (every request independent; ``method="request"``)."""
    n = len(sorted_values)
    r = nearest_rank(n, p)
    u = rng.beta(r, n - r + 1, size=resamples)
    ranks = np.clip(np.ceil(n * u).astype(np.int64), 1, n)
    return sorted_values[ranks - 1]


def interval(values: np.ndarray, confidence: float, fallback: float | None = None) -> tuple[float, float]:
    """The central ``confidence`` interval of the finite ``values`` (replicates that drew nothing
    are NaN); ``[fallback, fallback]`` when none is finite."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        point = float("nan") if fallback is None else float(fallback)
        return point, point
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def gate_confidence(confidence: float, family: int, runs: tuple[int, int] = (1, 1)) -> float:
    """The confidence each judged interval is read at.

    A family of ``family`` checks judged together gets ``1 − (1 − confidence)/family``
    (Bonferroni): the chance that any of them flags a change that is not there stays at most
    ``1 − confidence``. With ``runs`` (baseline, current) of at least 2 each, the run-to-run
    spread is estimated from few runs: resampling R runs with replacement under-states its
    variance by (R − 1)/R and its quantiles follow a t, not a normal, law. So the interval is
    expanded (Hesterberg's expanded percentile interval): it is read at the normal tail of
    ``sqrt(R/(R − 1)) · t(1 − α/2; R_b + R_c − 2)``, R the smaller side's run count."""
    alpha = (1.0 - confidence) / max(1, family)
    smaller = min(runs)
    if smaller < 2:
        return 1.0 - alpha
    from scipy import stats

    z = math.sqrt(smaller / (smaller - 1)) * float(stats.t.ppf(1.0 - alpha / 2.0, sum(runs) - 2))
    return 1.0 - 2.0 * float(stats.norm.sf(z))


def judge_change(base: float, current: float, boot_base: np.ndarray, boot_current: np.ndarray, claimable: bool,
                 rules: CompareRules, lower_is_worse: bool = False, family: int = 1,
                 runs: tuple[int, int] = (1, 1)) -> Judged:
    """A figure's change ``current − base`` with intervals (from the two sides' replicates) and
    its judgement (module docstring). Values keep the figure's unit.

    ``change_ci`` is at ``rules.confidence`` (*significant* when it excludes 0); the verdict
    (``regressed``, ``improved``) reads ``gate_ci``, the change interval at
    :func:`gate_confidence` for a ``family`` of checks judged together (e.g. 20 latency
    percentiles and classes), so that one comparison's false-alarm rate is at most
    ``1 − confidence``, not ``family`` times it."""
    change = boot_current - boot_base
    change_ci = interval(change, rules.confidence, fallback=current - base)
    gate_ci = interval(change, gate_confidence(rules.confidence, family, runs), fallback=current - base)
    relative = (current - base) / base if base > 0 else None
    bad_side = gate_ci[1] < 0 if lower_is_worse else gate_ci[0] > 0
    good_side = gate_ci[0] > 0 if lower_is_worse else gate_ci[1] < 0
    moved = None if relative is None else relative * (-1.0 if lower_is_worse else 1.0)
    return Judged(baseline=base, baseline_ci=interval(boot_base, rules.confidence, fallback=base),
                  current=current, current_ci=interval(boot_current, rules.confidence, fallback=current),
                  change=current - base, change_ci=change_ci, gate_ci=gate_ci, relative_change=relative,
                  significant=bool(change_ci[0] > 0 or change_ci[1] < 0),
                  regressed=bool(claimable and bad_side and moved is not None and moved > rules.threshold),
                  improved=bool(claimable and good_side and moved is not None and moved < -rules.threshold),
                  claimable=bool(claimable))


def quantile_replicate_pairs(base: Figure, current: Figure, quantiles: list[float], rules: CompareRules,
                             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(len(quantiles), resamples)`` replicates of each quantile on both sides, by ``rules.method``."""
    if rules.method == "request":
        sb, sc = np.sort(base.values), np.sort(current.values)
        return (np.stack([bootstrap_quantiles(sb, p, rules.resamples, rng) for p in quantiles]),
                np.stack([bootstrap_quantiles(sc, p, rules.resamples, rng) for p in quantiles]))
    edges, represent = log_bins(base.values, current.values)
    return (quantile_replicates(base.values, base.blocks, base.weights, edges, represent, quantiles),
            quantile_replicates(current.values, current.blocks, current.weights, edges, represent, quantiles))


def compare_percentiles(base: Figure, current: Figure, percentiles: tuple, rules: CompareRules,
                        rng: np.random.Generator, family: int = 1,
                        runs: tuple[int, int] = (1, 1)) -> list[JudgedPercentile]:
    """One :class:`JudgedPercentile` per ``(name, p)`` in ``percentiles``: each nearest-rank
    percentile of both sides (all their requests pooled, in the values' unit), its change with
    intervals and judgement (``claimable``: both sides hold enough values to claim it) and the
    sample sizes; [] when a side is empty. ``family``: the number of checks judged together,
    ``runs``: the sides' run counts (:func:`gate_confidence`)."""
    if len(base) == 0 or len(current) == 0:
        return []
    sb, sc = np.sort(base.values), np.sort(current.values)
    quantiles = [p for _, p in percentiles]
    boot_b, boot_c = quantile_replicate_pairs(base, current, quantiles, rules, rng)
    out = []
    for i, (name, p) in enumerate(percentiles):
        b = float(sb[nearest_rank(len(sb), p) - 1])
        c = float(sc[nearest_rank(len(sc), p) - 1])
        claimable = min(len(sb), len(sc)) >= min_samples_for_claim(p, 0)
        judged = judge_change(b, c, boot_b[i], boot_c[i], claimable, rules, family=family, runs=runs)
        out.append(JudgedPercentile(name, judged, int(len(sb)), int(len(sc))))
    return out
