"""The HTML reports in a real headless Chromium: the answer first, folded evidence, escaping.

Five pages: the report of a short real run (``tailscope demo`` in a subprocess,
with its injected GC storm), the report of a synthetic run with spikes as the
analyzers find and explain them, the report of a synthetic run with spikes
whose causes are given and hostile strings everywhere a run can put one, the
report of a seeded synthetic LLM run with a TTFT spike, and a comparison report. At 1400×1000: the top cause's name and evidence sentence
are on the first screen; no chart is drawn in a folded section before it is
opened; no console error, no network request. Full-page screenshots (every
section opened) and the time to plotted charts go to ``test-artifacts/`` for
review. ``TAILSCOPE_DOCS_SCREENSHOTS=1`` also writes the first screens shown in
docs/report.md (``docs/images/report-*.png``, at 0.7 scale to stay small).
"""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import only_run_dir, run_tailscope
from comparison_fixtures import check, comparison_document, percentile_row, side, stage_row
from report_fixtures import ONERROR_PAYLOAD, SCRIPT_PAYLOAD, SVG_PAYLOAD, add_hostile_fault, add_hostile_spans, spike_with_known_causes

from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.formatting import fmt_ms, fmt_share
from tailscope.reports.writer import write_comparison_outputs, write_outputs
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 1000}
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "test-artifacts")
DOCS_IMAGES = os.path.join(os.path.dirname(__file__), "..", "docs", "images")
OPEN_ALL = "() => document.querySelectorAll('details').forEach(d => { d.open = true; })"
ALL_DRAWN = "() => Array.from(document.querySelectorAll('details[data-drawn]')).every(d => d.dataset.drawn === 'yes')"
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
    analysis["summary"]["goodput"] = {"share": 0.953, "good": 1715, "total": 1800, "rps": 55.1,
                                      "criteria": ["p99 < 250ms"], "definition": "requests meeting p99 < 250ms",
                                      "by_class": {}}
    analysis["streaming"] = {"requests": 120, "chunks": 2400, "chunks_per_request": 20.0, "ttft_ms": percentiles,
                             "itl_ms": analysis["summary"]["service_time_ms"], "tokens_per_s": 80.0,
                             "decode_tokens_per_s_p50": 41.0, "decode_tokens_per_s_mean": 40.2, "classes": {},
                             "itl_available": True}
    analysis["generator_limited_windows"] = [{"start_ns": load_start + 26 * NS, "end_ns": load_start + 27 * NS}]
    analysis["sweep"] = {"steps": [{"offered_rps": r, "achieved_rps": r * 0.99, "p50_ms": 10 + r / 10,
                                    "p99_ms": 20 + (r / 25) ** 3, "error_rate": 0.0, "passed": r < 120}
                                   for r in (20, 40, 60, 80, 100, 120, 140)],
                         "knee_rps": 100.0, "max_rate_under_slo_rps": 100.0, "slo": "p99 < 250ms"}
    first_two = [s["name"] for s in analysis["signals"]["series"][:2]]
    analysis["signals"]["panels"] = [{"id": "cpu", "title": "CPU", "unit": analysis["signals"]["series"][0]["unit"],
                                      "series": first_two}]


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
def detected_report(tmp_path_factory):
    """A synthetic run whose spikes the analyzers find and explain themselves (evidence series included)."""
    path = str(tmp_path_factory.mktemp("detected") / "run")
    write_synthetic_run(path, duration_s=40, rate=60, seed=11, name="synthetic spikes",
                        spikes=[{"kind": "throttle", "at_s": 12, "duration_s": 3, "extra_ms": 200},
                                {"kind": "gc", "at_s": 26, "duration_s": 2, "extra_ms": 120}])
    analysis = analyze_run(path)
    return {"html": write_outputs(path, analysis)["html"], "analysis": analysis}


@pytest.fixture(scope="module")
def llm_report(tmp_path_factory):
    """A seeded synthetic LLM run (streamed openai-chat) whose TTFT rose by 400 ms from 20 s to 24 s."""
    path = str(tmp_path_factory.mktemp("llm") / "run")
    truth = write_synthetic_llm_run(path, duration_s=40, rate=25, seed=9, name="synthetic llm", slo=["p99 < 2000ms"],
                                    ttft_spike={"at_s": 20, "duration_s": 4, "extra_ms": 400})
    analysis = analyze_run(path)
    return {"html": write_outputs(path, analysis)["html"], "analysis": analysis, "truth": truth}


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-report")
    proc = run_tailscope("demo", "--duration", "12s", "--out", str(out), timeout=180)
    assert proc.returncode in (0, 1, 3), proc.stderr[-3000:]  # 12 s at 40 req/s is near the 459 that claim a P99
    return os.path.join(only_run_dir(out), "report.html")


