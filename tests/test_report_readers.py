"""The report reads the run-health sections, the LLM spikes and the run's damaged files typed, through
reports/upgrade.py's readers: an analysis written before ``generator``, ``generator_limited_windows``,
``outages``, ``soak`` and ``retention`` still builds the report (those parts absent), a malformed
section is refused naming the place, and a damaged run's outputs keep an earlier sound report."""

from __future__ import annotations

import copy
import json

import pytest
from report_fixtures import run_section

from tailscope.analysis_model.codec import AnalysisShapeError
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.upgrade import generator_of, limited_bands_of, outages_of, retention_of, run_of, soak_of
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


def test_an_analysis_written_before_the_server_sections_still_renders(analysis):
    """``server_load``, ``other_traffic`` and ``stages.slow_split`` are decoded once at the report's
    door and handed to the views; an analysis from before them draws none of their parts."""
    current = build_report_data(analysis)
    assert current["slow_split"] is not None and current["other_traffic"] is not None
    old = copy.deepcopy(analysis)
    for key in ("server_load", "other_traffic"):
        del old[key]
    del old["stages"]["slow_split"]
    data = build_report_data(old)
    assert data["server"] is None and data["other_traffic"] is None and data["slow_split"] is None
    assert data["charts"]["other"] is None and data["charts"]["slow_split"] is None
    assert data["percentile_rows"] == current["percentile_rows"]
    render_html(data)


def test_times_count_from_the_run_start_where_the_load_start_is_unknown(analysis):
    run = analysis["run"]
    assert run_of(analysis).load_origin_ns == run["load_start_ns"] > run["start_ns"]
    no_load = {**analysis, "run": {**run, "load_start_ns": None}}
    assert run_of(no_load).load_origin_ns == run["start_ns"]
    assert run_of({"run": run_section()}).load_origin_ns is None  # neither known
    shift = (run["load_start_ns"] - run["start_ns"]) / 1e9
    at_load, at_start = build_report_data(analysis)["charts"], build_report_data(no_load)["charts"]
    first = at_load["latency"]["lines"][0]["x"]
    assert at_start["latency"]["lines"][0]["x"] == pytest.approx([x + shift for x in first], abs=1e-6)
