"""Stage accounting that cannot double count (analyzers/stages/consistency.py) on synthetic spans.

Each request has a 100 ms server span; the stages its rules make either follow one another
(nothing to say), overlap past the span (the sum test), or overlap inside gaps that keep the sum
under the span (the interval test) — the warning then names the two stages and their rules.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from cli_helpers import load_analysis, run_tailscope
from run_builders import TRITON_FIXTURE, triton_requests, write_requests_run

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.clock_alignment import shift_columns
from tailscope.analyzers.stages.consistency import consistency_warnings, interval_overlap
from tailscope.analyzers.stages.decomposition import join_spans, stage_matrix
from tailscope.analyzers.stages.rules import parse_stages_config
from tailscope.rundir import load_run, schema

MS = 1_000_000
TRACES = [f"{i + 1:032x}" for i in range(4)]


def _matrix(tmp_path, children, rules, shift_ns: int = 0, events=None):
    """The stage matrix of 4 requests, each with a 100 ms SERVER span at 10 ms and ``children``
    (``(name, start_ms, end_ms)`` relative to the request's start) and ``events`` on the server span,
    all on a server clock ``shift_ns`` ahead; the matrix is built as the analysis builds it: the join
    on the stored spans, the stages on a copy with the span times moved back (the events stay)."""
    requests = [{"trace_id": t, "sent_ns": i * 1000 * MS, "end_ns": i * 1000 * MS + 120 * MS}
                for i, t in enumerate(TRACES)]
    run_dir = write_requests_run(tmp_path / "run", requests)
    rows = []
    for i, trace in enumerate(TRACES):
        t0 = i * 1000 * MS
        rows.append({"trace_id": trace, "span_id": f"{i:02x}" + "00" * 7, "name": "POST /x", "kind": 2,
                     "start_ns": t0 + 10 * MS + shift_ns, "end_ns": t0 + 110 * MS + shift_ns,
                     "events": json.dumps([{"name": n, "t_ns": t0 + at * MS + shift_ns, "attributes": {}}
                                           for n, at in (events or [])]) if events else None})
        for k, (name, start, end) in enumerate(children):
            rows.append({"trace_id": trace, "span_id": f"{i:02x}{k + 1:02x}" + "00" * 6, "name": name, "kind": 1,
                         "start_ns": t0 + start * MS + shift_ns, "end_ns": t0 + end * MS + shift_ns,
                         "parent_span_id": f"{i:02x}" + "00" * 7})
    base = {"parent_span_id": None, "service": "s", "status_code": 0, "links": None, "pid": None, "events": None,
            "attributes": "{}"}
    spans = pa.Table.from_pylist([{**base, **row} for row in rows], schema=schema.SPANS_SCHEMA)
    req, parsed = request_arrays(load_run(run_dir).requests), parse_stages_config(rules)
    join = join_spans(req, spans, parsed)
    return stage_matrix(req, shift_columns(spans, -shift_ns, None), parsed, join=join)


def _rules(*pairs, events=()):
    return {"preset": "none", "rules": [{"match": {"name": f"^{name}$"}, "stage": stage} for name, stage in pairs]
            + [{"between": [a, b], "stage": stage} for a, b, stage in events]}


def test_stages_one_after_the_other_are_consistent(tmp_path):
    matrix = _matrix(tmp_path, [("a", 15, 40), ("b", 40, 90)], _rules(("a", "parse"), ("b", "model")))
    facts = encode(matrix.consistency)  # as analysis.json states it
    assert (facts["exceeding_requests"], facts["overlapping_requests"]) == (0, 0)
    assert facts["stage_sum_mean_ms"] == pytest.approx(75.0) and facts["server_mean_ms"] == pytest.approx(100.0)
    assert consistency_warnings(matrix.consistency) == []


def test_stages_that_overlap_past_the_span_are_named_with_their_rules(tmp_path):
    matrix = _matrix(tmp_path, [("outer", 10, 110), ("inner", 30, 90)], _rules(("outer", "model"), ("inner", "matmul")))
    facts = encode(matrix.consistency)  # as analysis.json states it
    assert facts["exceeding_requests"] == facts["overlapping_requests"] == 4
    assert facts["excess_p50_ms"] == pytest.approx(60.0) and facts["overlap_p50_ms"] == pytest.approx(60.0)
    assert {c["stage"] for c in facts["culprits"]} == {"model", "matmul"}  # removing either one fixes it
    assert facts["overlapping_stages"] == [{"stages": ["model", "matmul"], "requests": 4, "sources": {
        "model": ["span rule name ~ /^outer$/"], "matmul": ["span rule name ~ /^inner$/"]}}]
    [warning] = consistency_warnings(matrix.consistency)
    assert warning["code"] == "stage_overlap" and "in 4 of 4 joined requests" in warning["message"]
    assert "span rule name ~ /^inner$/" in warning["message"] and "preset 'none'" in warning["message"]


def test_an_overlap_that_gaps_hide_from_the_sum_is_found_by_the_intervals(tmp_path):
    # 30 + 30 ms of stages in a 100 ms span: the sum is fine, yet 20 ms are counted twice
    matrix = _matrix(tmp_path, [("a", 20, 50), ("b", 30, 60)], _rules(("a", "parse"), ("b", "model")))
    facts = encode(matrix.consistency)  # as analysis.json states it
    assert facts["exceeding_requests"] == 0 and facts["overlapping_requests"] == 4
    assert facts["overlap_p50_ms"] == pytest.approx(20.0)
    assert np.allclose(matrix.column("unaccounted"), 40.0)  # what the table shows; the truth is 60
    [warning] = consistency_warnings(matrix.consistency)
    assert "two stages cover the same time (20.00 ms at the median)" in warning["message"]
    assert "'parse' and 'model' in 4" in warning["message"]


def test_an_event_stage_inside_a_span_stage_overlaps_also_after_a_clock_alignment(tmp_path):
    events = [("QUEUE_START", 20), ("COMPUTE_START", 35)]
    rules = _rules(("work", "compute"), events=[("QUEUE_START", "COMPUTE_START", "queue")])
    for shift in (0, 250 * MS):
        matrix = _matrix(tmp_path / str(shift), [("work", 30, 60)], rules, shift_ns=shift, events=events)
        facts = encode(matrix.consistency)  # as analysis.json states it
        assert facts["overlapping_requests"] == 4 and facts["overlap_p50_ms"] == pytest.approx(5.0), shift
        assert facts["overlapping_stages"][0]["stages"] == ["queue", "compute"]
        assert facts["overlapping_stages"][0]["sources"]["queue"] == ["event rule between QUEUE_START and COMPUTE_START"]


def test_interval_overlap_counts_covered_time_once_per_request_and_clips_to_the_span():
    # request 0: [0,10) [5,20) [6,8) → 5 + 2 ms covered twice; request 1: [0,5) [5,9) → none
    position = np.array([0, 0, 0, 1, 1])
    column = np.array([0, 1, 2, 0, 1])
    start = np.array([0, 5, 6, 100, 105]) * MS
    end = np.array([10, 20, 8, 105, 109]) * MS
    result = interval_overlap(position, column, start, end, np.array([0, 100]) * MS, np.array([15, 200]) * MS)
    assert result.ms == pytest.approx([5.0 + 2.0, 0.0])  # [5,20) clipped to the span's 15 ms
    assert result.pairs == {(0, 1): 1, (1, 2): 1}


def test_the_overlap_warning_reaches_the_analysis_and_the_reports(tmp_path):
    """Triton's spans with a scenario rule that makes the model span a stage (what the triton preset
    did when it looked for `model_name`): the warning is in analysis.json, summary.md and report.html."""
    scenario = {"stages": {"preset": "triton", "rules": [{"match": {"name": "^resnet50$"}, "stage": "model"}]}}
    run_dir = write_requests_run(tmp_path / "run", triton_requests(), scenario=scenario)
    done = run_tailscope("import-spans", run_dir, TRITON_FIXTURE, "--report", timeout=120)
    assert done.returncode == 0, done.stderr
    [warning] = [w for w in load_analysis(run_dir)["warnings"] if w["code"] == "stage_overlap"]
    assert "in 60 of 60 joined requests" in warning["message"] and "'model' (span rule name ~ /^resnet50$/)" \
        in warning["message"]
    for name in ("summary.md", "report.html"):
        with open(f"{run_dir}/{name}", encoding="utf-8") as fh:
            text = fh.read()
        assert "stage_overlap" in text and "stages overlap: in 60 of 60 joined requests" in text, name
