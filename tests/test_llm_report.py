"""The report of an LLM run: server panels, the other-traffic band, LLM cause cards, the slow/normal
stage split, summary.md and the baseline comparison's LLM figures.

View data over seeded synthetic runs (tailscope.testkit.synthetic: a ``kv_cache`` spike fills the
KV cache to 99% from 45% and preempts ~6 requests/s; tailscope.testkit.synthetic_llm: streamed
chat with known TTFT/TPOT), and headless Chromium over the report of the synthetic KV-pressure run
and of a real ``tailscope demo --llm`` (the LLM reference server, its ``llm_request`` spans under
the vllm preset and its /metrics scraped).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
from cli_helpers import only_run_dir, run_tailscope
from report_fixtures import run_section

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.spikes import CauseFinding
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.comparison.baseline import compare_runs
from tailscope.analyzers.stages.decomposition import StageMatrix
from tailscope.analyzers.stages.slow_split import slow_split
from tailscope.reports.compare_html import build_comparison_data
from tailscope.reports.data import build_report_data
from tailscope.reports.evidence_text import evidence_sentences
from tailscope.reports.markdown import render_comparison_markdown, render_markdown
from tailscope.reports.server_view import other_traffic_chart, other_traffic_text, server_panels
from tailscope.reports.upgrade import other_traffic_of, run_of, server_load_of
from tailscope.reports.writer import write_outputs
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

CHROMIUM = "/usr/bin/chromium"
NS = 1_000_000_000
SPIKE = {"at_s": 18, "duration_s": 4, "extra_ms": 80}
SERVER_CHARTS = ["server-queue-chart", "server-kv-chart", "server-preemptions-chart", "server-prefill-chart"]


@pytest.fixture(scope="module")
def kv_run(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("kv") / "run")
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=31, spikes=[{"kind": "kv_cache", "surge": 1.0, **SPIKE}])
    analysis = analyze_run(path)
    return {"path": path, "truth": truth, "analysis": analysis, "html": write_outputs(path, analysis)["html"]}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """A real ``tailscope demo --llm`` of 8 s: the LLM reference server under scenarios/llm-demo.yaml."""
    out = tmp_path_factory.mktemp("llm-demo")
    proc = run_tailscope("demo", "--llm", "--duration", "8s", "--out", str(out), timeout=240)
    assert proc.returncode in (1, 3), proc.stderr[-3000:]  # 8 s claims no P99: inconclusive, or a claimed breach
    run_dir = only_run_dir(out)
    with open(os.path.join(run_dir, "analysis.json")) as fh:
        return {"dir": run_dir, "analysis": json.load(fh), "html": os.path.join(run_dir, "report.html")}


# -- view data ---------------------------------------------------------------------------------------

def test_server_panels_give_the_kv_cache_in_percent_and_preemptions_per_second(kv_run):
    analysis = kv_run["analysis"]
    panels = server_panels(server_load_of(analysis), other_traffic_of(analysis), run_of(analysis).load_origin_ns or 0)
    assert panels["preset"] == "vLLM"
    by_id = {p["id"]: p for p in panels["panels"]}
    assert list(by_id) == ["server-queue", "server-kv", "server-preemptions", "server-prefill"]
    assert [s["role"] for s in by_id["server-queue"]["series"]] == ["waiting", "running"]
    lo, hi = kv_run["truth"]["spikes"][0]["start_ns"], kv_run["truth"]["spikes"][0]["end_ns"]
    origin = kv_run["analysis"]["run"]["load_start_ns"]
    kv = by_id["server-kv"]["series"][0]
    inside = [y for x, y in zip(kv["x"], kv["y"]) if y is not None and lo + NS <= origin + x * NS <= hi - NS]
    before = [y for x, y in zip(kv["x"], kv["y"]) if y is not None and origin + x * NS < lo - 2 * NS]
    assert np.median(inside) == pytest.approx(99, abs=1) and np.median(before) == pytest.approx(45, abs=2)
    rate = by_id["server-preemptions"]["series"][0]
    assert max(v for v in rate["y"] if v is not None) == pytest.approx(6, abs=1.5)
    assert min(v for v in rate["y"] if v is not None) == pytest.approx(0, abs=0.01)


def _other_chart(analysis: dict) -> dict | None:
    return other_traffic_chart(other_traffic_of(analysis), run_of(analysis).load_origin_ns or 0)


def _other_text(analysis: dict) -> str | None:
    return other_traffic_text(other_traffic_of(analysis), analysis["stages"]["joined_requests"])


def test_other_traffic_is_a_rate_per_window_and_a_sentence():
    analysis = {"run": run_section(load_start_ns=10 * NS), "stages": {"joined_requests": 40},
                "other_traffic": {"requests": 12, "prompt_tokens": 6000, "output_tokens": None, "token_attributes": None, "window_s": 2.0,
                                  "windows": [{"start_ns": 10 * NS, "requests": 4, "prompt_tokens": 2000, "output_tokens": None},
                                              {"start_ns": 12 * NS, "requests": 8, "prompt_tokens": 4000, "output_tokens": None}]}}
    chart = _other_chart(analysis)
    assert chart == {"x": [1.0, 3.0], "requests_per_s": [2.0, 4.0], "prompt_tokens_per_s": [1000.0, 2000.0]}
    text = _other_text(analysis)
    assert "12 requests that tailscope did not send" in text and "6,000 prompt tokens" in text
    analysis["other_traffic"] = {**analysis["other_traffic"], "requests": 0, "windows": []}
    assert _other_chart(analysis) is None and _other_text(analysis).startswith("Other traffic: none")
    analysis["stages"]["joined_requests"] = 0  # nothing joined: other traffic cannot be told apart
    assert _other_text(analysis) is None


def test_slow_split_takes_the_requests_above_p99_of_ttft_or_tpot():
    n = 200
    ttft = np.full(n, 50.0)
    tpot = np.full(n, 10.0)
    ttft[:2], tpot[2:4] = 500.0, 40.0  # the slow: 2 by TTFT, 2 by TPOT
    queue = np.where(np.arange(n) < 2, 450.0, 5.0)
    decode = np.where((np.arange(n) >= 2) & (np.arange(n) < 4), 4000.0, 1000.0)
    matrix = StageMatrix(np.arange(n), ("queue", "decode", "server"), np.column_stack([queue, decode, queue + decode]), n, [])
    output = np.full(n, 100.0)
    split = dataclasses.asdict(slow_split(matrix, {"ttft": ttft, "tpot": tpot},  # as analysis.json states it
                                          {"prompt": np.full(n, 300.0), "output": output}))
    assert split["slow_requests"] == 4 and split["normal_requests"] == n - 4
    assert split["thresholds_ms"] == {"ttft": 500.0, "tpot": 40.0}
    rows = {s["stage"]: s for s in split["stages"]}
    assert rows["queue"]["slow_mean_ms"] == pytest.approx((2 * 450 + 2 * 5) / 4) and rows["queue"]["normal_mean_ms"] == 5.0
    assert split["decode_per_output_token_ms"] == {"slow": pytest.approx((2 * 10 + 2 * 40) / 4), "normal": 10.0}


def test_the_kv_cause_card_reads_its_evidence_in_words_and_draws_the_server_series(kv_run):
    spike = kv_run["analysis"]["spikes"][0]
    assert spike["causes"][0]["kind"] == "kv_cache_pressure"
    assert [e["name"] for e in spike["evidence_series"]] == ["server.kv_usage", "server.preemptions", "server.waiting"]
    sentences = evidence_sentences(decode(CauseFinding, spike["causes"][0]))
    assert "KV-cache usage: 99% of the cache in the spike vs 45% of the cache at baseline." in sentences
    assert any(s.startswith("Preemptions: 5.") and s.endswith("/s in the spike vs 0/s at baseline.") for s in sentences)
    assert not any("Kv usage" in s or "per:" in s or "+-" in s for s in sentences), sentences


def test_summary_md_has_the_llm_figures(tmp_path):
    path = str(tmp_path / "run")
    write_synthetic_llm_run(path, duration_s=30, rate=20, seed=4, slo=["ttft p99 < 300ms"])
    data = build_report_data(analyze_run(path))
    text = render_markdown(data)
    llm = data["llm"]
    assert f"LLM goodput {llm['goodput']['share']}" in text and llm["rate"]["aggregate"] in text
    for row in llm["rows"]:
        assert f"| {row['metric']} | {row['p50']} | {row['p99']} | {row['p99_ci']} |" in text
    assert [row["metric"] for row in llm["rows"]] == ["TTFT", "TPOT", "ITL (per token)", "chunk gap", "end-to-end"]
    assert all(row["p50"].endswith(" ms") and row["p99"].endswith(" ms") for row in llm["rows"])
    per_chunk = next(t for t in llm["tokens"] if t["what"] == "per content chunk")
    assert f"Tokens per content chunk: mean {per_chunk['mean']}, P50 3, P99 3" in text
    assert "| latency P50 |" in text and "| latency P99 |" in text


def test_compare_judges_ttft_tpot_tokens_and_goodput_against_the_baseline(tmp_path):
    base, slower = str(tmp_path / "base"), str(tmp_path / "slower")
    write_synthetic_llm_run(base, duration_s=30, rate=30, seed=1, slo=["ttft p99 < 200ms"])
    write_synthetic_llm_run(slower, duration_s=30, rate=30, seed=2, ttft_median_ms=160, slo=["ttft p99 < 200ms"])
    comparison = compare_runs(slower, base)
    checks = {c["name"]: c for c in comparison["checks"] if c["name"].startswith("LLM")}
    assert set(checks) == {"LLM TTFT P99", "LLM TPOT P99", "LLM output tokens/s", "LLM goodput"}
    assert not checks["LLM TTFT P99"]["passed"] and not checks["LLM goodput"]["passed"]
    assert checks["LLM TPOT P99"]["passed"] and checks["LLM output tokens/s"]["passed"]
    assert comparison["verdict"]["regressed"] and "LLM regression: TTFT P50" in comparison["verdict"]["summary"]
    assert "| LLM figure |" in render_comparison_markdown(build_comparison_data(comparison))
    same = compare_runs(base, base)
    assert all(c["passed"] for c in same["checks"]) and len(same["llm"]["rows"]) == 6


def test_the_demo_splits_server_time_into_api_server_queue_prefill_decode(demo_run):
    stages = demo_run["analysis"]["stages"]
    assert stages["rules"]["preset"] == "vllm"
    assert all(stages["by_stage"][s]["count"] >= 10 for s in ("api_server", "queue", "prefill", "decode"))
    split = stages["slow_split"]
    assert split["by"] == ["ttft", "tpot"] and split["slow_requests"] >= 1
    assert [s["stage"] for s in split["stages"]][:4] == ["api_server", "queue", "prefill", "decode"]
    load = demo_run["analysis"]["server_load"]
    assert {"waiting", "running", "kv_usage", "preemptions"} <= set(load["roles"])
    assert max(v or 0 for v in load["roles"]["running"]["values"]) >= 1


# -- in a browser -------------------------------------------------------------------------------------

needs_browser = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing: no headless browser")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield instance
        finally:
            instance.close()


def _load(browser, path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.problems = []
    page.on("console", lambda m: page.problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    page.goto("file://" + os.path.abspath(path))
    page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=60_000)
    return page


PANEL_STATE = """ids => ids.map(id => {
    const d = document.getElementById(id);
    if (!d || !d.data) { return {id: id, drawn: false}; }
    const ys = d.data.flatMap(t => (t.y || []).filter(v => v !== null));
    return {id: id, drawn: true, points: ys.length, max: Math.max(...ys), range: d.layout.xaxis.range,
            top: d.getBoundingClientRect().top};
})"""


@pytest.mark.browser
@needs_browser
@pytest.mark.parametrize("which", ["kv_run", "demo_run"])
def test_server_panels_render_with_data_aligned_with_the_llm_charts(browser, which, request):
    found = request.getfixturevalue(which)
    page = _load(browser, found["html"])
    try:
        panels = page.evaluate(PANEL_STATE, SERVER_CHARTS + ["latency-chart"])
        split = page.evaluate("() => { const d = document.getElementById('slow-split-chart');"
                              " return d && d.data ? d.data.map(t => ({name: t.name, y: t.y})) : null; }")
        page.evaluate("() => Plotly.relayout(document.getElementById('server-kv-chart'), {'xaxis.range': [5, 9]})")
        page.wait_for_timeout(500)
        zoomed = page.evaluate(PANEL_STATE, ["latency-chart", "server-queue-chart"])
        assert page.problems == [], page.problems
    finally:
        page.close()
    latency = panels.pop()
    assert all(p["drawn"] and p["points"] > 10 for p in panels), panels
    assert all(p["range"] == latency["range"] for p in panels)  # one time axis
    assert [p["top"] for p in panels] == sorted(p["top"] for p in panels) and panels[0]["top"] > latency["top"]
    assert all(z["range"] == [5, 9] for z in zoomed)  # zooming a server panel zooms the others
    kv = panels[1]
    assert kv["max"] <= 100 and (kv["max"] >= 98 if which == "kv_run" else kv["max"] > 0)
    assert split is not None and [t["name"] for t in split] == ["normal requests", "slow requests"]
    if which == "demo_run":
        assert split[0]["y"][:4] == ["api_server", "queue", "prefill", "decode"]


@pytest.mark.browser
@needs_browser
def test_the_kv_card_opens_on_the_server_series(browser, kv_run):
    page = _load(browser, kv_run["html"])
    try:
        page.evaluate("() => { document.querySelector('.cause-card').open = true; }")
        page.wait_for_function("document.querySelector('.cause-card').dataset.drawn === 'yes'", timeout=30_000)
        titles = page.evaluate("() => Array.from(document.querySelectorAll('.cause-card .evidence-charts h5')).map(h => h.textContent)")
        text = page.inner_text(".cause-card")
        assert page.problems == [], page.problems
    finally:
        page.close()
    assert titles == ["KV-cache usage (% of the KV cache)", "preemptions (/s)", "requests waiting on the server (requests)"]
    assert "KV-cache usage: 99% of the cache in the spike" in text
