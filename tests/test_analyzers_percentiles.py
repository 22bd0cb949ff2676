"""Percentile CIs (coverage by simulation) and the MLPerf early-stopping totals."""

import numpy as np
import pytest

from tailscope.analyzers.stages.decomposition import stage_stats
from tailscope.analyzers.stats.percentiles import (
    STANDARD_PERCENTILES,
    ci_ranks,
    grouped_quantile,
    max_tail_for_claim,
    min_samples_for_claim,
    percentile_ci,
    percentile_set,
)


@pytest.mark.parametrize("p, totals", [(0.99, (459, 662, 838)), (0.90, (44, 64, 81))])
def test_early_stopping_totals_match_mlperf(p, totals):
    assert tuple(min_samples_for_claim(p, t) for t in range(3)) == totals


def test_larger_published_totals():
    assert min_samples_for_claim(0.99, 10) == 2010
    assert min_samples_for_claim(0.999, 0) == 4603


@pytest.mark.parametrize("n, claimed", [(458, False), (459, True), (5000, True)])
def test_p99_claimed_from_459_samples(n, claimed):
    values = np.sort(np.random.default_rng(1).lognormal(size=n))
    entry = percentile_ci(values, 0.99)
    assert entry["claimed"] is claimed
    assert (entry["bound_ms"] is not None) is claimed


def test_max_tail_agrees_with_min_samples():
    for n in (459, 661, 662, 837, 838, 2010):
        t = max_tail_for_claim(n, 0.99)
        assert min_samples_for_claim(0.99, t) <= n < min_samples_for_claim(0.99, t + 1)


@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_ci_coverage_is_95_percent_by_simulation(p):
    """Coverage of the true lognormal quantile over 4,000 seeded samples of 2,000."""
    rng = np.random.default_rng(7)
    n, reps = 2000, 4000
    true_q = float(np.exp(np.sqrt(2) * __import__("scipy").special.erfinv(2 * p - 1)))
    samples = np.sort(rng.lognormal(size=(reps, n)), axis=1)
    low, high = ci_ranks(n, p)
    covered = (samples[:, low - 1] <= true_q) & (samples[:, high - 1] >= true_q)
    assert abs(covered.mean() - 0.95) <= 0.02


def test_point_estimate_is_nearest_rank_and_inside_ci():
    values = np.arange(1, 1001, dtype=float)
    entry = percentile_ci(values, 0.99)
    assert entry["value_ms"] == 990.0
    assert entry["ci_low_ms"] <= entry["value_ms"] <= entry["ci_high_ms"]
    assert entry["n"] == 1000


def test_empty_sample_gives_nulls():
    result = percentile_set(np.array([]))
    assert result["p99"] == {"value_ms": None, "ci_low_ms": None, "ci_high_ms": None, "n": 0,
                             "claimed": False, "bound_ms": None}
    assert result["max"] == {"value_ms": None, "n": 0}


def test_grouped_quantile_matches_per_group():
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 5, size=500)
    values = rng.exponential(size=500)
    order = np.lexsort((values, groups))
    counts = np.bincount(groups, minlength=6)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    got = grouped_quantile(values[order], starts, counts, 0.9)
    for g in range(5):
        expect = np.sort(values[groups == g])[int(np.ceil(counts[g] * 0.9)) - 1]
        assert got[g] == expect
    assert np.isnan(got[5])


@pytest.mark.parametrize("n", [1, 2, 7, 458, 459, 1000, 20_000])
def test_percentile_set_from_a_partition_equals_the_sorted_reference(n):
    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(2.0, 1.0, n), 1)  # rounding: many ties
    before = values.copy()
    ordered = np.sort(values)
    expected = {name: percentile_ci(ordered, p) for name, p in STANDARD_PERCENTILES}
    expected["max"] = {"value_ms": float(ordered[-1]), "n": n}
    assert percentile_set(values) == expected
    assert np.array_equal(values, before), "the caller's array is not reordered"


def test_stage_stats_match_numpy_inverted_cdf_quantiles():
    rng = np.random.default_rng(3)
    column = rng.exponential(5.0, 10_001)
    column[::7] = np.nan
    stats = stage_stats(column)
    finite = column[~np.isnan(column)]
    assert stats.p50_ms == float(np.quantile(finite, 0.5, method="inverted_cdf"))
    assert stats.p99_ms == float(np.quantile(finite, 0.99, method="inverted_cdf"))
    assert stats.count == len(finite)
    assert stats.mean_ms == pytest.approx(float(finite.mean()))
