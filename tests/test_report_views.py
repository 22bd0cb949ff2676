"""Report building blocks without a browser: bounded series, distributions, traces, cards, CI outputs."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from comparison_fixtures import check, comparison_document, percentile_row, side
from report_fixtures import make_spike, run_section

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.records import Window
from tailscope.analysis_model.signals import Signals
from tailscope.analysis_model.spikes import CauseFinding
from tailscope.analysis_model.streaming import Streaming
from tailscope.analysis_model.sweep import AnalysisSweep
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.representative_trace import representative_trace, span_depths
from tailscope.analyzers.stats.distribution import bin_edges_ms, latency_distribution
from tailscope.analyzers.stats.slow_points import slow_request_points
from tailscope.reports.cards import MAX_CARDS, spike_cards
from tailscope.reports.compare_html import build_comparison_data, render_comparison
from tailscope.reports.downsample import lttb, lttb_indices
from tailscope.reports.evidence_text import evidence_sentences
from tailscope.reports.extras import loop_label, streaming, sweep
from tailscope.reports.html import render_html
from tailscope.reports.junit import render_junit
from tailscope.reports.markdown import cell, render_comparison_markdown
from tailscope.reports.timeline import MAX_LINE_POINTS, latency_lines, signal_panels
from tailscope.rundir import load_run
from tailscope.testkit.synthetic import write_synthetic_run

NS = 1_000_000_000


@pytest.fixture(scope="module")
def gc_run(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("views") / "run")
    truth = write_synthetic_run(path, duration_s=20, rate=80, seed=4,
                                spikes=[{"kind": "gc", "at_s": 6, "duration_s": 2, "extra_ms": 200}])
    run = load_run(path)
    return truth, run, request_arrays(run.requests)


def test_lttb_keeps_the_peak_and_the_ends_within_the_bound():
    x = np.arange(100_000, dtype=float)
    y = np.random.default_rng(1).normal(size=len(x))
    y[54_321] = 80.0
    index = lttb_indices(x, y, 500)
    assert len(index) == 500 and index[0] == 0 and index[-1] == len(x) - 1
    assert 54_321 in index and np.all(np.diff(index) > 0)
    xs, ys = lttb([0, 1, 2], [1.0, None, 3.0], 10)  # nulls dropped, short series kept whole
    assert xs == [0.0, 2.0] and ys == [1.0, 3.0]


def test_a_day_of_windows_charts_in_bounded_points():
    windows = [Window(start_ns=i * NS, end_ns=(i + 1) * NS, count=50, errors=0, p50_ms=10.0,
                      p99_ms=50.0 + (i == 40_000) * 900, p99_claimed=False, max_ms=60.0, slow_share=None)
               for i in range(86_400)]
    lines = latency_lines(windows, 0)
    assert lines["downsampled"] and lines["windows"] == 86_400
    assert {line["name"] for line in lines["lines"]} == {"P50", "P99", "max"}
    assert all(len(line["x"]) <= MAX_LINE_POINTS for line in lines["lines"])
    assert max(next(line for line in lines["lines"] if line["name"] == "P99")["y"]) == 950.0


def test_distribution_uses_one_grid_and_reads_quantiles_within_six_percent(gc_run):
    _, _, req = gc_run
    dist = latency_distribution(req)
    edges = np.array(dist.bin_edges_ms)
    grid = bin_edges_ms()
    assert len(grid) == 161 and np.isclose(grid[0], 0.01) and np.isclose(grid[-1], 1e6)
    assert np.all(np.isclose(edges, grid[np.searchsorted(grid, edges[0] * 0.999):][:len(edges)]))
    counts = np.array(dist.classes["all"].counts)
    assert counts.sum() == dist.classes["all"].n == int(req.is_ok.sum())
    assert sum(dist.classes[c].n for c in ("short", "long")) == dist.classes["all"].n
    exact = np.quantile(req.latency_ms[req.is_ok], 0.5)
    upper = edges[1:][np.searchsorted(np.cumsum(counts), counts.sum() / 2)]
    assert exact <= upper <= exact * 1.13  # the bin's upper edge is at most one bin (12.2%) above


def test_slow_points_are_bounded_per_bucket_and_in_time_order(gc_run):
    _, _, req = gc_run
    period = (int(req.scheduled_ns.min()), int(req.end_ns.max()))
    points = slow_request_points(req, 5.0, period, max_buckets=10, top=3)
    assert points.shown == len(points.t_ns) <= 30 < points.above_threshold
    assert points.t_ns == sorted(points.t_ns) and min(points.latency_ms) > 5.0
    assert slow_request_points(req, None, period).shown == 0


def test_representative_trace_is_a_median_slow_request_with_relative_spans(gc_run):
    truth, run, req = gc_run
    spike = truth["spikes"][0]
    slow = np.flatnonzero(req.is_ok & (req.scheduled_ns >= spike["start_ns"]) & (req.scheduled_ns < spike["end_ns"])
                          & (req.latency_ms > 100))
    trace = representative_trace(req, slow, run.spans, {"inference": "inference", "queue_wait": "queue"})
    assert trace.latency_ms == pytest.approx(np.sort(req.latency_ms[slow])[(len(slow) - 1) // 2])
    names = [s.name for s in trace.spans]
    assert names[0] == "POST /v1/infer/text" and "inference" in names
    inference = trace.spans[names.index("inference")]
    assert inference.stage == "inference" and inference.depth == 1 and inference.end_ms - inference.start_ms > 100
    assert trace.spans[names.index("preprocess")].stage is None  # not in the given map
    assert 0 <= trace.spans[0].start_ms < trace.spans[0].end_ms <= trace.end_ms
    assert representative_trace(req, slow[:0], run.spans, {}) is None
    assert span_depths(["a", "b", "c"], [None, "a", "b"]) == [0, 1, 2]


def test_cards_rank_by_impact_write_evidence_as_sentences_and_cap_the_count():
    spikes = [make_spike(i * NS, (i + 1) * NS, [("gc_pause", 0.9, {"share": 0.97, "pause": {"max_ms": 180}})],
                         excess_ms=float(i), p99_ms=100.0 + i)
              for i in range(MAX_CARDS + 3)]
    result = spike_cards(spikes, 0)
    assert len(result["rows"]) == MAX_CARDS + 3 and len(result["cards"]) == MAX_CARDS and result["uncarded"] == 3
    assert [c["number"] for c in result["cards"]] == list(range(MAX_CARDS + 3, 3, -1))  # largest impact first
    assert [c["rank"] for c in result["cards"]] == list(range(1, MAX_CARDS + 1))
    assert result["cards"][0]["cause_rows"][0]["confidence"] == "90%"
    assert result["cards"][0]["top_title"] == "GC pauses of the target"
    sentences = evidence_sentences(CauseFinding("cpu_throttling", 0.9, {
        "summary": "CFS throttling of the target's cgroup", "longest_pause_ms": 180.0, "decomposition": {"x": 1},
        "signals": [{"series": "cgroup.cpu.throttled_ns", "spike": 3.12e8, "baseline": 0.0, "spread": 1e6, "z": 41.0,
                     "excess": 3.12e8, "material_excess": 5e7, "confidence": 1.0}],
        "latency_split": {"latency_growth_ms": 30.0, "server_growth_ms": 28.0, "outside_server_growth_ms": None,
                          "lateness_growth_ms": 0.5, "server_share": 0.93},
        "factors": {"server_side": 1.0, "throttling": 0.98}}))
    assert sentences == [
        "CFS throttling of the target's cgroup",
        "CPU time throttled (CFS quota): 312 ms/s in the spike vs 0 ms/s at baseline (robust z 41); "
        "it counts fully from +50 ms/s.",
        "Longest GC pause overlapping a slow request: 180 ms.",
        "Extra latency of the slow requests: +30.0 ms on average — server +28.0 ms, send lateness +0.5 ms.",
        "Confidence is the product of: server side 100%, throttling 98%."]
    assert not any("_" in text for text in sentences)  # no raw evidence keys


def test_optional_sections_read_defensively():
    assert streaming(None) is None and sweep(None) == (None, None)
    table, chart = sweep(decode(AnalysisSweep, {"steps": [{"offered_rps": 10, "achieved_rps": 9.9, "p99_ms": 20,
                                                           "passed": True}], "knee_rps": 10}))
    assert table["rows"][0]["result"] == "pass" and chart["p99"] == [20] and table["max_under_slo"] == "—"
    def at(value_ms):
        return {"value_ms": value_ms, "ci_low_ms": None, "ci_high_ms": None, "n": 10, "claimed": False, "bound_ms": None}

    ttft = {"p50": at(30.0), "p90": at(60.0), "p95": at(70.0), "p99": at(90.0), "p999": at(None),
            "max": {"value_ms": 95.0, "n": 10}}
    section = decode(Streaming, {"requests": 10, "chunks": 40, "ttft_ms": ttft, "itl_ms": None, "tokens_per_s": None,
                                 "classes": {}, "itl_available": False})
    rows = streaming(section)
    assert [r["metric"] for r in rows["rows"]] == ["time to first token"]  # no ITL without a chunk-time file
    assert rows["rows"][0]["P99"] == "90.0 ms" and rows["rows"][0]["n"] == "10"
    assert rows["facts"] == [{"key": "requests", "value": "10"}, {"key": "chunks", "value": "40"}]
    assert streaming(decode(Streaming, {"classes": {}, "itl_available": False})) is None  # nothing streamed
    assert "coordinated omission" in loop_label({"arrival": {"process": "closed"}})
    assert loop_label({"arrival": {"process": "poisson"}}) is None
    older = {"series": [{"name": "a", "unit": "%", "kind": "gauge", "t_ns": [0], "values": [1]},  # panels chosen by
                        {"name": "b", "unit": "%", "kind": "gauge", "t_ns": [0], "values": [2]},  # the analysis, as
                        {"name": "c", "unit": "", "kind": "gauge", "t_ns": [0], "values": [3]}],  # older ones wrote
             "sources": {}, "panels": [{"id": "cpu", "title": "CPU", "unit": "", "series": ["a", "b", "missing"]}]}
    panels = signal_panels(decode(Signals, older, "signals"), 0)
    assert [(p["title"], len(p["series"])) for p in panels] == [("CPU", 2), ("c", 1)]


COMPARISON = comparison_document(
    baseline=side("base", "/runs/a"), current=side("new|run", "/runs/b"),
    verdict={"regressed": True, "summary": "P95 60 ms → 90 ms"},
    checks=[check("p95 within +10%", False, "+30 ms"), check("error_rate within +0.5 points", True, "+0.0 points")],
    percentiles=[percentile_row("p95", baseline_ms=60.0, current_ms=90.0, change_ms=30.0, change_ci_ms=[24.0, 36.0],
                                relative_change=0.5, significant=True, regressed=True)],
    changed_stage={"stage": "queue", "change_ms": 28.0, "share_of_growth": 1.0, "summary": "queue wait grew"},
)


def test_junit_has_a_case_per_slo_and_per_comparison_check():
    analysis = {"run": run_section(name="r", path="/r", status="complete", duration_s=1.0),
                "verdict": {"slos": [{"slo": "p99 < 100ms", "metric": "p99", "observed": 50.0, "threshold": 100.0,
                                      "passed": True, "claimed": True}]}}
    root = ET.fromstring(render_junit(analysis, COMPARISON).split("?>", 1)[1])
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"tailscope.slo", "tailscope.compare"}
    cases = suites["tailscope.compare"].findall("testcase")
    assert [c.get("name") for c in cases] == ["p95 within +10%", "error_rate within +0.5 points"]
    assert cases[0].find("failure") is not None and cases[1].find("failure") is None
    assert suites["tailscope.compare"].get("failures") == "1"


def test_comparison_data_markdown_and_page():
    data = build_comparison_data(COMPARISON)
    assert data["verdict"]["label"] == "REGRESSION" and data["percentiles"][0]["change_ci"] == "+24.0 ms … +36.0 ms"
    assert data["changed_stage"]["stage"] == "queue" and not data["has_distributions"]
    text = render_comparison_markdown(data)
    assert "**REGRESSION**" in text and "new\\|run" in text and "| p95 within +10% | fail |" in text
    page = render_comparison(COMPARISON, compress_plotly=False)
    assert "The comparison carries no distributions." in page and 'id="plotly-inline"' in page


def test_markdown_cells_cannot_inject():
    assert cell("<img src=x>|`x`\nnext") == "&lt;img src=x&gt;\\|\\`x\\` next"


def test_a_synthetic_day_renders_a_bounded_page(tmp_path):
    """A 24-hour analysis shape (86,400 windows, 3,000 slow points, 2,000-point signals) stays far below 10 MB."""
    from tailscope.analyzers.analysis import analyze_run
    from tailscope.reports.data import build_report_data

    path = str(tmp_path / "run")
    write_synthetic_run(path, duration_s=20, rate=20, seed=2)
    analysis = analyze_run(path)
    window = analysis["windows"][0]
    analysis["windows"] = [dict(window, start_ns=window["start_ns"] + i * NS, end_ns=window["end_ns"] + i * NS)
                           for i in range(86_400)]
    analysis["run"]["duration_s"] = 86_400.0
    html = render_html(build_report_data(analysis))
    assert len(html.encode("utf-8")) < 10_000_000
