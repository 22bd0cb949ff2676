"""Bounded memory and disk: histograms, the record keeper, retention, the disk budget,
and the analysis of a retained run against the exact records (all real files)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.retained import grouped_quantiles_ms, histogram_percentile_set
from tailscope.analyzers.spikes.detection import SpikeRules
from tailscope.analyzers.stats.percentiles import percentile_set
from tailscope.loadgen.disk_budget import DiskBudget
from tailscope.loadgen.locust_stats_trim import trim_per_second_counts
from tailscope.loadgen.record_keeper import RecordKeeper
from tailscope.loadgen.retention_section import RetentionPolicy
from tailscope.loadgen.window_stats import SpikeWatch
from tailscope.rundir import RunWriter, load_run
from tailscope.rundir import histograms as hist
from tailscope.rundir.request_record import RequestRecord
from tailscope.rundir.retention_policy import load_retention, trace_sampled

START_NS = 1_767_225_600 * 10**9


def test_histogram_quantiles_are_within_one_percent_on_named_distributions():
    rng = np.random.default_rng(1)
    for name, sample in {"lognormal": rng.lognormal(np.log(20e6), 0.6, 50_000),
                         "bimodal": np.concatenate([rng.normal(5e6, 5e5, 40_000), rng.normal(300e6, 2e7, 10_000)]),
                         "uniform": rng.uniform(1e5, 1e9, 50_000)}.items():
        dense = np.bincount(hist.buckets_of(sample), minlength=hist.BUCKETS)
        exact = percentile_set(np.sort(sample) / 1e6)
        approx = histogram_percentile_set(dense)
        for key in ("p50", "p90", "p99", "p999"):
            entry = getattr(approx, key)
            assert entry.value_ms == pytest.approx(exact[key]["value_ms"], rel=0.0101), (name, key)
            assert entry.claimed == exact[key]["claimed"] and entry.n == exact[key]["n"]


def test_sparse_histograms_merge_to_the_single_pass_histogram():
    rng = np.random.default_rng(2)
    values = rng.lognormal(16, 1, 10_000)
    whole = np.bincount(hist.buckets_of(values), minlength=hist.BUCKETS)
    merged = np.zeros(hist.BUCKETS, np.int64)
    for part in np.array_split(values, 7):
        index, counts = hist.to_sparse(np.bincount(hist.buckets_of(part), minlength=hist.BUCKETS))
        hist.add_sparse(merged, index, counts)
    assert np.array_equal(whole, merged)
    groups = np.repeat([0, 1], [3, 2])
    quantiles = grouped_quantiles_ms(groups, np.array([10, 20, 30, 5, 6]), np.array([1, 1, 1, 1, 9]), 3, (0.5,))
    assert quantiles[0.5][0] == pytest.approx(hist.bucket_value_ms(20))
    assert quantiles[0.5][1] == pytest.approx(hist.bucket_value_ms(6)) and np.isnan(quantiles[0.5][2])


def test_trace_sampling_follows_the_ratio_rule_and_nests():
    rng = np.random.default_rng(3)
    ids = [rng.bytes(16).hex() for _ in range(20_000)]
    at_1 = {t for t in ids if trace_sampled(t, 0.01)}
    at_5 = {t for t in ids if trace_sampled(t, 0.05)}
    assert at_1 <= at_5 and 0.03 < len(at_5) / len(ids) < 0.07
    assert not trace_sampled(None, 0.5) and not trace_sampled("zz", 0.5) and trace_sampled("ab", 1.0)


def _requests(rate=200, seconds=60, spike=(40.0, 41.0), seed=4, error_at=None):
    """Synthetic records (REQUESTS_SCHEMA order) in end-time order, with a latency spike."""
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    scheduled = START_NS + np.sort(rng.uniform(0, seconds * 1e9, n)).astype(np.int64)
    latency = rng.lognormal(np.log(10e6), 0.3, n)
    in_spike = (scheduled >= START_NS + spike[0] * 1e9) & (scheduled < START_NS + spike[1] * 1e9)
    latency[in_spike] += 400e6
    end = scheduled + latency.astype(np.int64)
    rows = []
    for i in np.argsort(end, kind="stable"):
        error = "refused" if error_at is not None and error_at[0] <= (scheduled[i] - START_NS) / 1e9 < error_at[1] else None
        rows.append((int(scheduled[i]), int(scheduled[i]) + 50_000, int(end[i]), None, "text", 0 if error else 200,
                     64, 32, rng.bytes(16).hex(), error,
                     "ConnectionRefusedError" if error else None, 0, None, 0))
    return rows


def _write(path, rows, policy):
    writer = RunWriter(str(path), {"name": "keeper", "scenario": {}})
    keeper = RecordKeeper(writer.requests, writer.windows, str(path), policy=policy, timeout_s=2.0)
    for row in rows:
        keeper.append_record(RequestRecord(*row))
    keeper.close()
    writer.close()
    return keeper


def test_record_keeper_keeps_every_record_without_a_policy(tmp_path):
    rows = _requests(seconds=10)
    keeper = _write(tmp_path / "all", rows, None)
    run = load_run(tmp_path / "all")
    assert len(run.requests) == len(rows) == keeper.kept
    assert int(run.windows.column("requests").to_numpy().sum()) == len(rows)
    assert load_retention(str(tmp_path / "all")) is None
    assert not [f for f in os.listdir(tmp_path / "all") if f.startswith(".reserve")]


def test_retained_run_keeps_the_spike_in_full_and_reports_like_the_exact_records(tmp_path):
    rows = _requests(error_at=(20.0, 20.5))
    policy = RetentionPolicy(full_records_around_spikes_s=3.0, sample_rate=0.02, window_s=1.0)
    keeper = _write(tmp_path / "kept", rows, policy)
    _write(tmp_path / "full", rows, None)
    state = load_retention(str(tmp_path / "kept"))
    assert keeper.spikes >= 1 and state.keep, "the live watch saw the spike"
    lo, hi = state.keep[0]
    assert lo <= START_NS + 37 * 10**9 and hi >= START_NS + 44 * 10**9
    kept = load_run(tmp_path / "kept").requests
    scheduled = kept.column("scheduled_ns").to_numpy()
    inside = np.array([START_NS + 38 * 10**9 <= s < START_NS + 43 * 10**9 for s in (r[0] for r in rows)])
    assert ((scheduled >= START_NS + 38 * 10**9) & (scheduled < START_NS + 43 * 10**9)).sum() == inside.sum()
    assert len(kept) < 0.2 * len(rows)
    errors = sum(1 for r in rows if r[9] is not None)
    assert sum(1 for e in kept.column("error_kind").to_pylist() if e) == errors, "every error is kept"
    retained, exact = analyze_run(tmp_path / "kept"), analyze_run(tmp_path / "full")
    assert retained["retention"]["sampled"] and not exact["retention"]["sampled"]
    assert retained["summary"]["requests"] == exact["summary"]["requests"] == len(rows)
    assert retained["summary"]["errors_by_kind"] == exact["summary"]["errors_by_kind"]
    for key in ("p50", "p90", "p99"):
        assert retained["summary"]["latency_ms"][key]["value_ms"] == pytest.approx(
            exact["summary"]["latency_ms"][key]["value_ms"], rel=0.0101)
    assert retained["spikes"] and exact["spikes"]
    assert retained["spikes"][0]["requests"] == exact["spikes"][0]["requests"]
    assert any(w["code"] == "records_retained" for w in retained["warnings"])


def test_a_retained_runs_spikes_are_the_exact_records_spikes_whatever_the_window_alignment(tmp_path):
    """Outside its keep interval a retained run holds a 2 % sample: ~4 records per 1-s window, where
    the detection window was sized for 20. Tested on those records, one slow record of two in a
    window that shares a flagged 8-window group with the spike joined it (uncorrected p = 0.02 <
    0.05) — an extra spike, for seed 4 with the warm-up's origin, seed 31 without: the alignment
    decides which sampled window shares the spike's group. The histograms count every request."""
    policy = RetentionPolicy(full_records_around_spikes_s=3.0, sample_rate=0.02, window_s=1.0)
    no_warmup = SpikeRules(warmup_share=0.0, warmup_min_s=0.0, warmup_max_s=0.0)
    for seed, rules in ((4, SpikeRules()), (31, no_warmup)):
        rows = _requests(seed=seed)
        _write(tmp_path / f"kept{seed}", rows, policy)
        _write(tmp_path / f"full{seed}", rows, None)
        retained, exact = (analyze_run(tmp_path / f"{name}{seed}", spike_rules=rules) for name in ("kept", "full"))
        spans = [[(round((s["start_ns"] - START_NS) / 1e9), round((s["end_ns"] - START_NS) / 1e9))
                  for s in analysis["spikes"]] for analysis in (retained, exact)]
        assert spans[0] == spans[1] == [(40, 41)], (seed, spans)
        assert retained["spike_detection"]["tests"] == exact["spike_detection"]["tests"]
        assert retained["spike_detection"]["baseline_p99_ms"] == pytest.approx(
            exact["spike_detection"]["baseline_p99_ms"], rel=0.0101)
        assert retained["spikes"][0]["slow_requests"] == pytest.approx(exact["spikes"][0]["slow_requests"], abs=2)


