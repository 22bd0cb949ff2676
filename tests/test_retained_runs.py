"""Retained runs are first-class (issue 26): whatever a retention policy kept — spikes inside or
outside the keep intervals, a sample rate of 0, a harness killed with ``kill -9`` mid-stream —
`tailscope report`'s library half (:func:`~tailscope.conductor.reporting.analyse_and_write`)
writes every report file, every spike's percentiles come from the histograms and are finite,
and no ``.reserve-*`` file is left behind."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from unittest import mock

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retained_runs import reserves_left, retain_in_place, simulate_kill

from tailscope.analyzers.analysis import SCHEMA_PATH, analyze_run
from tailscope.analyzers.spikes.detection import NO_RECORDS_KEPT
from tailscope.conductor.reporting import analyse_and_write
from tailscope.reports.writer import OUTPUT_FILES
from tailscope.rundir import load_run
from tailscope.testkit.synthetic import SYNTHETIC_START_NS, write_synthetic_run

S = 10**9


def _validator():
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return jsonschema.Draft202012Validator(json.load(fh))


def _issue_shape(path, seed: int = 5) -> dict:
    """The shape of issue 26's crash: 20 requests/s for 60 s, a spike at 15 s that the live keeper
    kept with 10 s around it, a spike at 45 s outside every keep interval, sample rate 0.05.
    Seed 5 keeps no record of the second spike's windows (checked by the caller)."""
    write_synthetic_run(path, duration_s=60, rate=20, seed=seed, spikes=[
        {"kind": "gc", "at_s": 15, "duration_s": 1, "extra_ms": 400},
        {"kind": "cpu", "at_s": 45, "duration_s": 1, "extra_ms": 400}])
    keep = (SYNTHETIC_START_NS + 5 * S, SYNTHETIC_START_NS + 26 * S)
    retain_in_place(str(path), [keep], 0.05, around_s=10.0)
    return {"keep": keep}


def test_a_spike_outside_every_keep_interval_gets_histogram_percentiles_and_no_stage_split(tmp_path):
    """Issue 26, seen 1: `_spike_record` indexed an empty latency array (IndexError) on this run."""
    _issue_shape(tmp_path)
    report = analyse_and_write(str(tmp_path))
    spikes = report.analysis["spikes"]
    outside = [s for s in spikes if s["start_ns"] >= SYNTHETIC_START_NS + 40 * S]
    assert len(outside) == 1, [(s["start_ns"], s["end_ns"]) for s in spikes]
    spike = outside[0]
    scheduled = load_run(str(tmp_path)).requests.column("scheduled_ns").to_numpy()
    assert not ((scheduled >= spike["start_ns"]) & (scheduled < spike["end_ns"])).any(), "shape: no record kept"
    assert spike["records_kept"] == 0 and spike["percentiles_from"] == "histograms"
    assert spike["requests"] >= 15, "requests counted by the histograms, not by the (absent) records"
    assert spike["p99_ms"] > 300 and spike["excess_ms"] > 250, "the 400 ms spike, from the histograms"
    assert spike["slow_requests"] >= 10
    assert spike["decomposition"]["available"] is False
    assert spike["decomposition"]["unavailable_reason"] == NO_RECORDS_KEPT
    inside = [s for s in spikes if s["end_ns"] <= SYNTHETIC_START_NS + 26 * S][0]
    assert inside["decomposition"]["available"] and inside["decomposition"]["dominant_stage"] == "inference"
    _validator().validate(report.analysis)
    with open(report.paths["html"], encoding="utf-8") as fh:
        html = fh.read()
    assert f"Stage split unavailable: {NO_RECORDS_KEPT}." in html
    with open(report.paths["markdown"], encoding="utf-8") as fh:
        assert f"stage split unavailable: {NO_RECORDS_KEPT}" in fh.read()


def test_report_of_a_killed_retained_run_leaves_no_reserve_even_when_the_analysis_raises(tmp_path):
    """Issue 26, seen 1: `tailscope report` on a run killed at 180 s of 300 crashed and left its
    8 MiB `.reserve-*` behind. The stale reserve is released before the analysis runs."""
    _issue_shape(tmp_path)
    simulate_kill(str(tmp_path), 0.6)
    assert reserves_left(str(tmp_path))
    with mock.patch("tailscope.conductor.reporting.analyze_run", side_effect=RuntimeError("analysis bug")):
        with pytest.raises(RuntimeError, match="analysis bug"):
            analyse_and_write(str(tmp_path))
    assert reserves_left(str(tmp_path)) == []
    report = analyse_and_write(str(tmp_path))
    assert report.analysis["run"]["incomplete"] and os.path.exists(report.paths["html"])
    assert all(math.isfinite(s["p99_ms"]) for s in report.analysis["spikes"])


