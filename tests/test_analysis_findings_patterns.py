"""The ``findings``, ``patterns`` and ``warnings`` sections as their types (analysis_model/findings.py,
patterns.py, warning.py): what the analyzer writes reads back to the same JSON, and an analysis
written before their later parts (no ``findings``, a drift without ``bump`` or ``relative_change``)
still renders."""

from __future__ import annotations

import copy
import json

import pytest

from tailscope.analysis_model.codec import AnalysisShapeError, decode, encode
from tailscope.analysis_model.findings import Finding
from tailscope.analysis_model.patterns import Patterns
from tailscope.analysis_model.warning import AnalysisWarning
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.findings_view import findings_data
from tailscope.reports.html import render_html
from tailscope.reports.upgrade import findings_of, warnings_of
from tailscope.testkit.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    """A run with spikes every 15 s: a periodic pattern (and its warning), a P99 set by the spikes."""
    path = tmp_path_factory.mktemp("findings") / "run"
    spikes = [{"kind": "gc", "at_s": 7 + 15 * k, "duration_s": 1.5, "extra_ms": 120} for k in range(4)]
    write_synthetic_run(path, duration_s=65, rate=40, seed=8, spikes=spikes)
    return analyze_run(path)


def test_findings_patterns_and_warnings_read_back_to_the_json_written(analysis):
    for key, tp in (("findings", list[Finding]), ("patterns", Patterns), ("warnings", list[AnalysisWarning])):
        typed = decode(tp, analysis[key], key)
        assert json.dumps(encode(typed)) == json.dumps(analysis[key]), key
    patterns = decode(Patterns, analysis["patterns"], "patterns")
    assert patterns.periodic.detected and patterns.periodic.method == "spike_intervals"
    assert patterns.periodic.spike_intervals.spikes == len(analysis["spikes"]) >= 3
    assert patterns.drift.median is not None and patterns.drift.relative_change is not None
    assert "periodic_spikes" in [w.code for w in warnings_of(analysis)]
    assert [f.kind for f in findings_of(analysis)][-1] == "p99_set_by"
    assert findings_of(analysis)[-1].evidence["by"] == "spikes"


def test_an_analysis_before_findings_and_drift_bumps_still_renders(analysis):
    old = copy.deepcopy(analysis)
    del old["findings"]
    del old["patterns"]["drift"]["bump"]
    del old["patterns"]["drift"]["relative_change"]
    drift = decode(Patterns, old["patterns"], "patterns").drift
    assert drift.bump is None and drift.relative_change is None
    assert "relative_change" not in encode(drift)  # written only when a trend was fit
    data = build_report_data(old)
    assert data["findings"] == []
    assert data["warnings"] == build_report_data(analysis)["warnings"] != []
    html = render_html(data)
    assert "why P99 is what it is" in render_html(build_report_data(analysis))
    assert "why P99 is what it is" not in html


def test_a_finding_of_a_kind_the_report_does_not_know_shows_as_itself():
    newer = [{"kind": "some_new_kind", "severity": "medium", "summary": "s", "evidence": {"x": 1}}]
    assert findings_data(findings_of({"findings": newer})) == [
        {"kind": "some_new_kind", "title": "some_new_kind", "severity": "medium", "summary": "s"}]


def test_a_severity_outside_the_three_is_refused():
    with pytest.raises(AnalysisShapeError, match=r"findings\[0\]\.severity"):
        findings_of({"findings": [{"kind": "p99_set_by", "severity": "urgent", "summary": "", "evidence": {}}]})
    with pytest.raises(ValueError, match="severity must be one of high, medium, low"):
        Finding("p99_set_by", "urgent", "", {})
