"""Head sampling end to end: `tailscope run` with ``trace_sample_rate`` against the traced reference
target (a real process exporting OTLP into the run's receiver). Only the sampled share of requests
carries the traceparent's sampled flag, the kit records spans for exactly those, and the analysis and
the report say where the stage statistics come from."""

from __future__ import annotations

import json
import os

import jsonschema
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope
from receiver_helpers import stored_spans
from test_loadgen_runs import CLASSES
from test_target_service import TargetProcess

from tailscope.analyzers.analysis import SCHEMA_PATH
from tailscope.rundir.retention_policy import trace_sampled

RATE = 0.3
SERVER = 2  # OTLP SpanKind


def test_a_head_sampled_run_traces_only_the_sampled_share(tmp_path):
    receiver_port = free_port()
    target = TargetProcess([], otlp_url=f"http://127.0.0.1:{receiver_port}")
    try:
        scenario = tmp_path / "sampled.yaml"
        scenario.write_text(f"name: sampled\nduration: 4s\ntrace_sample_rate: {RATE}\n"
                            f"arrival: {{process: poisson, rate: 120}}\n{CLASSES}")
        proc = run_tailscope("run", str(scenario), "--target", f"http://127.0.0.1:{target.port}",
                             "--out", str(tmp_path / "runs"), "--receiver-port", str(receiver_port), timeout=120)
    finally:
        target.close()
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr  # a verdict: passed, failed, inconclusive or incomplete
    run_dir = only_run_dir(tmp_path / "runs")
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        assert json.load(fh)["options"]["trace_sample_rate"] == RATE

    server_traces = [span["trace_id"] for span in stored_spans(run_dir) if span["kind"] == SERVER]
    assert server_traces and all(trace_sampled(trace_id, RATE) for trace_id in server_traces), \
        "a request sent with the sampled flag 00 must leave no server span"
    analysis = load_analysis(run_dir)
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))
    requests = analysis["summary"]["requests"]
    assert requests > 300
    assert 0.18 < len(server_traces) / requests < 0.42
    assert abs(analysis["stages"]["joined_fraction"] - len(server_traces) / requests) < 0.05
    stages = analysis["stages"]
    assert 0.18 < stages["traced_fraction"] < 0.42, "the drawn share sent with the sampled flag"
    codes = {w["code"] for w in analysis["warnings"]}
    assert "traces_sampled" in codes and "partial_join" not in codes, (
        f"joined {stages['joined_fraction']:.3f} of {stages['traced_fraction']:.3f} sent for tracing; "
        f"warnings {analysis['warnings']}")
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        page = fh.read()
    assert "head sampling" in page and "were sent for tracing" in page
