"""Issue 28: the drift check tells a mid-run bump (rise, then back) from a trend (a monotone rise)
from steady noise (neither), at 1, 100 and 5,000 requests/s (seeded synthetic runs)."""

from __future__ import annotations

import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.testkit.synthetic import write_synthetic_run

#: (rate req/s, run s): 1 req/s needs minutes for enough requests to judge a trend.
RATES = [(1, 300), (100, 60), (5000, 60)]


def _drift(path, rate: float, duration_s: float, **kwargs) -> dict:
    write_synthetic_run(path, duration_s=duration_s, rate=rate, seed=1, with_signals=False, **kwargs)
    return analyze_run(path)["patterns"]["drift"]


@pytest.mark.parametrize(("rate", "duration_s"), RATES)
def test_a_bump_late_in_the_run_is_a_bump_with_its_span(tmp_path, rate, duration_s):
    """The Triton shape: a quarter of the run raised, ending 12% before its end. Before, a bump this
    late made the medians trend ("trending"), and at 1 req/s its spike ran to the run's end, so the
    spike-based check never saw latency come back."""
    lo, hi = 0.63 * duration_s, 0.88 * duration_s
    drift = _drift(tmp_path / "bump", rate, duration_s,
                   spikes=[{"kind": "postprocess", "at_s": lo, "duration_s": hi - lo, "extra_ms": 40}])
    assert drift["verdict"] == "stable" and drift["median"]["p_value"] >= 0.01, drift["summary"]
    ((start, end),) = drift["bump"]
    segment_s = drift["segment_s"]
    assert abs(start - lo) <= 1.5 * segment_s and abs(end - hi) <= 1.5 * segment_s, drift["bump"]
    assert drift["summary"].startswith("a mid-run bump, not a trend: the median rose +")
    assert f"at {start:.0f}–{end:.0f} s and came back" in drift["summary"]


@pytest.mark.parametrize(("rate", "duration_s"), RATES)
def test_a_bump_in_the_middle_leaves_no_trend_and_is_still_named(tmp_path, rate, duration_s):
    lo, hi = 0.4 * duration_s, 0.6 * duration_s
    drift = _drift(tmp_path / "mid", rate, duration_s,
                   spikes=[{"kind": "postprocess", "at_s": lo, "duration_s": hi - lo, "extra_ms": 40}])
    assert drift["verdict"] == "stable" and drift["bump"] is not None
    ((start, end),) = drift["bump"]
    assert abs(start - lo) <= 1.5 * drift["segment_s"] and abs(end - hi) <= 1.5 * drift["segment_s"]


@pytest.mark.parametrize(("rate", "duration_s"), RATES)
def test_a_monotone_rise_is_a_trend_not_a_bump(tmp_path, rate, duration_s):
    drift = _drift(tmp_path / "rise", rate, duration_s, latency_drift_per_s=1.0 / duration_s)
    assert drift["bump"] is None and drift["verdict"] == "trending", drift["summary"]
    assert drift["median"]["p_value"] < 0.01 and drift["relative_change"] > 0.4


@pytest.mark.parametrize(("rate", "duration_s"), RATES)
def test_a_rise_that_stays_to_the_end_is_not_a_bump(tmp_path, rate, duration_s):
    drift = _drift(tmp_path / "step", rate, duration_s,
                   spikes=[{"kind": "postprocess", "at_s": 0.6 * duration_s, "duration_s": 0.4 * duration_s, "extra_ms": 40}])
    assert drift["bump"] is None and drift["verdict"] == "trending", drift["summary"]


@pytest.mark.parametrize(("rate", "duration_s"), RATES)
@pytest.mark.parametrize("seed", [2, 3])
def test_steady_noise_is_neither_a_trend_nor_a_bump(tmp_path, rate, duration_s, seed):
    write_synthetic_run(tmp_path / "steady", duration_s=duration_s, rate=rate, seed=seed, with_signals=False)
    drift = analyze_run(tmp_path / "steady")["patterns"]["drift"]
    assert drift["verdict"] == "stable" and drift["bump"] is None, drift["summary"]
