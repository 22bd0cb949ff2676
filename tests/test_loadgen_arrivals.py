"""Arrival schedules (pure numpy, in-process): statistics, bounds, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tailscope.loadgen import arrivals
from tailscope.loadgen.arrivals import schedule_offsets_ns
from tailscope.loadgen.spec import ArrivalSpec


def _offsets(spec: ArrivalSpec, duration_s: float, max_requests: int = 10**9, seed: int = 7) -> np.ndarray:
    return np.concatenate(list(schedule_offsets_ns(spec, duration_s, max_requests, seed)))


def test_constant_offsets_are_exact_multiples_of_the_period():
    offsets = _offsets(ArrivalSpec(process="constant", rate=50), duration_s=2)
    assert offsets.dtype == np.int64
    assert offsets.size == 100
    assert np.all(np.diff(offsets) == 20_000_000)
    assert offsets[0] == 0


def test_constant_schedule_does_not_drift_over_many_chunks():
    rate = 3.0  # period 333_333_333.3 ns: rounding must not accumulate
    offsets = _offsets(ArrivalSpec(process="constant", rate=rate), duration_s=3 * arrivals.CHUNK_SIZE)
    assert offsets.size == 9 * arrivals.CHUNK_SIZE
    expected_last = round((offsets.size - 1) * 1e9 / rate)
    assert abs(int(offsets[-1]) - expected_last) <= 1


def test_poisson_gaps_pass_a_ks_test_against_the_exponential():
    rate = 200.0
    offsets = _offsets(ArrivalSpec(process="poisson", rate=rate), duration_s=50)
    gaps_s = np.diff(offsets) / 1e9
    result = stats.kstest(gaps_s, "expon", args=(0, 1 / rate))
    assert result.pvalue > 0.01
    assert offsets.size == pytest.approx(rate * 50, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_the_mean_and_variation_asked_for(burstiness):
    rate = 100.0
    offsets = _offsets(ArrivalSpec(process="gamma", rate=rate, burstiness=burstiness), duration_s=400)
    gaps_s = np.diff(offsets) / 1e9
    assert gaps_s.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps_s.std() / gaps_s.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


@pytest.mark.parametrize("process", ["constant", "poisson", "gamma"])
def test_schedule_is_bounded_by_duration_and_max_requests(process):
    spec = ArrivalSpec(process=process, rate=10_000, burstiness=0.5)
    by_duration = _offsets(spec, duration_s=1.5)
    assert by_duration.max() < 1_500_000_000
    assert np.all(np.diff(by_duration) >= 0)
    by_count = _offsets(spec, duration_s=100, max_requests=arrivals.CHUNK_SIZE + 17)
    assert by_count.size == arrivals.CHUNK_SIZE + 17


def test_schedule_is_yielded_in_bounded_chunks():
    chunks = list(schedule_offsets_ns(ArrivalSpec(process="poisson", rate=50_000), 1.0, 10**9, 1))
    assert len(chunks) > 5
    assert max(c.size for c in chunks) <= arrivals.CHUNK_SIZE


def test_same_seed_same_schedule_other_seed_other_schedule():
    spec = ArrivalSpec(process="gamma", rate=500, burstiness=0.3)
    first = _offsets(spec, duration_s=5, seed=11)
    again = _offsets(spec, duration_s=5, seed=11)
    other = _offsets(spec, duration_s=5, seed=12)
    assert np.array_equal(first, again)
    assert not np.array_equal(first[: min(first.size, other.size)], other[: min(first.size, other.size)])


def test_closed_loop_has_no_schedule():
    with pytest.raises(ValueError, match="closed"):
        next(schedule_offsets_ns(ArrivalSpec(process="closed", users=2), 1.0, 10, 1))
