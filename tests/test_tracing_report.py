"""The report shows the stage rules, the clock alignment and the receiver's counts."""

from __future__ import annotations

import json
import os

import jsonschema
from run_builders import TRITON_FIXTURE, triton_requests, write_requests_run

from tailscope.analysis_model.stages import ClockAlignment
from tailscope.analyzers.analysis import SCHEMA_PATH, analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.tracing_view import clock_text, receiver_rows
from tailscope.reports.writer import write_outputs
from tailscope.rundir import write_json_atomic
from tailscope.tracing.ingest.importers import import_spans

RECEIVER = {"spans_received": 1200, "spans_stored": 1150, "spans_dropped": 50, "gc_events": 3, "requests": 40,
            "requests_by_transport": {"http": 30, "grpc": 10},
            "rejected": {"malformed": 2, "oversized": 1, "unsupported": 0},
            "metrics_points": 0, "logs_records": 0, "port": 4318, "grpc_port": 4317}


def test_skewed_triton_run_report(tmp_path):
    run_dir = write_requests_run(tmp_path / "run", [
        {**r, "sent_ns": r["sent_ns"] - 80_000_000, "end_ns": r["end_ns"] - 80_000_000} for r in triton_requests()
    ], scenario={"stages": {"preset": "triton", "rules": [{"match": {"name": "^never$"}, "stage": "preprocess"}]}})
    import_spans(run_dir, [TRITON_FIXTURE])
    write_json_atomic(os.path.join(run_dir, "receiver.json"), RECEIVER)
    analysis = analyze_run(run_dir)
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))
    data = build_report_data(analysis)
    assert data["stages"]["rules"] == ("Stage rules: preset triton plus 1 rule from the scenario; "
                                       "server span: name ~ /^InferRequest$/")
    assert data["stages"]["clock"].startswith("Clock offset (add to server times): -80.")
    assert "applied: server spans and the target's GC pauses were shifted" in data["stages"]["clock"]
    rows = {r["key"]: r["value"] for r in data["setup"]["receiver_rows"]}
    assert rows["spans dropped (ingest queue full)"] == "50"
    assert rows["export requests rejected"] == "3 (malformed 2, oversized 1, unsupported 0)"
    assert rows["export requests"] == "40 (HTTP 30, gRPC 10)" and rows["ports"] == "OTLP/HTTP 4318, OTLP/gRPC 4317"
    paths = write_outputs(run_dir, analysis)
    with open(paths["html"], encoding="utf-8") as fh:
        html = fh.read()
    assert 'id="clock-alignment"' in html and "Stage rules: preset triton" in html
    assert "export requests rejected" in html and "compute_input" in html


def test_texts_for_older_or_thin_analyses():
    assert clock_text(None) == "" and receiver_rows({}) == []
    assert clock_text(ClockAlignment("auto", 3, False, None, None)).startswith("Clock offset: not estimated")
    off = clock_text(ClockAlignment("auto", 900, False, 0.01, 0.2))
    assert off.endswith("not applied (the clocks agree within the bound)")
    rows = receiver_rows({"port": 1, "grpc_port": None, "write_error": "disk full"})
    assert rows == [{"key": "ports", "value": "OTLP/HTTP 1, OTLP/gRPC off"}, {"key": "write_error", "value": "disk full"}]
