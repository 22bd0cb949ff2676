"""The HTML reports in a real headless Chromium: charts, cause cards, linked zoom, escaping.

Three pages: the report of a short real run (``tailscope demo`` in a
subprocess), the report of a synthetic run with spikes whose causes are known
and hostile strings everywhere a run can put one, and a comparison report.
Screenshots (one viewport, full page) and the time to plotted charts go to
``test-artifacts/`` for review; neither is asserted on.
"""

from __future__ import annotations

import json
import os

import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.writer import write_comparison_outputs, write_outputs
from tailscope.testing.synthetic import write_synthetic_run

from cli_helpers import only_run_dir, run_tailscope
from report_fixtures import (ONERROR_PAYLOAD, SCRIPT_PAYLOAD, SVG_PAYLOAD, add_hostile_fault, add_hostile_spans,
                             spike_with_known_causes)

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 900}
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "test-artifacts")
NS = 1_000_000_000
GC_CAUSES = [
    {"kind": "gc_pause", "confidence": 0.92,
     "evidence": {"slow_requests_overlapping_pause": 0.97, "longest_pause_ms": 250.0, "generation": 2}},
    {"kind": "cpu_contention", "confidence": 0.55, "evidence": {"runq_wait_ratio": 3.2, "note": SCRIPT_PAYLOAD}},
]
QUEUE_CAUSES = [{"kind": "queue_saturation", "confidence": 0.81, "evidence": {"queue_depth_max": 9.0}}]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing: no headless browser"),
]


def _present_sections(analysis: dict) -> None:
    """The optional sections other analyzers add: streaming, goodput, sweep, limited windows, panels."""
    load_start = analysis["run"]["load_start_ns"]
    percentiles = analysis["summary"]["latency_ms"]
    analysis["summary"]["goodput"] = {"share": 0.953, "rps": 55.1, "definition": "requests meeting p99 < 250ms"}
    analysis["streaming"] = {"ttft_ms": percentiles, "itl_ms": analysis["summary"]["service_time_ms"], "streams": 120}
    analysis["generator_limited_windows"] = [{"start_ns": load_start + 26 * NS, "end_ns": load_start + 27 * NS}]
    analysis["sweep"] = {"steps": [{"offered_rps": r, "achieved_rps": r * 0.99, "p50_ms": 10 + r / 10,
                                    "p99_ms": 20 + (r / 25) ** 3, "error_rate": 0.0, "passed": r < 120}
                                   for r in (20, 40, 60, 80, 100, 120, 140)],
                         "knee_rps": 100.0, "max_rate_under_slo_rps": 100.0, "slo": "p99 < 250ms"}
    first_two = [s["name"] for s in analysis["signals"]["series"][:2]]
    analysis["signals"]["panels"] = [{"title": "CPU", "series": first_two}]


@pytest.fixture(scope="module")
def synthetic_report(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("browser") / "run")
    truth = write_synthetic_run(path, duration_s=30, rate=60, seed=9, error_rate=0.02,
                                error_message=ONERROR_PAYLOAD + SCRIPT_PAYLOAD, classes=(SCRIPT_PAYLOAD, "long"),
                                name="hostile " + SCRIPT_PAYLOAD,
                                spikes=[{"kind": "gc", "at_s": 8, "duration_s": 2, "extra_ms": 250},
                                        {"kind": "queue", "at_s": 20, "duration_s": 2, "extra_ms": 150}])
    add_hostile_spans(path)
    add_hostile_fault(path, truth["start_ns"] + 14 * NS, truth["start_ns"] + 15 * NS)
    analysis = analyze_run(path)
    analysis["spikes"] = [spike_with_known_causes(path, s["start_ns"], s["end_ns"], causes)
                          for s, causes in zip(truth["spikes"], (GC_CAUSES, QUEUE_CAUSES))]
    _present_sections(analysis)
    return {"html": write_outputs(path, analysis)["html"], "analysis": analysis}


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-report")
    proc = run_tailscope("demo", "--duration", "8s", "--out", str(out), timeout=180)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return os.path.join(only_run_dir(out), "report.html")


