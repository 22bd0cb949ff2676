"""Judging one figure of a run against its baseline: bootstrap intervals and the regression rule.

Shared by the latency comparison (:mod:`.baseline`) and the LLM figures (:mod:`.llm_compare`).
:func:`bootstrap_quantiles` draws nearest-rank quantile replicates without resampling the data
(one Beta draw per replicate, see :mod:`.baseline`); :func:`compare_percentile` judges one
percentile's change: *significant* when its interval excludes 0, *regressed* when the relative
change is above ``threshold``, the interval lies above 0 and both runs can claim the percentile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.stats.percentiles import min_samples_for_claim, nearest_rank


@dataclass(frozen=True)
class CompareRules:
    """``threshold``: relative change that counts (0.10 = 10%); ``confidence`` of the intervals."""

    threshold: float = 0.10
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0


def bootstrap_quantiles(sorted_values: np.ndarray, p: float, resamples: int,
                        rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap replicates of the nearest-rank p-quantile of a sorted sample."""
    n = len(sorted_values)
    r = nearest_rank(n, p)
    u = rng.beta(r, n - r + 1, size=resamples)
    ranks = np.clip(np.ceil(n * u).astype(np.int64), 1, n)
    return sorted_values[ranks - 1]


def interval(values: np.ndarray, confidence: float) -> list[float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return [float(low), float(high)]


def compare_percentile(base: np.ndarray, current: np.ndarray, p: float, rules: CompareRules,
                       rng: np.random.Generator) -> dict | None:
    """One percentile's change with intervals and judgement; None when a side is empty."""
    if len(base) == 0 or len(current) == 0:
        return None
    b = float(base[nearest_rank(len(base), p) - 1])
    c = float(current[nearest_rank(len(current), p) - 1])
    boot_b = bootstrap_quantiles(base, p, rules.resamples, rng)
    boot_c = bootstrap_quantiles(current, p, rules.resamples, rng)
    change_ci = interval(boot_c - boot_b, rules.confidence)
    relative = (c - b) / b if b > 0 else None
    claimable = min(len(base), len(current)) >= min_samples_for_claim(p, 0)
    significant = change_ci[0] > 0 or change_ci[1] < 0
    regressed = bool(claimable and change_ci[0] > 0 and relative is not None and relative > rules.threshold)
    improved = bool(claimable and change_ci[1] < 0 and relative is not None and relative < -rules.threshold)
    return {"baseline_ms": b, "baseline_ci_ms": interval(boot_b, rules.confidence),
            "current_ms": c, "current_ci_ms": interval(boot_c, rules.confidence),
            "change_ms": c - b, "change_ci_ms": change_ci, "relative_change": relative,
            "significant": bool(significant), "regressed": regressed, "improved": improved,
            "claimable": bool(claimable), "baseline_n": int(len(base)), "current_n": int(len(current))}
