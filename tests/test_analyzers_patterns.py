"""Patterns across a run: periodic spikes, latency drift and memory leaks (seeded synthetic runs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.patterns.trends import PatternRules, spectral_period
from tailscope.testkit.synthetic import write_synthetic_run


def test_periodic_spikes_are_found_every_15_s(tmp_path):
    spikes = [{"kind": "gc", "at_s": 7 + 15 * k, "duration_s": 1.5, "extra_ms": 120} for k in range(6)]
    write_synthetic_run(tmp_path / "periodic", duration_s=95, rate=60, seed=8, spikes=spikes)
    analysis = analyze_run(tmp_path / "periodic")
    periodic = analysis["patterns"]["periodic"]
    assert periodic["detected"] and periodic["period_s"] == pytest.approx(15, abs=1)
    assert "every 15" in periodic["summary"]
    assert "periodic_spikes" in {w["code"] for w in analysis["warnings"]}
    assert all(s["causes"][0]["kind"] == "gc" for s in analysis["spikes"])


def test_spectrum_finds_a_period_the_spike_list_misses():
    rng = np.random.default_rng(2)
    x = rng.binomial(50, 0.1, size=600) / 50.0
    x[::30] += 0.3  # one bad second every 30 s
    found = spectral_period(x, PatternRules())
    assert found.p_value < 0.01 and found.period_s == pytest.approx(30, rel=0.05)
    assert spectral_period(rng.binomial(50, 0.1, size=600) / 50.0, PatternRules()).p_value > 0.01


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    kwargs = dict(duration_s=1200, rate=5, with_spans=False)
    write_synthetic_run(root / "steady", seed=1, **kwargs)
    write_synthetic_run(root / "drift", seed=2, latency_drift_per_s=0.0005, **kwargs)  # +60% over 20 min
    write_synthetic_run(root / "leak", seed=3, rss_growth_bytes_per_s=50e3, **kwargs)  # +60 MB
    return {name: analyze_run(root / name) for name in ("steady", "drift", "leak")}


def test_steady_long_run_has_no_pattern(long_runs):
    patterns = long_runs["steady"]["patterns"]
    assert not patterns["periodic"]["detected"]
    assert patterns["drift"]["verdict"] == "stable" and not patterns["drift"]["detected"]
    assert patterns["leak"]["verdict"] == "flat"
    assert long_runs["steady"]["spikes"] == []


def test_latency_drift_is_detected_with_its_significance(long_runs):
    drift = long_runs["drift"]["patterns"]["drift"]
    assert drift["detected"] and drift["verdict"] == "drift"
    assert drift["median"]["p_value"] < 1e-4 and 0.3 < drift["relative_change"] < 0.9
    assert "rose" in drift["summary"]
    assert "latency_drift" in {w["code"] for w in long_runs["drift"]["warnings"]}
    assert long_runs["drift"]["soak"]["verdicts_source"] == "patterns"


def test_memory_leak_is_detected_from_the_rss_slope(long_runs):
    leak = long_runs["leak"]["patterns"]["leak"]
    assert leak["detected"] and leak["series"] == "proc.rss_bytes"
    assert leak["growth_bytes"] == pytest.approx(60e6, rel=0.1)
    assert leak["slope_bytes_per_hour"] == pytest.approx(180e6, rel=0.1)
    assert "memory_leak" in {w["code"] for w in long_runs["leak"]["warnings"]}


def test_short_runs_never_flag_drift_or_leak(tmp_path):
    write_synthetic_run(tmp_path / "short", duration_s=60, rate=20, seed=6, rss_growth_bytes_per_s=1e6,
                        latency_drift_per_s=0.01)
    patterns = analyze_run(tmp_path / "short")["patterns"]
    assert not patterns["drift"]["detected"] and not patterns["leak"]["detected"]
    assert patterns["leak"]["growth_bytes"] > 50e6  # the numbers are still reported


def test_the_soak_view_needs_ten_minutes_or_retention_and_an_hourly_slope_ten_minutes_of_data(tmp_path, long_runs):
    """A 60-s demo once showed a "Soak" section extrapolating "+5532.6 MB/h" of RSS: a short run
    without retention: has no soak view, and no MB/h anywhere; its RSS change is stated in MB."""
    from tailscope.reports.data import build_report_data
    from tailscope.reports.html import render_html

    write_synthetic_run(tmp_path / "short", duration_s=60, rate=20, seed=6, rss_growth_bytes_per_s=1.5e6)
    short = analyze_run(tmp_path / "short")
    assert short["soak"]["shown"] is False and short["soak"]["periods"] == []
    assert "10 min" in short["soak"]["reason"] and "retention:" in short["soak"]["reason"]
    leak = short["patterns"]["leak"]
    assert leak["slope_bytes_per_hour"] is None and "MB over the run" in leak["summary"]
    data = build_report_data(short)
    assert data["soak"] is None
    text = json.dumps(short) + render_html(data)
    assert "MB/h" not in text and "ms/h" not in text and 'id="soak"' not in text
    long = long_runs["leak"]
    assert long["soak"]["shown"] is True and long["soak"]["reason"] is None and len(long["soak"]["periods"]) >= 2
    assert long["patterns"]["leak"]["slope_bytes_per_hour"] == pytest.approx(180e6, rel=0.1)
    assert "MB/h" in long["patterns"]["leak"]["summary"]
    assert build_report_data(long)["soak"] is not None
