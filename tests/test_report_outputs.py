"""Report outputs from a synthetic run: files, JUnit, Markdown, self-contained HTML."""

import base64
import gzip
import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import json_for_script, render_html
from tailscope.reports.writer import write_outputs
from tailscope.testkit.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "run"
    write_synthetic_run(path, duration_s=30, seed=3, spikes=[{"kind": "gc", "at_s": 10, "duration_s": 2, "extra_ms": 300}])
    analysis = analyze_run(path)
    return analysis, write_outputs(path, analysis)


def test_all_four_files_are_written(outputs):
    analysis, paths = outputs
    assert set(paths) == {"analysis", "html", "junit", "markdown"}
    with open(paths["analysis"]) as fh:
        assert json.load(fh) == analysis
    assert not [f for f in os.listdir(os.path.dirname(paths["html"])) if ".tmp." in f]


def test_junit_has_one_testcase_per_slo_and_fails_the_missed_one(outputs):
    analysis, paths = outputs
    suite = ET.parse(paths["junit"]).getroot()
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["p99 < 250ms", "error_rate < 1%"]
    assert analysis["verdict"]["failed"] == ["p99 < 250ms"]  # 300 ms GC spike
    assert suite.get("failures") == "1" and cases[0].find("failure") is not None and cases[1].find("failure") is None


def test_markdown_summary_states_verdict_and_spike(outputs):
    _, paths = outputs
    text = open(paths["markdown"], encoding="utf-8").read()
    assert "**FAILED**" in text and "inference grew most" in text and "| latency P99 |" in text
    assert "| # | window | latency P99 | baseline latency P99 |" in text


def test_html_is_self_contained(outputs):
    _, paths = outputs
    html = open(paths["html"], encoding="utf-8").read()
    assert 'id="chart-data"' in html
    packed = re.search(r'<script type="text/plain" id="plotly-packed">([A-Za-z0-9+/=]+)</script>', html).group(1)
    assert b"plotly.js v" in gzip.decompress(base64.b64decode(packed))  # the whole bundle, packed
    for remote in ("<script src", "<link", "@import", "<iframe"):
        assert remote not in html
    assert "default-src 'none'" in html  # the page's CSP forbids any fetch


def test_report_data_is_preformatted(outputs):
    analysis, _ = outputs
    data = build_report_data(analysis)
    assert data["verdict"]["label"] == "FAILED"
    assert data["headline"][1]["label"] == "P99" and data["headline"][1]["value"].endswith(" ms")
    assert data["spikes"][0]["dominant"] == "inference"
    lines = data["charts"]["latency"]["lines"]
    assert "P50" in [line["name"] for line in lines]
    assert all(len(line["x"]) == len(analysis["windows"]) for line in lines)  # short run: every window kept
    assert data["spike_cards"][0]["trace"]["bars"][0]["label"] == "request (scheduled → reply)"


def test_hostile_strings_cannot_close_the_json_block():
    text = json_for_script({"name": "</script><script>alert(1)</script>&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>&"}


def test_empty_analysis_renders(tmp_path):
    from tailscope.rundir import RunWriter
    RunWriter(str(tmp_path / "empty"), {"name": "empty"}).close()
    html = render_html(build_report_data(analyze_run(tmp_path / "empty")))
    assert "No requests: nothing to chart." in html and "NO SLOs" in html
