"""Analyzers on seeded synthetic runs with known, injected jitter."""

import json
import os

import jsonschema
import numpy as np
import pytest

from tailscope.analyzers.analysis import SCHEMA_PATH, analyze_run
from tailscope.analyzers.causes.protocol import DetectorRegistry, Finding
from tailscope.analyzers.inputs.signal_series import downsample_minmax
from tailscope.rundir import RunWriter, load_run
from tailscope.testkit.synthetic import write_synthetic_run

SPIKES = [{"kind": "gc", "at_s": 20, "duration_s": 3, "extra_ms": 150},
          {"kind": "queue", "at_s": 40, "duration_s": 2, "extra_ms": 100}]


@pytest.fixture(scope="module")
def validator():
    with open(SCHEMA_PATH) as fh:
        schema = json.load(fh)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def spiky(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "spiky"
    truth = write_synthetic_run(path, spikes=SPIKES, seed=11)
    return truth, analyze_run(path)


def _contains(spike, injected):
    return spike["start_ns"] <= injected["start_ns"] + 500_000_000 and spike["end_ns"] >= injected["end_ns"] - 500_000_000


def test_synthetic_run_reads_back_in_the_real_format(spiky):
    truth, _ = spiky
    run = load_run(truth["path"])
    assert run.complete and len(run.requests) == truth["requests"] and len(run.spans) == truth["spans"]
    assert 2700 < truth["requests"] < 3300
    assert run.manifest["scenario"]["slo"] == ["p99 < 250ms", "error_rate < 1%"]
    assert set(run.signals.column("series").unique().to_pylist()) >= {"host.cpu.user_s", "proc.runqueue_wait_ns"}
    assert "gc_pause" in run.events.column("kind").to_pylist()
    server = run.spans.filter(__import__("pyarrow").compute.equal(run.spans.column("kind"), 2))
    assert set(server.column("trace_id").to_pylist()) <= set(run.requests.column("trace_id").to_pylist())


def test_synthetic_run_is_seeded(tmp_path):
    a = write_synthetic_run(tmp_path / "a", duration_s=5, seed=4)
    b = write_synthetic_run(tmp_path / "b", duration_s=5, seed=4)
    ra, rb = load_run(a["path"]), load_run(b["path"])
    assert ra.requests.equals(rb.requests) and ra.spans.equals(rb.spans)


def test_analysis_validates_and_summary_matches_truth(spiky, validator):
    truth, analysis = spiky
    validator.validate(analysis)
    summary = analysis["summary"]
    assert summary["requests"] == truth["requests"] and summary["errors"] == truth["errors"]
    assert summary["offered_rps"] == pytest.approx(50, rel=0.1)
    assert summary["latency_ms"]["p99"]["claimed"] and summary["lateness_ms"]["generator_limited"] is False
    assert set(analysis["classes"]) == {"short", "long"}
    assert analysis["verdict"]["passed"] and len(analysis["verdict"]["slos"]) == 2
    assert json.loads(json.dumps(analysis, allow_nan=False)) == analysis


def test_all_successful_requests_join_their_server_span(spiky):
    _, analysis = spiky
    stages = analysis["stages"]
    assert stages["joined_fraction"] == 1.0
    assert set(stages["by_stage"]) == {"preprocess", "queue", "batch_wait", "inference", "postprocess",
                                       "server", "unaccounted", "outside_server"}
    assert stages["by_stage"]["inference"]["p50_ms"] > stages["by_stage"]["preprocess"]["p50_ms"]


def test_joined_fraction_falls_when_spans_are_dropped(tmp_path):
    write_synthetic_run(tmp_path / "lossy", duration_s=10, span_loss=0.3, seed=2)
    analysis = analyze_run(tmp_path / "lossy")
    assert 0.6 < analysis["stages"]["joined_fraction"] < 0.8
    assert "partial_join" in {w["code"] for w in analysis["warnings"]}


def test_injected_spikes_are_found_with_their_stage_and_cause(spiky):
    truth, analysis = spiky
    spikes = analysis["spikes"]
    assert len(spikes) == 2
    for spike, injected in zip(spikes, truth["spikes"]):
        assert _contains(spike, injected)
        assert spike["decomposition"]["dominant_stage"] == injected["stage"]
        # gc: a request waits out the rest of the 150 ms pause it meets (75 ms on average)
        assert spike["decomposition"]["stages"][injected["stage"]]["growth_ms"] > 0.4 * injected["extra_ms"]
        assert injected["stage"] in spike["decomposition"]["summary"]
        assert spike["excess_ms"] > 50 and spike["p_value"] < 1e-6
        assert spike["causes"][0]["kind"] == injected["expected_cause"]
        assert spike["causes"][0]["confidence"] >= 0.9


@pytest.mark.parametrize("seed", range(4))
def test_steady_run_has_no_spikes(tmp_path, seed):
    write_synthetic_run(tmp_path / "steady", seed=seed, with_signals=False)
    assert analyze_run(tmp_path / "steady")["spikes"] == []


class _GcDetector:
    name = "gc-test"
    needs = ("events",)

    def score(self, ctx):
        kinds = ctx.run.events.column("kind").to_pylist()
        starts = ctx.run.events.column("start_ns").to_pylist()
        inside = sum(1 for k, s in zip(kinds, starts) if k == "gc_pause" and ctx.start_ns <= s < ctx.end_ns)
        return Finding("gc_pause", 0.9, {"pauses": inside}) if inside else None


class _NeedsGpu:
    name = "gpu-test"
    needs = ("gpu.clock_throttle",)

    def score(self, ctx):
        raise AssertionError("must not run: its signal is not in the run")


def test_registered_detector_fires_and_unmet_needs_are_skipped(tmp_path):
    write_synthetic_run(tmp_path / "gc", duration_s=30, spikes=SPIKES[:1], seed=5)
    registry = DetectorRegistry()
    registry.register(_GcDetector())
    registry.register(_NeedsGpu())
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_GcDetector())
    spikes = analyze_run(tmp_path / "gc", registry=registry)["spikes"]
    assert len(spikes) == 1
    assert [(c["kind"], c["confidence"]) for c in spikes[0]["causes"]] == [("gc_pause", 0.9)]
    assert spikes[0]["causes"][0]["evidence"]["pauses"] >= 10  # ten 150 ms gen-2 pauses, plus background


