"""The HTML report in a real headless Chromium: charts, linked zoom, escaping."""

import json
import os

import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.writer import write_outputs
from tailscope.rundir import Appender, load_run, schema
from tailscope.rundir.synthetic import write_synthetic_run

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
SCRIPT_PAYLOAD = "<script>window.__pwned = 'script'</script>"
ONERROR_PAYLOAD = "<img src=x onerror=\"window.__pwned='onerror'\">"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing: no headless browser"),
]


def _add_hostile_spans(run_path: str) -> None:
    """Spans with hostile names, joined to real requests (so they are listed as unmapped)."""
    trace_ids = load_run(run_path).requests.column("trace_id").to_pylist()[:5]
    appender = Appender(os.path.join(run_path, schema.writer_file(schema.SPANS, "hostile")), schema.SPANS_SCHEMA)
    try:
        for i, trace_id in enumerate(trace_ids):
            appender.append_row({"trace_id": trace_id, "span_id": f"{i:016x}", "name": [SCRIPT_PAYLOAD, ONERROR_PAYLOAD][i % 2],
                                 "service": SCRIPT_PAYLOAD, "kind": 1, "start_ns": 1, "end_ns": 2, "status_code": 0,
                                 "attributes": json.dumps({"x": ONERROR_PAYLOAD})})
    finally:
        appender.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("browser") / "run")
    write_synthetic_run(path, duration_s=20, seed=9, error_rate=0.02, error_message=ONERROR_PAYLOAD + SCRIPT_PAYLOAD,
                        name="hostile " + SCRIPT_PAYLOAD, spikes=[{"kind": "gc", "at_s": 8, "duration_s": 2, "extra_ms": 200}])
    _add_hostile_spans(path)
    return write_outputs(path, analyze_run(path))["html"]


@pytest.fixture(scope="module")
def page(report):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            page = browser.new_page()
            problems, requests = [], []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto("file://" + report)
            page.wait_for_function("document.querySelectorAll('.main-svg').length > 0")
            page.problems, page.requests = problems, requests
            yield page
        finally:
            browser.close()


def test_no_console_errors_and_no_network(page):
    assert page.problems == []
    assert [u for u in page.requests if not u.startswith("file://")] == []


def test_charts_are_drawn_with_data(page):
    latency = page.evaluate("""() => { const d = document.getElementById('latency-chart');
        return {svgs: d.querySelectorAll('.main-svg').length, traces: d.data.length,
                points: d.data[1].y.filter(v => v !== null).length, shapes: d.layout.shapes.length}; }""")
    assert latency["svgs"] > 0 and latency["traces"] == 2 and latency["points"] >= 15
    assert latency["shapes"] >= 2  # one spike band and one fault band
    panels = page.evaluate("() => Array.from(document.querySelectorAll('#signal-panels .panel-chart'))"
                           ".map(d => d.querySelectorAll('.main-svg').length > 0 && d.data[0].x.length > 0)")
    assert len(panels) == 4 and all(panels)
    assert page.evaluate("() => document.querySelectorAll('#stage-chart .main-svg').length") > 0


def test_zooming_latency_moves_every_signal_panel(page):
    page.evaluate("() => Plotly.relayout(document.getElementById('latency-chart'), {'xaxis.range': [5, 10]})")
    page.wait_for_function("() => { const r = document.getElementById('signal-0').layout.xaxis.range;"
                           " return Math.abs(r[0] - 5) < 1e-6 && Math.abs(r[1] - 10) < 1e-6; }")
    ranges = page.evaluate("() => Array.from(document.querySelectorAll('#signal-panels .panel-chart'))"
                           ".map(d => d.layout.xaxis.range)")
    assert all(r == [5, 10] for r in ranges)


def test_log_axis_toggle(page):
    page.click("#log-toggle")
    assert page.evaluate("() => document.getElementById('latency-chart').layout.yaxis.type") == "log"
    page.click("#log-toggle")
    assert page.evaluate("() => document.getElementById('latency-chart').layout.yaxis.type") == "linear"


def test_hostile_strings_are_text_and_nothing_runs(page):
    assert page.evaluate("() => window.__pwned") is None
    assert page.evaluate("() => document.scripts.length") == 3  # chart data, plotly, the report's JS
    assert page.evaluate("() => document.querySelectorAll('img').length") == 0
    names = page.evaluate("() => Array.from(document.querySelectorAll('#unmapped .span-name')).map(e => e.textContent)")
    assert SCRIPT_PAYLOAD in names and ONERROR_PAYLOAD in names
    errors = page.evaluate("() => Array.from(document.querySelectorAll('.error-message')).map(e => e.textContent)")
    assert errors == [ONERROR_PAYLOAD + SCRIPT_PAYLOAD]
    assert SCRIPT_PAYLOAD in page.title()