@pytest.fixture(scope="module")
def comparison_report(synthetic_report, tmp_path_factory):
    current = synthetic_report["analysis"]
    p99 = current["summary"]["latency_ms"]["p99"]
    comparison = {
        "baseline": {"name": "last-release " + ONERROR_PAYLOAD, "path": "/runs/base", "requests": 1800,
                     "achieved_rps": 60.0, "error_rate": 0.0, "duration_s": 30.0},
        "current": {"name": current["run"]["name"], "path": current["run"]["path"], "requests": 1790,
                    "achieved_rps": 59.7, "error_rate": 0.02, "duration_s": 30.0},
        "verdict": {"regressed": True, "summary": "P99 rose by 180 ms; the interval excludes 0"},
        "checks": [{"name": "p99 within +10% of baseline", "passed": False, "message": "+180 ms (+72%)"},
                   {"name": "error_rate within +0.5 points", "passed": True, "message": SCRIPT_PAYLOAD}],
        "percentiles": [{"metric": "latency_ms", "cls": None, "percentile": "p99", "baseline_ms": 70.0,
                         "baseline_ci_ms": [65.0, 74.0], "current_ms": p99["value_ms"],
                         "current_ci_ms": [p99["ci_low_ms"], p99["ci_high_ms"]], "change_ms": p99["value_ms"] - 70,
                         "change_ci_ms": [p99["ci_low_ms"] - 74, p99["ci_high_ms"] - 65],
                         "relative_change": p99["value_ms"] / 70 - 1, "significant": True, "regressed": True}],
        "stages": [{"stage": "inference", "baseline_ms": 9.0, "current_ms": 30.0, "change_ms": 21.0},
                   {"stage": SCRIPT_PAYLOAD, "baseline_ms": 1.0, "current_ms": 1.1, "change_ms": 0.1}],
        "changed_stage": {"stage": "inference", "change_ms": 21.0, "summary": "inference mean 9 → 30 ms"},
        "distributions": {"baseline": current["distribution"], "current": current["distribution"]},
    }
    return write_comparison_outputs(os.path.dirname(synthetic_report["html"]), comparison)["html"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def open_page(browser, path: str, name: str):
    """Open a report, wait for its charts; record problems, fetches, timing and a screenshot."""
    page = browser.new_page(viewport=VIEWPORT)
    page.problems, page.requests = [], []
    page.on("console", lambda m: page.problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    page.on("request", lambda r: page.requests.append(r.url))
    page.goto("file://" + os.path.abspath(path))
    page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=30_000)
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, f"report-{name}.png"), full_page=True)
    timing = page.evaluate("() => ({first_chart_ms: window.tailscopeFirstChartMs, ready_ms: window.tailscopeReadyMs,"
                           " draw_ms: window.tailscopeDrawMs,"
                           " bytes: document.documentElement.outerHTML.length})")
    with open(os.path.join(ARTIFACTS, f"report-{name}-timing.json"), "w", encoding="utf-8") as fh:
        json.dump(timing, fh)
    print(f"{name}: first chart {timing['first_chart_ms']:.0f} ms, all charts {timing['ready_ms']:.0f} ms "
          "after navigation start")
    return page


@pytest.fixture(scope="module")
def synthetic_page(browser, synthetic_report):
    page = open_page(browser, synthetic_report["html"], "synthetic")
    yield page
    page.close()


@pytest.fixture(scope="module")
def demo_page(browser, demo_report):
    page = open_page(browser, demo_report, "demo")
    yield page
    page.close()


@pytest.fixture(scope="module")
def comparison_page(browser, comparison_report):
    page = open_page(browser, comparison_report, "comparison")
    yield page
    page.close()