def test_signals_become_rates_and_stay_under_2000_points(spiky):
    _, analysis = spiky
    series = {s["name"]: s for s in analysis["signals"]["series"]}
    runq = series["proc.runqueue_wait_ns"]
    assert runq["kind"] == "counter" and runq["unit"] == "s/s"  # time counters become seconds per second
    assert np.median(runq["values"]) == pytest.approx(2e-3, rel=0.2)
    assert series["proc.rss_bytes"]["unit"] == "bytes"
    assert analysis["signals"]["sources"]["gpu"]["available"] is False
    t = np.arange(100_000, dtype=np.int64) * 1_000_000
    v = np.sin(np.arange(100_000) / 50.0)
    v[54_321] = 40.0
    dt, dv = downsample_minmax(t, v, 2000)
    assert len(dt) <= 2000 and dv.max() == 40.0 and np.all(np.diff(dt) > 0)


def test_events_are_bounded_and_faults_listed(spiky):
    _, analysis = spiky
    events = analysis["events"]
    assert [f["attributes"]["name"] for f in events["faults"]] == ["gc", "queue"]
    assert events["gc_pauses"]["count"] > 10 and events["gc_pauses"]["max_ms"] == pytest.approx(150, rel=0.01)
    assert len(events["gc_pauses"]["longest"]) <= 50


def test_empty_run_analyses_without_exceptions(tmp_path, validator):
    writer = RunWriter(str(tmp_path / "empty"), {"name": "empty", "scenario": {"slo": ["p99 < 250ms"]}})
    writer.close()
    analysis = analyze_run(tmp_path / "empty")
    validator.validate(analysis)
    assert analysis["summary"]["requests"] == 0 and analysis["windows"] == [] and analysis["spikes"] == []
    assert analysis["verdict"]["passed"] is False
    assert "no_requests" in {w["code"] for w in analysis["warnings"]}


def test_incomplete_run_says_when_the_harness_stopped(tmp_path, validator):
    write_synthetic_run(tmp_path / "killed", duration_s=5, status="running")
    analysis = analyze_run(tmp_path / "killed")
    validator.validate(analysis)
    assert analysis["run"]["incomplete"] is True
    assert analysis["run"]["incomplete_reason"].startswith("incomplete: harness stopped at 2026-01-01T00:00:0")
    assert analysis["warnings"][0]["code"] == "incomplete"


def test_truncated_file_and_generator_lateness_are_warned(tmp_path, validator):
    truth = write_synthetic_run(tmp_path / "cut", duration_s=10, lateness_ms=3.0, with_signals=False)
    spans = os.path.join(truth["path"], "spans.arrow")
    with open(spans, "r+b") as fh:
        fh.truncate(os.path.getsize(spans) - 100)
    analysis = analyze_run(tmp_path / "cut")
    validator.validate(analysis)
    codes = {w["code"] for w in analysis["warnings"]}
    assert "truncated" in codes
    assert "generator_limited" in {f["kind"] for f in analysis["findings"]}  # a whole-run finding now
    assert analysis["summary"]["lateness_ms"]["late_share"] > 0.5