SPIKE_KINDS = ("gc", "cpu", "queue", "io", "generator", "postprocess", "kv_cache")


@st.composite
def retained_runs(draw):
    duration = draw(st.integers(20, 50))
    spikes = draw(st.lists(st.fixed_dictionaries({
        "kind": st.sampled_from(SPIKE_KINDS),
        "at_s": st.floats(3.0, duration - 3.0),
        "duration_s": st.floats(0.5, 4.0),
        "extra_ms": st.floats(50.0, 800.0)}), max_size=3))
    keeps = draw(st.lists(st.tuples(st.floats(0.0, duration), st.floats(0.5, 25.0)), max_size=3))
    return {"duration": duration, "rate": draw(st.sampled_from([10, 20, 40])), "seed": draw(st.integers(0, 10**6)),
            "spikes": spikes, "keeps": keeps, "sample_rate": draw(st.sampled_from([0.0, 0.01, 0.05, 0.3])),
            "kill": draw(st.one_of(st.none(), st.floats(0.15, 0.99)))}


def _merged(intervals):
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(case=retained_runs())
def test_any_retained_run_is_reported_with_finite_spike_percentiles(tmp_path_factory, case):
    path = str(tmp_path_factory.mktemp("retained"))
    write_synthetic_run(path, duration_s=case["duration"], rate=case["rate"], seed=case["seed"],
                        spikes=case["spikes"])
    keep = _merged([(SYNTHETIC_START_NS + int(a * S), SYNTHETIC_START_NS + int((a + length) * S))
                    for a, length in case["keeps"]])
    retain_in_place(path, keep, case["sample_rate"])
    if case["kill"] is not None:
        simulate_kill(path, case["kill"])
    report = analyse_and_write(path)
    assert set(report.paths) >= {"analysis", "html", "junit", "markdown"}
    assert all(os.path.getsize(p) > 0 for p in report.paths.values())
    assert reserves_left(path) == []
    analysis = report.analysis
    windows_left = len(load_run(path).windows or [])
    assert analysis["retention"]["sampled"] == bool(windows_left), "sampled whenever a histogram row survived"
    for spike in analysis["spikes"]:
        # from the histograms, unless a kill cut a window's histogram rows short of its kept records
        assert (spike["percentiles_from"] == "histograms" or not windows_left
                or spike["records_kept"] == spike["requests"])
        assert math.isfinite(spike["p99_ms"]) and math.isfinite(spike["excess_ms"]) and spike["requests"] > 0
        assert spike["records_kept"] <= spike["requests"]
        decomposition = spike["decomposition"]
        assert decomposition["available"] == bool(decomposition["stages"])
        if spike["records_kept"] == 0:
            assert decomposition["unavailable_reason"] == NO_RECORDS_KEPT
    for key in ("p50", "p99"):
        value = analysis["summary"]["latency_ms"][key]["value_ms"]
        assert value is None or math.isfinite(value)
    for finding in (f for f in analysis["findings"] if f["kind"] == "p99_set_by"):
        # a P99 above every kept record is said so, not "the 0 requests above it are spread …"
        evidence = finding["evidence"]
        assert (evidence["above_p99"] == 0) == (evidence["by"] == "not_kept"), finding["summary"]
    _validator().validate(analysis)


def test_a_retained_run_with_no_records_at_all_is_reported(tmp_path):
    """Sample rate 0 and no keep interval: requests.arrow is empty, the histograms hold everything."""
    write_synthetic_run(str(tmp_path), duration_s=40, rate=20, seed=3,
                        spikes=[{"kind": "gc", "at_s": 20, "duration_s": 2, "extra_ms": 500}], error_rate=0.0)
    retain_in_place(str(tmp_path), [], 0.0)
    assert len(load_run(str(tmp_path)).requests) == 0
    analysis = analyze_run(str(tmp_path))
    assert analysis["summary"]["requests"] > 700
    assert [round((s["start_ns"] - SYNTHETIC_START_NS) / S) for s in analysis["spikes"]] == [20]
    assert analysis["spikes"][0]["decomposition"]["unavailable_reason"] == NO_RECORDS_KEPT
    assert np.isfinite(analysis["spikes"][0]["p99_ms"])


