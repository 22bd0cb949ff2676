"""The report reads the run-health sections, the LLM spikes and the run's damaged files typed, through
reports/upgrade.py's readers: an analysis written before ``generator``, ``generator_limited_windows``,
``outages``, ``soak`` and ``retention`` still builds the report (those parts absent), a malformed
section is refused naming the place, and a damaged run's outputs keep an earlier sound report."""

from __future__ import annotations

import copy
import json

import pytest

from tailscope.analysis_model.codec import AnalysisShapeError
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.upgrade import generator_of, limited_bands_of, outages_of, retention_of, soak_of
from tailscope.reports.writer import FAILED_VARIANT, outputs_variant
from tailscope.testkit.synthetic import write_synthetic_run

LATER_SECTIONS = ("generator", "generator_limited_windows", "outages", "soak", "retention")


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("readers") / "run"
    write_synthetic_run(path, duration_s=15, rate=60, seed=3, lateness_ms=0.6)  # >1% of sends late
    return analyze_run(path)


def test_an_analysis_written_before_the_health_sections_still_renders(analysis):
    old = {key: value for key, value in analysis.items() if key not in LATER_SECTIONS}
    assert (generator_of(old), limited_bands_of(old), outages_of(old), soak_of(old), retention_of(old)) == (
        None, [], None, None, None)
    data = build_report_data(old)
    assert (data["generator"], data["outages"], data["soak"], data["retention"]) == (None, None, None, None)
    assert data["charts"]["limited"] == []
    html = render_html(data)
    assert 'id="generator"' not in html and "Load generator" not in html
    current = build_report_data(analysis)
    assert current["generator"] is not None and 'id="generator"' in render_html(current)
    assert len(current["charts"]["limited"]) == sum(1 for w in analysis["generator_limited_windows"] if w["material"])


@pytest.mark.parametrize("key, change, where", [
    ("generator", lambda g: g.update(dropped="none"), "generator.dropped: expected int"),
    ("generator_limited_windows", lambda w: w.append({"start_ns": 1}), "generator_limited_windows[0].end_ns: missing"),
    ("outages", lambda o: o.update(outages={}), "outages.outages: expected an array"),
])
def test_a_malformed_health_section_is_refused_naming_the_place(analysis, key, change, where):
    broken = copy.deepcopy(analysis)
    if key == "generator_limited_windows":
        broken[key] = []
    change(broken[key])
    with pytest.raises(AnalysisShapeError, match=where.replace("[", r"\[").replace("]", r"\]")):
        build_report_data(broken)


def test_a_damaged_run_keeps_an_earlier_sound_report(analysis, tmp_path):
    damaged = copy.deepcopy(analysis)
    damaged["run"]["damaged_files"] = [{"file": "requests.arrow", "batch": 3, "reason": "truncated",
                                        "message": "requests.arrow: batch 3 is cut short"}]
    assert outputs_variant(tmp_path, analysis) is None  # sound data: the usual names
    assert outputs_variant(tmp_path, damaged) is None  # nothing earlier to keep
    earlier = tmp_path / "analysis.json"
    for before, variant in ((analysis, FAILED_VARIANT), (damaged, None)):  # sound: kept; damaged: replaced
        earlier.write_text(json.dumps(before))
        assert outputs_variant(tmp_path, damaged) == variant
    for not_an_analysis in ("[1, 2]", '{"run": {"damaged_files": "yes"}}', "{"):  # kept, as a sound one
        earlier.write_text(not_an_analysis)
        assert outputs_variant(tmp_path, damaged) == FAILED_VARIANT
