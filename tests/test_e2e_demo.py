"""End to end with real parts: the reference target over loopback, a real Locust
runner, real OTLP export from the target's OpenTelemetry SDK into our receiver,
samplers reading /proc, the analysis and the report."""

from __future__ import annotations

import json
import os

import jsonschema
import numpy as np
import pytest

from tailscope.rundir import load_run

from cli_helpers import load_analysis, only_run_dir, run_tailscope

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = run_tailscope("demo", "--duration", "12s", "--out", str(out), timeout=180)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode in (0, 1), proc.stderr
    run_dir = only_run_dir(out)
    return proc, run_dir


def test_demo_prints_report_path_and_writes_outputs(demo_run):
    proc, run_dir = demo_run
    assert os.path.join(run_dir, "report.html") in proc.stdout.replace("\n", "")
    for name in ("analysis.json", "report.html", "junit.xml", "summary.md", "manifest.json"):
        assert os.path.getsize(os.path.join(run_dir, name)) > 0, name
    html = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    assert "<script src=" not in html  # self-contained: nothing fetched


def test_analysis_validates_against_documented_schema(demo_run):
    _, run_dir = demo_run
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        schema = json.load(fh)
    jsonschema.validate(load_analysis(run_dir), schema)


def test_every_request_joins_its_server_spans(demo_run):
    _, run_dir = demo_run
    analysis = load_analysis(run_dir)
    assert analysis["summary"]["requests"] > 200
    assert analysis["stages"]["joined_fraction"] >= 0.99
    for stage in ("preprocess", "queue", "inference", "postprocess"):
        assert stage in analysis["stages"]["by_stage"], stage
        assert analysis["stages"]["by_stage"][stage]["p99_ms"] >= analysis["stages"]["by_stage"][stage]["p50_ms"]


def test_server_spans_fit_inside_client_latency(demo_run):
    _, run_dir = demo_run
    run = load_run(run_dir)
    req = run.requests.to_pydict()
    spans = run.spans.to_pydict()
    server = {t: (s, e) for t, s, e, k in zip(spans["trace_id"], spans["start_ns"], spans["end_ns"],
                                              spans["kind"]) if k == 2}
    checked = 0
    for t, sched, sent, end, status in zip(req["trace_id"], req["scheduled_ns"], req["sent_ns"],
                                           req["end_ns"], req["status"]):
        if status != 200 or t not in server:
            continue
        s, e = server[t]
        assert e - s <= end - sched, "server time exceeds client latency"
        assert e - s <= end - sent, "server time exceeds the client's service time"
        checked += 1
    assert checked > 200


def test_signals_were_sampled(demo_run):
    _, run_dir = demo_run
    run = load_run(run_dir)
    series = set(run.signals.column("series").to_pylist())
    assert any(s.startswith("host.cpu") for s in series)
    assert any(s.startswith("proc.") for s in series)  # the target process
    t = np.asarray(run.signals.column("t_ns"))
    duration_s = (t.max() - t.min()) / 1e9
    assert duration_s > 8


def test_manifest_is_closed(demo_run):
    _, run_dir = demo_run
    run = load_run(run_dir)
    assert run.manifest["status"] == "complete"
    assert run.manifest["target_process"]["pid"]


def test_steady_demo_shows_no_spike_of_an_absent_cause(demo_run):
    """A real steady run (40 req/s Poisson, no fault): spike detection may only report real
    tail events (a GC pause, a generator hiccup), never a cause the run cannot have had."""
    _, run_dir = demo_run
    analysis = load_analysis(run_dir)
    assert analysis["spike_detection"]["performed"] is True
    absent = {"cpu_throttling", "swap", "queue_saturation", "gpu_throttling"}
    for spike in analysis["spikes"]:
        assert spike["p_value"] < 0.01 / analysis["spike_detection"]["tests"]
        assert spike["causes"][0]["kind"] not in absent, spike["causes"][0]
    assert len(analysis["spikes"]) <= 2