@pytest.fixture(scope="module")
def comparison_report(synthetic_report, tmp_path_factory):
    current = synthetic_report["analysis"]
    p99 = current["summary"]["latency_ms"]["p99"]
    comparison = comparison_document(
        baseline=side("last-release " + ONERROR_PAYLOAD, "/runs/base", requests=1800, achieved_rps=60.0,
                      error_rate=0.0, duration_s=30.0),
        current=side(current["run"]["name"], current["run"]["path"], requests=1790, achieved_rps=59.7,
                     error_rate=0.02, duration_s=30.0),
        verdict={"regressed": True, "summary": "P99 rose by 180 ms; the interval excludes 0"},
        checks=[check("p99 within +10% of baseline", False, "+180 ms (+72%)"),
                check("error_rate within +0.5 points", True, SCRIPT_PAYLOAD)],
        percentiles=[percentile_row("p99", baseline_ms=70.0, baseline_ci_ms=[65.0, 74.0], current_ms=p99["value_ms"],
                                    current_ci_ms=[p99["ci_low_ms"], p99["ci_high_ms"]], change_ms=p99["value_ms"] - 70,
                                    change_ci_ms=[p99["ci_low_ms"] - 74, p99["ci_high_ms"] - 65],
                                    relative_change=p99["value_ms"] / 70 - 1, significant=True, regressed=True)],
        stages=[stage_row("inference", 9.0, 30.0, 21.0), stage_row(SCRIPT_PAYLOAD, 1.0, 1.1, 0.1)],
        changed_stage={"stage": "inference", "change_ms": 21.0, "share_of_growth": 1.0,
                       "summary": "inference mean 9 → 30 ms"},
        distributions={"baseline": current["distribution"], "current": current["distribution"]},
    )
    return write_comparison_outputs(os.path.dirname(synthetic_report["html"]), comparison)["html"]


@pytest.fixture(scope="module")
def release_comparison(tmp_path_factory):
    """A real comparison of two synthetic runs: the current one's inference is slower throughout."""
    from tailscope.analyzers.comparison.baseline import compare_runs

    root = tmp_path_factory.mktemp("release")
    write_synthetic_run(str(root / "last-release"), duration_s=30, rate=80, seed=1, name="last-release")
    write_synthetic_run(str(root / "candidate"), duration_s=30, rate=80, seed=2, name="candidate",
                        spikes=[{"kind": "gpu", "at_s": 0, "duration_s": 30, "extra_ms": 9, "stage": "inference"}])
    comparison = compare_runs(str(root / "candidate"), str(root / "last-release"))
    return write_comparison_outputs(str(root), comparison)["html"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def load(browser, path: str, viewport: dict = VIEWPORT, scale: float = 1.0):
    """A fresh page of a report at rest (its on-load charts drawn), recording problems and fetches."""
    page = browser.new_page(viewport=viewport, device_scale_factor=scale)
    page.problems, page.requests = [], []
    page.on("console", lambda m: page.problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    page.on("request", lambda r: page.requests.append(r.url))
    page.goto("file://" + os.path.abspath(path))
    page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=30_000)
    return page


def open_everything(page) -> None:
    """Open every folded section and wait until its charts are drawn."""
    page.evaluate(OPEN_ALL)
    page.wait_for_function(ALL_DRAWN, timeout=60_000)


def open_page(browser, path: str, name: str):
    """Open a report with every section opened; record timing, charts on load and a full-page screenshot."""
    page = load(browser, path)
    timing = page.evaluate("() => ({first_chart_ms: window.tailscopeFirstChartMs, ready_ms: window.tailscopeReadyMs,"
                           " draw_ms: window.tailscopeDrawMs, charts_on_load: window.tailscopeChartsOnLoad,"
                           " bytes: document.documentElement.outerHTML.length})")
    open_everything(page)
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, f"report-{name}.png"), full_page=True)
    with open(os.path.join(ARTIFACTS, f"report-{name}-timing.json"), "w", encoding="utf-8") as fh:
        json.dump(timing, fh)
    print(f"{name}: first chart {timing['first_chart_ms']:.0f} ms, on-load charts ({timing['charts_on_load']}) "
          f"{timing['ready_ms']:.0f} ms after navigation start")
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
def detected_page(browser, detected_report):
    page = open_page(browser, detected_report["html"], "spikes")
    yield page
    page.close()