def test_a_real_retained_run_killed_with_sigkill_is_reported_without_a_reserve_left(tmp_path, capsys):
    """End to end, ≤ 30 s: `tailscope run` with issue 26's retention (10 s around spikes, sample rate
    0.05, 200 MB budget) at 20 requests/s against the reference target, killed with SIGKILL at
    about 2/3, then `tailscope report`: INCOMPLETE (exit 3), every report file, numbers from the
    histograms, no `.reserve-*` left."""
    from cli_helpers import free_port, load_analysis
    from reliability_helpers import run_dir_of, start_run, start_target, wait_for_file, write_scenario

    from tailscope.cli.commands.common import EXIT_INCONCLUSIVE
    from tailscope.cli.main import main

    port = free_port()
    target = start_target(port, None)
    scenario = write_scenario(tmp_path / "r.yaml", f"http://127.0.0.1:{port}", duration="12s", rate=20,
                              extra="retention: {full_records_around_spikes: 10s, sample_rate: 0.05, "
                                    "disk_budget: 200MB}")
    run = start_run(scenario, tmp_path / "runs")
    try:
        run_dir = run_dir_of(str(tmp_path / "runs"))
        wait_for_file(os.path.join(run_dir, "requests.arrow"))
        time.sleep(8.0)
        assert reserves_left(run_dir), "a live harness holds its reserve"
        run.signal(signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        run.stop()
        target.stop(grace_s=1)
    assert main(["report", run_dir]) == EXIT_INCONCLUSIVE, capsys.readouterr().err
    analysis = load_analysis(run_dir)
    assert analysis["run"]["incomplete"] and analysis["retention"]["sampled"]
    assert analysis["retention"]["requests"] >= 80 and analysis["summary"]["requests"] == analysis["retention"]["requests"]
    assert analysis["retention"]["records_kept"] < analysis["retention"]["requests"]
    assert all(s["percentiles_from"] == "histograms" and math.isfinite(s["p99_ms"]) for s in analysis["spikes"])
    assert all(os.path.exists(os.path.join(run_dir, f)) for f in OUTPUT_FILES.values())
    assert reserves_left(run_dir) == []


def test_a_retained_runs_distribution_counts_every_request_like_the_full_records(tmp_path):
    """The latency distribution of a retained run comes from the histograms (every request), not
    from its records (a sample biased towards the spikes)."""
    write_synthetic_run(str(tmp_path), duration_s=40, rate=30, seed=8,
                        spikes=[{"kind": "gc", "at_s": 20, "duration_s": 2, "extra_ms": 500}])
    full = analyze_run(str(tmp_path))["distribution"]
    retain_in_place(str(tmp_path), [(SYNTHETIC_START_NS + 15 * S, SYNTHETIC_START_NS + 27 * S)], 0.05)
    retained = analyze_run(str(tmp_path))["distribution"]
    assert set(retained["classes"]) == set(full["classes"])
    for name, entry in full["classes"].items():
        assert retained["classes"][name]["n"] == entry["n"], name

    def quantile_edge(d, name, q):
        counts = np.asarray(d["classes"][name]["counts"])
        return d["bin_edges_ms"][int(np.searchsorted(np.cumsum(counts), q * counts.sum()))]

    for q in (0.5, 0.9, 0.99):
        ratio = quantile_edge(retained, "all", q) / quantile_edge(full, "all", q)
        assert 1 / 1.13 < ratio < 1.13, (q, ratio)  # within one 12 % bin


def test_a_retained_runs_goodput_and_slow_count_cover_every_request(tmp_path):
    """Goodput (latency SLOs only) and the count of requests above the P99 come from the histograms
    in a retained run; from its records they counted only what retention kept."""
    write_synthetic_run(str(tmp_path), duration_s=40, rate=30, seed=9,
                        spikes=[{"kind": "gc", "at_s": 20, "duration_s": 2, "extra_ms": 500}])
    with open(tmp_path / "manifest.json", encoding="utf-8") as fh:
        manifest = json.load(fh)
    manifest["scenario"] = {**(manifest.get("scenario") or {}), "slo": ["p99 < 40ms", "long: p90 < 60ms"]}
    with open(tmp_path / "manifest.json", "w", encoding="utf-8") as fh:
        json.dump(manifest, fh)
    full = analyze_run(str(tmp_path))
    retain_in_place(str(tmp_path), [(SYNTHETIC_START_NS + 15 * S, SYNTHETIC_START_NS + 27 * S)], 0.05)
    retained = analyze_run(str(tmp_path))
    exact, got = full["summary"]["goodput"], retained["summary"]["goodput"]
    assert got["total"] == exact["total"] == full["summary"]["requests"]
    assert 0.3 < exact["share"] < 0.999 and got["share"] == pytest.approx(exact["share"], abs=0.01)
    for name, entry in exact["by_class"].items():
        assert got["by_class"][name]["total"] == entry["total"], name
        assert got["by_class"][name]["share"] == pytest.approx(entry["share"], abs=0.02), name
    above = full["slow_requests"]["above_threshold"]
    assert retained["slow_requests"]["above_threshold"] == pytest.approx(above, rel=0.15, abs=3)
    assert retained["slow_requests"]["shown"] <= retained["slow_requests"]["above_threshold"]