def test_spike_watch_flags_a_window_against_the_running_median():
    watch = SpikeWatch(window_s=1.0, settle_s=2.0, factor=3.0, min_requests=5, min_baseline=5)
    for second in range(12):
        for _ in range(20):
            watch.add(START_NS + second * 10**9, (500e6 if second == 10 else 10e6))
    settled = watch.settle(START_NS + 13_500_000_000)
    assert [w.start_ns for w in settled if w.spike] == [START_NS + 10 * 10**9]
    assert len(watch.settle_all()) == 1  # second 11 had not settled


def test_ring_of_held_records_is_bounded_by_the_hold_time(tmp_path):
    rows = _requests(rate=100, seconds=120, spike=(500, 501))
    policy = RetentionPolicy(full_records_around_spikes_s=2.0, sample_rate=0.0, keep_errors=False)
    writer = RunWriter(str(tmp_path / "r"), {"name": "ring", "scenario": {}})
    keeper = RecordKeeper(writer.requests, writer.windows, str(tmp_path / "r"), policy=policy, timeout_s=1.0)
    longest = 0
    for row in rows:
        keeper.append_record(RequestRecord(*row))
        longest = max(longest, len(keeper._ring))
    keeper.close()
    writer.close()
    assert longest <= 100 * (2.0 + 1.0 + 2 + 1 + 1) * 1.3, "the ring holds ~rate × hold_s records"
    assert keeper.kept == 0 and keeper.held_dropped > 0