@pytest.fixture(scope="module")
def llm_page(browser, llm_report):
    page = open_page(browser, llm_report["html"], "llm")
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


@pytest.mark.parametrize("name", ["synthetic_page", "demo_page", "detected_page", "llm_page", "comparison_page"])
def test_no_console_errors_and_no_network(name, request):
    page = request.getfixturevalue(name)
    assert page.problems == []
    assert [u for u in page.requests if not u.startswith("file://")] == []


@pytest.mark.parametrize("report", ["demo_report", "detected_report", "synthetic_report"])
def test_no_chart_renders_before_its_folded_section_is_opened(report, request, browser):
    found = request.getfixturevalue(report)
    page = load(browser, found if isinstance(found, str) else found["html"])
    try:
        state = page.evaluate("""() => ({
            signals: document.querySelectorAll('#all-signals .js-plotly-plot').length,
            panels: document.getElementById('signal-panels').children.length,
            cards: document.querySelectorAll('.cause-card .js-plotly-plot').length,
            on_load: window.tailscopeChartsOnLoad,
            plotted: Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id)})""")
        assert state["signals"] == 0 and state["panels"] == 0 and state["cards"] == 0, state
        assert state["on_load"] == len(state["plotted"]) and "latency-chart" in state["plotted"]
        assert len(state["plotted"]) <= 6  # latency, histogram, CDF, stages, slow-vs-normal split (+ sweep)
        page.click("#all-signals > summary")
        page.wait_for_function("document.getElementById('all-signals').dataset.drawn === 'yes'", timeout=60_000)
        drawn = page.evaluate("() => document.querySelectorAll('#signal-panels .js-plotly-plot').length")
        assert drawn == len(page.evaluate("() => JSON.parse(document.getElementById('chart-data').textContent).panels"))
        assert drawn > 0 and page.evaluate("() => document.querySelectorAll('.cause-card .js-plotly-plot').length") == 0
        assert page.problems == [] and [u for u in page.requests if not u.startswith("file://")] == []
    finally:
        page.close()


FIRST_SCREEN = """() => {
    const card = document.querySelector('.cause-card[data-rank="1"]');
    const box = e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, text: e.textContent.trim()}; };
    return {cause: box(card.querySelector('.top-cause')), kind: card.querySelector('.top-cause').dataset.kind,
            sentence: box(card.querySelector('.evidence-sentence')), verdict: box(document.getElementById('verdict')),
            scroll: window.scrollY, height: window.innerHeight}; }"""


@pytest.mark.parametrize("report", ["demo_report", "detected_report", "synthetic_report", "llm_report"])
def test_the_top_cause_and_its_evidence_are_on_the_first_screen(report, request, browser):
    found = request.getfixturevalue(report)
    if report == "demo_report":
        with open(os.path.join(os.path.dirname(found), "analysis.json"), encoding="utf-8") as fh:
            baseline = json.load(fh)["spike_detection"]["baseline_p99_ms"]
        if baseline is not None and baseline > 100:
            pytest.skip(f"the machine was overloaded during the demo (baseline P99 {baseline:.0f} ms, about 25 ms "
                        "when idle): its GC storm cannot stand out")
    page = load(browser, found if isinstance(found, str) else found["html"])
    try:
        screen = page.evaluate(FIRST_SCREEN)
    finally:
        page.close()
    assert screen["scroll"] == 0 and screen["height"] == 1000
    for part in ("verdict", "cause", "sentence"):
        assert 0 <= screen[part]["top"] and screen[part]["bottom"] <= 1000 and screen[part]["text"], (part, screen)
    if report == "demo_report":  # the demo's injected GC storm is named on the first screen
        assert screen["kind"] == "gc" and "GC pause" in screen["sentence"]["text"], screen
    if report == "detected_report":
        assert screen["kind"] in ("cpu_throttling", "gc"), screen
    if report == "llm_report":  # no latency spike: the TTFT spike is the top card, in one line of words
        assert screen["kind"] == "ttft_spike", screen
        assert screen["sentence"]["text"].startswith("TTFT P99 rose to ") and "for their first token" in screen["sentence"]["text"]


LLM_ON_LOAD = ["latency-chart", "llm-ttft-chart", "llm-tpot-chart", "llm-tokens-chart", "histogram-chart", "cdf-chart"]


