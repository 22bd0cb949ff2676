"""The run-health sections as types (analysis_model/health.py): ``generator``,
``generator_limited_windows``, ``outages``, ``retention`` and ``soak`` read back as the analyzer
wrote them, and an analysis written before their later fields still renders."""

from __future__ import annotations

import copy
import json

import pytest

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.health import Generator, LimitedBand, Outages, Retention, Soak
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.testkit.synthetic import write_synthetic_run

SECTIONS = {"generator": Generator, "generator_limited_windows": list[LimitedBand], "outages": Outages,
            "soak": Soak}
MS = 1_000_000


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("health") / "run"
    write_synthetic_run(path, duration_s=15, rate=60, seed=3, lateness_ms=0.6)  # >1% of sends late
    return analyze_run(path)


@pytest.mark.parametrize("key", sorted(SECTIONS))
def test_each_section_reads_back_as_the_analyzer_wrote_it(analysis, key):
    written = json.loads(json.dumps(analysis[key]))
    assert json.dumps(encode(decode(SECTIONS[key], written, key))) == json.dumps(written)


def test_the_generator_section_holds_limited_windows_judged_by_the_lateness_rule(analysis):
    generator = decode(Generator, analysis["generator"], "generator")
    assert generator.limited and generator.limited_windows and generator.lateness_rule is not None
    assert [(w.start_ns, w.end_ns, w.material) for w in generator.limited_windows] == [
        (b["start_ns"], b["end_ns"], b["material"]) for b in analysis["generator_limited_windows"]]


def test_a_run_that_kept_every_record_states_only_that():
    assert decode(Retention, {"sampled": False}, "retention") == Retention(sampled=False)


def _as_written_before_the_later_fields(analysis: dict) -> dict:
    """The analysis as tailscope wrote it before the lateness rule, the generator's processes and the
    10-min soak rule, with an outage, and a soak view of two periods without memory series."""
    old = copy.deepcopy(analysis)
    generator = old["generator"]
    for key in ("lateness_rule", "late_share", "processes", "runqueue_wait_ms"):
        del generator[key]
    for interval in generator["limited_windows"]:
        del interval["p99_shift_ms"], interval["material"]
    for band in old["generator_limited_windows"]:
        del band["material"]
    start = old["run"]["load_start_ns"]
    old["outages"] = {"count": 1, "total_ms": 1500.0, "outages": [
        {"kind": "down", "start_ns": start + 2000 * MS, "end_ns": start + 3500 * MS, "duration_ms": 1500.0,
         "requests": 90, "errors_by_kind": {"refused": 90}, "recovered": True, "source": "derived from requests"}]}
    period = {"requests": 450, "errors": 1, "error_rate": 1 / 450, "achieved_rps": 59.9, "p50_ms": 20.0,
              "p99_ms": 80.0, "p99_claimed": False}
    old["soak"] = {"period_s": 10, "periods": [{"start_ns": start, "end_ns": start + 10_000 * MS, **period},
                                               {"start_ns": start + 10_000 * MS, "end_ns": start + 15_000 * MS,
                                                **period}],
                   "drift": {"verdict": "insufficient data", "summary": "too few busy windows to test drift"},
                   "leak": None, "verdicts_source": "soak"}
    return old


def test_an_analysis_written_before_the_later_fields_still_renders(analysis):
    old = _as_written_before_the_later_fields(analysis)
    data = build_report_data(old)
    generator = data["generator"]
    # before the lateness rule every limited interval was drawn and the headline followed `limited`
    assert generator["intervals"] and all(i["mattered"] == "yes" for i in generator["intervals"])
    assert generator["limited"] and generator["verdict"].startswith("generator-limited")
    assert "does lateness matter?" not in [f["key"] for f in generator["facts"]]
    assert [row["recovered"] for row in data["outages"]["rows"]] == ["yes"]
    assert len(data["soak"]["rows"]) == 2 and data["soak"]["rows"][0]["target_rss"] == "—"
    assert data["soak"]["drift"]["verdict"] == "insufficient data" and data["soak"]["leak"] is None
    assert data["retention"] is None
    html = render_html(data)
    assert 'id="generator"' in html and "Load generator" in html
    # the current analysis: the rule judged the lateness immaterial, so no headline
    current = build_report_data(analysis)["generator"]
    assert not current["limited"] and "does lateness matter?" in [f["key"] for f in current["facts"]]
