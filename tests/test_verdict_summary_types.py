"""The verdict and summary sections through their types (analysis_model/verdict.py, summary.py):
what the analyzer writes reads back unchanged, and an analysis written before outcome words and
before the summary's load model, dropped count and goodput still renders with the same verdict
and the same exit code."""

from __future__ import annotations

import copy
import io
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.summary import RequestSummary, Summary
from tailscope.analysis_model.verdict import Verdict
from tailscope.analyzers.analysis import analyze_run
from tailscope.conductor.terminal import print_summary
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.junit import render_junit
from tailscope.reports.markdown import render_markdown
from tailscope.reports.upgrade import verdict_of
from tailscope.testkit.synthetic import write_synthetic_run

#: What the verdict, its rows and the summaries gained after the first analyses were written.
LATER_VERDICT_KEYS = ("outcome", "label", "detail", "incomplete", "needs", "policy", "unclaimed")
LATER_ROW_KEYS = ("status", "samples", "needed_samples")
LATER_SUMMARY_KEYS = ("load_model", "dropped", "goodput")


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    """A run whose P99 SLO fails (a 400 ms GC spike; the synthetic scenario's ``p99 < 250ms``)."""
    path = tmp_path_factory.mktemp("typed") / "run"
    write_synthetic_run(path, duration_s=20, seed=5, spikes=[{"kind": "gc", "at_s": 8, "duration_s": 1, "extra_ms": 400}])
    return analyze_run(path)


def _as_written_before_outcomes(analysis: dict) -> dict:
    old = copy.deepcopy(analysis)
    for key in LATER_VERDICT_KEYS:
        old["verdict"].pop(key)
    for row in old["verdict"]["slos"]:
        for key in LATER_ROW_KEYS:
            row.pop(key)
    for summary in (old["summary"], *old["classes"].values()):
        for key in LATER_SUMMARY_KEYS:
            summary.pop(key, None)
    return old


def test_the_written_sections_read_back_byte_for_byte(analysis):
    for cls, key in ((Verdict, "verdict"), (Summary, "summary")):
        assert json.dumps(encode(decode(cls, analysis[key], key))) == json.dumps(analysis[key]), key
    for name, summary in analysis["classes"].items():  # a class's summary: no load model, dropped or goodput
        assert encode(decode(Summary, summary, name)) == {**summary, "load_model": "open", "dropped": 0}
        assert json.dumps(encode(decode(RequestSummary, summary, name))) == json.dumps(summary), name
    assert "aborted" not in analysis["verdict"]  # written only for an aborted run


def test_an_analysis_written_before_outcomes_renders_the_same_verdict_and_exit_code(analysis):
    old = _as_written_before_outcomes(analysis)
    assert "outcome" not in old["verdict"] and "status" not in old["verdict"]["slos"][0]
    current, before = build_report_data(analysis), build_report_data(old)
    assert current["verdict"]["label"] == "FAILED"
    for part in ("verdict", "slo_chips", "headline", "rates", "errors", "lateness", "percentile_rows"):
        assert before[part] == current[part], part
    assert before["goodput"] is None and current["goodput"] is not None
    assert verdict_of(old).exit_code == verdict_of(analysis).exit_code == 1
    assert "FAILED" in render_html(before) and "**FAILED**" in render_markdown(before)
    suite = ET.fromstring(render_junit(old).split("?>", 1)[1])
    assert suite.get("failures") == ET.fromstring(render_junit(analysis).split("?>", 1)[1]).get("failures") != "0"
    out = io.StringIO()
    print_summary(Console(file=out, width=160), old, {})
    assert "FAILED: failed: p99 < 250ms" in out.getvalue()


def test_an_old_passed_verdict_passes(analysis):
    old = _as_written_before_outcomes(analysis)
    old["verdict"] = {**old["verdict"], "passed": True, "failed": [],
                      "slos": [{**row, "passed": True} for row in old["verdict"]["slos"]]}
    verdict = verdict_of(old)
    assert (verdict.outcome, verdict.line(), verdict.exit_code) == ("passed", "PASSED", 0)
    assert {row.status for row in verdict.slos} == {"pass"}
    assert build_report_data(old)["verdict"]["label"] == "PASSED"
    assert verdict_of({}).exit_code == 0  # an analysis without a verdict: no SLOs, passed