def test_an_llm_report_answers_first_and_draws_only_its_on_load_charts(browser, llm_report):
    page = load(browser, llm_report["html"])
    try:
        state = page.evaluate("""() => ({
            sections: Array.from(document.querySelectorAll('main > section')).map(s => s.id),
            verdict: document.getElementById('verdict').innerText,
            plotted: Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id),
            on_load: window.tailscopeChartsOnLoad,
            signals: document.querySelectorAll('#all-signals .js-plotly-plot').length,
            // spike bands at full strength: a minor latency spike's band (the shared time axis) is fainter
            ttft_bands: document.getElementById('llm-ttft-chart').layout.shapes.filter(s => s.fillcolor === '#dc2626' && s.opacity > 0.1).length,
            chart_order: ['latency-chart', 'llm-ttft-chart', 'llm-tokens-chart', 'all-signals'].map(
                id => document.getElementById(id).getBoundingClientRect().top)})""")
        assert page.problems == [] and [u for u in page.requests if not u.startswith("file://")] == []
    finally:
        page.close()
    sections = state["sections"]
    assert sections[:3] == ["verdict-section", "spikes", "over-time"] and sections.index("llm") == 3, sections
    llm = llm_report["analysis"]["llm"]
    for label, key in (("TTFT P99", "ttft_ms"), ("TPOT P99", "tpot_ms")):  # the headline figures with their CIs
        entry = llm[key]["p99"]
        assert f"{label} {fmt_ms(entry['value_ms'])}" in state["verdict"]
        assert f"95% CI {fmt_ms(entry['ci_low_ms'])} – {fmt_ms(entry['ci_high_ms'])}" in state["verdict"]
    assert f"LLM goodput {fmt_share(llm['goodput']['share'])}" in state["verdict"]
    assert state["plotted"] == LLM_ON_LOAD and state["on_load"] == len(LLM_ON_LOAD) and state["signals"] == 0, state
    assert state["ttft_bands"] == len(llm["spikes"]["ttft"]) >= 1
    assert state["chart_order"] == sorted(state["chart_order"]), state  # the LLM charts beside latency, then details


def test_every_number_of_a_cause_card_evidence_chart_is_in_its_sentences(detected_page):
    cards = detected_page.evaluate("""() => Array.from(document.querySelectorAll('.cause-card')).map(c => ({
        kind: c.querySelector('.top-cause').dataset.kind,
        sentences: Array.from(c.querySelectorAll('.cause:first-child .evidence li')).map(e => e.textContent).join(' '),
        charts: Array.from(c.querySelectorAll('.evidence-chart')).map(d => ({
            points: d.data[0].x.length, notes: d.layout.annotations.map(a => a.text)}))}))""")
    assert {c["kind"] for c in cards} >= {"cpu_throttling", "gc"}, cards
    for card in cards:
        assert card["charts"] and all(chart["points"] > 0 for chart in card["charts"]), card
        for chart in card["charts"]:
            for note in chart["notes"]:
                if note.startswith(("spike level ", "longest ")):
                    number = note.split(" ")[-2]
                    assert number in card["sentences"], (note, card["sentences"])


def test_every_chart_of_the_synthetic_report_is_drawn_with_data(synthetic_page, synthetic_report):
    charts = synthetic_page.evaluate(PLOTTED)
    assert all(c["svg"] and c["points"] > 0 for c in charts), charts
    ids = [c["id"] for c in charts]
    for expected in ("latency-chart", "histogram-chart", "cdf-chart", "stage-chart", "sweep-chart"):
        assert expected in ids
    panels = build_report_data(synthetic_report["analysis"])["charts"]["panels"]
    assert sum(1 for i in ids if i.startswith("signal-")) == len(panels) > 0  # constants listed, not drawn
    assert sum(len(p["series"]) for p in panels) < len(synthetic_report["analysis"]["signals"]["series"])
    assert sum(1 for c in charts if "waterfall" in c["id"]) == 2
    assert sum(1 for c in charts if "stage-compare" in c["id"]) == 2
    latency = synthetic_page.evaluate("""() => { const d = document.getElementById('latency-chart');
        return {names: d.data.map(t => t.name), shapes: d.layout.shapes.length,
                slow: d.data.find(t => t.name === 'slow requests').x.length}; }""")
    assert {"P50", "P90", "max", "slow requests"} <= set(latency["names"])
    assert any(name.startswith("P99 (rolling") for name in latency["names"])
    # spikes, warm-up, faults (2 synthetic + 1 hostile), generator-limited
    assert latency["shapes"] == 2 + 1 + 3 + 1
    assert latency["slow"] > 0
    classes = synthetic_page.evaluate("() => document.getElementById('histogram-chart').data.map(t => t.name)")
    assert len(classes) == 3  # all + two classes