def test_disk_budget_halves_the_rate_when_the_projection_overshoots(tmp_path):
    (tmp_path / "requests.arrow").write_bytes(b"x" * 10_000_000)
    budget = DiskBudget(str(tmp_path), 40_000_000, end_ns=START_NS + 3600 * 10**9, configured_rate=0.01)
    assert not budget.check(START_NS)
    (tmp_path / "requests.arrow").write_bytes(b"x" * 12_000_000)
    assert budget.check(START_NS + 11 * 10**9), "2 MB/11 s × 1 h overshoots 36 MB"
    assert budget.rate == 0.005 and budget.tight and not budget.exhausted
    (tmp_path / "requests.arrow").write_bytes(b"x" * 39_500_000)
    budget.check(START_NS + 12 * 10**9)
    assert budget.exhausted


def test_record_keeper_stops_keeping_when_the_budget_is_used_up(tmp_path):
    policy = RetentionPolicy(full_records_around_spikes_s=1.0, sample_rate=1.0, disk_budget_bytes=40_000_000)
    writer = RunWriter(str(tmp_path / "b"), {"name": "budget", "scenario": {}})
    keeper = RecordKeeper(writer.requests, writer.windows, str(tmp_path / "b"), policy=policy, timeout_s=1.0,
                          end_ns=START_NS + 60 * 10**9)
    (tmp_path / "b" / "spans.arrow").write_bytes(b"x" * 39_500_000)
    for row in _requests(rate=50, seconds=5):
        keeper.append_record(RequestRecord(*row))
    keeper.close()
    writer.close()
    assert keeper.failure and "disk budget exhausted" in keeper.failure


def test_locust_per_second_counts_are_trimmed():
    from types import SimpleNamespace

    entry = SimpleNamespace(num_reqs_per_sec={s: 1 for s in range(1000, 1100)}, num_fail_per_sec={1000: 1, 1099: 2})
    stats = SimpleNamespace(entries={("POST", "x"): entry}, total=SimpleNamespace(
        num_reqs_per_sec={1000: 5}, num_fail_per_sec={}))
    dropped = trim_per_second_counts(stats, now_s=1100, keep_s=30)
    assert min(entry.num_reqs_per_sec) == 1070 and entry.num_fail_per_sec == {1099: 2}
    assert stats.total.num_reqs_per_sec == {} and dropped == 70 + 1 + 1