PLOTTED = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
    id: d.id || d.className, svg: d.querySelectorAll('.main-svg').length > 0,
    points: d.data.reduce((n, t) => n + ((t.x || []).filter(v => v !== null).length), 0)}))"""


@pytest.mark.parametrize("name", ["synthetic_page", "demo_page", "comparison_page"])
def test_no_console_errors_and_no_network(name, request):
    page = request.getfixturevalue(name)
    assert page.problems == []
    assert [u for u in page.requests if not u.startswith("file://")] == []


def test_every_chart_of_the_synthetic_report_is_drawn_with_data(synthetic_page, synthetic_report):
    charts = synthetic_page.evaluate(PLOTTED)
    assert all(c["svg"] and c["points"] > 0 for c in charts), charts
    ids = [c["id"] for c in charts]
    for expected in ("latency-chart", "histogram-chart", "cdf-chart", "stage-chart", "sweep-chart"):
        assert expected in ids
    series = len(synthetic_report["analysis"]["signals"]["series"])
    assert sum(1 for i in ids if i.startswith("signal-")) == series - 1  # one panel holds two series
    assert sum(1 for c in charts if "waterfall" in c["id"]) == 2
    assert sum(1 for c in charts if "stage-compare" in c["id"]) == 2
    latency = synthetic_page.evaluate("""() => { const d = document.getElementById('latency-chart');
        return {names: d.data.map(t => t.name), shapes: d.layout.shapes.length,
                slow: d.data.find(t => t.name === 'slow requests').x.length}; }""")
    assert {"P50", "P90", "max", "slow requests"} <= set(latency["names"])
    assert latency["shapes"] == 2 + 3 + 1  # spikes, faults (2 synthetic + 1 hostile), generator-limited
    assert latency["slow"] > 0
    classes = synthetic_page.evaluate("() => document.getElementById('histogram-chart').data.map(t => t.name)")
    assert len(classes) == 3  # all + two classes


def test_cause_cards_list_the_expected_causes_in_rank_order(synthetic_page):
    cards = synthetic_page.evaluate("""() => Array.from(document.querySelectorAll('.cause-card')).map(c => ({
        causes: Array.from(c.querySelectorAll('.cause-kind')).map(e => e.textContent),
        evidence: Array.from(c.querySelectorAll('.evidence th')).map(e => e.textContent),
        bars: c.querySelector('.waterfall').data[0].y.length}))""")
    assert [c["causes"] for c in cards] == [["gc_pause", "cpu_contention"], ["queue_saturation"]]
    assert "slow_requests_overlapping_pause" in cards[0]["evidence"]
    assert all(c["bars"] >= 7 for c in cards)  # request, lateness and the six spans of the trace
    table = synthetic_page.evaluate("() => document.querySelector('#spike-table').textContent")
    assert "gc_pause (92%)" in table and "queue_saturation (81%)" in table


def test_optional_sections_appear_when_present(synthetic_page):
    text = synthetic_page.evaluate("() => document.body.innerText")
    assert "goodput 95.30%" in text
    assert "time to first token" in text and "inter-token latency" in text
    assert "Knee at 100.00 req/s" in text


@pytest.mark.parametrize("name", ["synthetic_page", "demo_page"])
def test_zooming_one_time_chart_zooms_all(name, request):
    page = request.getfixturevalue(name)
    page.evaluate("() => Plotly.relayout(document.getElementById('latency-chart'), {'xaxis.range': [2, 5]})")
    page.wait_for_function("() => { const r = document.getElementById('signal-0').layout.xaxis.range;"
                           " return Math.abs(r[0] - 2) < 1e-6 && Math.abs(r[1] - 5) < 1e-6; }")
    ranges = page.evaluate("() => Array.from(document.querySelectorAll('#signal-panels .panel-chart'))"
                           ".map(d => d.layout.xaxis.range)")
    assert ranges and all(r == [2, 5] for r in ranges)
    page.evaluate("() => Plotly.relayout(document.getElementById('signal-1'), {'xaxis.range': [1, 3]})")
    page.wait_for_function("() => document.getElementById('latency-chart').layout.xaxis.range[1] === 3")


def test_log_axis_toggle(synthetic_page):
    synthetic_page.click("#log-toggle")
    assert synthetic_page.evaluate("() => document.getElementById('latency-chart').layout.yaxis.type") == "log"
    synthetic_page.click("#log-toggle")
    assert synthetic_page.evaluate("() => document.getElementById('latency-chart').layout.yaxis.type") == "linear"


def test_demo_report_shows_a_real_run(demo_page):
    charts = demo_page.evaluate(PLOTTED)
    by_id = {c["id"]: c for c in charts}
    assert by_id["latency-chart"]["points"] > 0 and by_id["histogram-chart"]["points"] > 0
    assert sum(1 for i in by_id if i.startswith("signal-")) >= 3  # host, process, target signals
    assert demo_page.evaluate("() => document.querySelectorAll('#sources tr').length") >= 3


def test_hostile_strings_are_text_and_nothing_runs(synthetic_page, comparison_page):
    for page in (synthetic_page, comparison_page):
        assert page.evaluate("() => window.__pwned") is None
        assert page.evaluate("() => document.scripts.length") == 4  # chart data, packed plotly, loader, app
        assert page.evaluate("() => document.querySelectorAll('img, iframe, [onerror], [onload]').length") == 0
    page = synthetic_page
    texts = page.evaluate("""() => ({
        unmapped: Array.from(document.querySelectorAll('#unmapped .span-name')).map(e => e.textContent),
        errors: Array.from(document.querySelectorAll('.error-message')).map(e => e.textContent),
        classes: Array.from(document.querySelectorAll('.class-name')).map(e => e.textContent),
        faults: document.querySelector('#faults').textContent, scenario: document.querySelector('#scenario').textContent,
        evidence: Array.from(document.querySelectorAll('.evidence td')).map(e => e.textContent),
        ticks: Array.from(document.querySelectorAll('#histogram-chart .legendtext')).map(e => e.textContent)})""")
    assert {SCRIPT_PAYLOAD, ONERROR_PAYLOAD, SVG_PAYLOAD} <= set(texts["unmapped"])
    assert texts["errors"] == [ONERROR_PAYLOAD + SCRIPT_PAYLOAD]
    assert SCRIPT_PAYLOAD in texts["classes"]
    assert ONERROR_PAYLOAD in texts["faults"] and SVG_PAYLOAD in texts["faults"]
    assert SCRIPT_PAYLOAD in texts["scenario"] and SCRIPT_PAYLOAD in texts["evidence"]
    assert SCRIPT_PAYLOAD in texts["ticks"]  # Plotly legend shows the class name as text
    assert SCRIPT_PAYLOAD in page.title()
    assert SCRIPT_PAYLOAD in comparison_page.evaluate("() => document.querySelector('#checks').textContent")