def test_cause_cards_list_the_expected_causes_in_rank_order(synthetic_page):
    cards = synthetic_page.evaluate("""() => Array.from(document.querySelectorAll('.cause-card')).map(c => ({
        causes: Array.from(c.querySelectorAll('.cause-kind')).map(e => e.textContent),
        evidence: Array.from(c.querySelectorAll('.evidence li')).map(e => e.textContent),
        bars: c.querySelector('.waterfall').data[0].y.length}))""")
    assert [c["causes"] for c in cards] == [["gc_pause", "cpu_contention"], ["queue_saturation"]]
    assert "Slow requests overlapping pause: 0.97." in cards[0]["evidence"]  # a sentence, not a raw key
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
        evidence: Array.from(document.querySelectorAll('.evidence li')).map(e => e.textContent).join(' '),
        ticks: Array.from(document.querySelectorAll('#histogram-chart .legendtext')).map(e => e.textContent)})""")
    assert {SCRIPT_PAYLOAD, ONERROR_PAYLOAD, SVG_PAYLOAD} <= set(texts["unmapped"])
    assert texts["errors"] == [ONERROR_PAYLOAD + SCRIPT_PAYLOAD]
    assert SCRIPT_PAYLOAD in texts["classes"]
    assert ONERROR_PAYLOAD in texts["faults"] and SVG_PAYLOAD in texts["faults"]
    assert SCRIPT_PAYLOAD in texts["scenario"] and SCRIPT_PAYLOAD in texts["evidence"]
    assert SCRIPT_PAYLOAD in texts["ticks"]  # Plotly legend shows the class name as text
    assert SCRIPT_PAYLOAD in page.title()
    assert SCRIPT_PAYLOAD in comparison_page.evaluate("() => document.querySelector('#checks').textContent")


def test_signal_panels_have_no_clipped_axis_titles(detected_page):
    titles = detected_page.evaluate("() => Array.from(document.querySelectorAll('#signal-panels .panel-chart'))"
                                    ".map(d => (d.layout.yaxis.title || {}).text || '')")
    assert titles and all(t == "" for t in titles)  # the unit is in each panel's heading instead
    headings = detected_page.evaluate("() => Array.from(document.querySelectorAll('#signal-panels h3'))"
                                      ".map(h => h.textContent)")
    assert len(headings) == len(titles) and all(h.strip() for h in headings)


def test_a_real_comparison_says_what_moved_and_which_stage(browser, release_comparison):
    page = load(browser, release_comparison)
    try:
        moved = page.evaluate("() => document.querySelector('#what-moved').innerText")
        stage = page.evaluate("() => document.querySelector('#changed-stage').innerText")
        assert page.problems == []
    finally:
        page.close()
    assert "real: the 95% interval of the change" in moved and stage.startswith("inference changed most")


def test_the_comparison_answers_first(comparison_page):
    order = comparison_page.evaluate("() => Array.from(document.querySelectorAll('main > section')).map(s => s.id)")
    assert order == ["verdict-section", "what-moved", "stage-changes", "details"]
    moved = comparison_page.evaluate("() => document.querySelector('#what-moved').innerText")
    assert "P99 70.0 ms →" in moved and "real: the 95% interval of the change" in moved


@pytest.mark.skipif(not os.environ.get("TAILSCOPE_DOCS_SCREENSHOTS"), reason="set TAILSCOPE_DOCS_SCREENSHOTS=1 "
                    "to rewrite docs/images/report-*.png")
def test_write_the_first_screens_shown_in_the_docs(browser, detected_report, release_comparison, llm_report, tmp_path):
    out = tmp_path / "demo"
    proc = run_tailscope("demo", "--out", str(out), timeout=300)  # the whole 60-s demo, as a reader runs it
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    demo_report = os.path.join(only_run_dir(out), "report.html")
    os.makedirs(DOCS_IMAGES, exist_ok=True)
    for name, path in (("demo", demo_report), ("spikes", detected_report["html"]),
                       ("comparison", release_comparison), ("llm", llm_report["html"])):
        page = load(browser, path, scale=0.7)
        try:
            if name != "spikes":
                page.screenshot(path=os.path.join(DOCS_IMAGES, f"report-{name}.png"))
            else:
                page.click('.cause-card[data-rank="1"] > summary')
                page.wait_for_function("document.querySelector('.cause-card[data-rank=\\'1\\']').dataset.drawn === 'yes'")
                page.evaluate("() => document.querySelector('.cause-card[data-rank=\\'1\\']').scrollIntoView()")
                page.screenshot(path=os.path.join(DOCS_IMAGES, "report-spikes-evidence.png"))
        finally:
            page.close()
