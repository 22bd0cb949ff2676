"""The kit-written parts of a cause's evidence have one shape (analysis_model/evidence.py): the kit
writes them through their types, the report reads them back through reports/upgrade.py's tolerant
readers, an older analysis without the later fields still renders, and a part a plug-in detector
wrote in another shape is left out of the card instead of failing the report."""

from __future__ import annotations

import copy

import pytest

from tailscope.analysis_model.codec import AnalysisShapeError, decode, encode
from tailscope.analysis_model.evidence import IN_SPIKE, LatencySplit, SignalContrast
from tailscope.analysis_model.spikes import CauseFinding
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.evidence_text import evidence_sentences, signal_sentence
from tailscope.reports.html import render_html
from tailscope.reports.upgrade import contrasts_of, factors_of, latency_split_of, places_of, weak_findings_of
from tailscope.support.cause_words import cause_title
from tailscope.testkit.synthetic import write_synthetic_run

#: A well-formed entry as the kit writes it (CPU throttled 312 ms/s against 0).
ENTRY = {"series": "cgroup.cpu.throttled_ns", "spike": 312e6, "baseline": 0.0, "spread": 1e6, "z": 41.0,
         "excess": 312e6, "inside": 312e6, "place": IN_SPIKE, "material_excess": 50e6, "confidence": 1.0}


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("evidence") / "run"
    write_synthetic_run(path, duration_s=40, rate=40, seed=3, spikes=[
        {"kind": "throttle", "at_s": 12, "duration_s": 4, "extra_ms": 60},
        {"kind": "swap", "at_s": 28, "duration_s": 5, "extra_ms": 60}])
    return analyze_run(path)


def _causes(analysis: dict) -> list[dict]:
    return [cause for spike in analysis["spikes"] for cause in spike["causes"]]


def test_the_kit_writes_its_parts_in_their_shape_and_they_read_back_byte_for_byte(analysis):
    causes = _causes(analysis)
    entries = [e for c in causes for e in c["evidence"].get("signals") or []]
    assert entries and any(e.get("belongs_to") == "host" for e in entries)  # owned_strongest's entries too
    for cause in causes:
        evidence = cause["evidence"]
        listed = list(evidence.get("signals") or []) + (
            [evidence["generator_runqueue_wait"]] if evidence.get("generator_runqueue_wait") else [])
        read = contrasts_of(evidence)
        assert len(read) == len(listed) and all(isinstance(c, SignalContrast) for c in read)
        assert [encode(c) for c in read] == listed  # every key, value and order as written
        if "latency_split" in evidence:
            assert encode(latency_split_of(evidence)) == evidence["latency_split"]
        assert factors_of(evidence) == {k: float(v) for k, v in (evidence.get("factors") or {}).items()}
        assert places_of(evidence) == (evidence.get("places") or {})


def test_an_entry_written_before_inside_and_place_reads_as_measured_in_the_spike(analysis):
    old = {key: value for key, value in ENTRY.items() if key not in ("inside", "place")}
    read = decode(SignalContrast, old)
    assert read.inside is None and read.place == IN_SPIKE
    assert signal_sentence(read) == (
        "CPU time throttled (CFS quota): 312 ms/s in the spike vs 0 ms/s at baseline (robust z 41); "
        "it counts fully from +50 ms/s.")
    # a whole analysis of that age renders, each signal quoted in the spike
    older = copy.deepcopy(analysis)
    stripped = 0
    for cause in _causes(older):
        for entry in cause["evidence"].get("signals") or []:
            entry.pop("inside"), entry.pop("place")
            stripped += 1
    assert stripped
    data = build_report_data(older)
    assert render_html(data)
    assert build_report_data(older)["spikes"] == data["spikes"]
    for cause in _causes(older):
        for read in contrasts_of(cause["evidence"]):
            assert read.place == IN_SPIKE and "in the spike" in signal_sentence(read)


PLUGIN = {
    "summary": "The plug-in's own sentence.",
    "signals": [{"name": "my.metric", "value": 3}, "not an entry", ENTRY, {**ENTRY, "z": "high"}],
    "generator_runqueue_wait": {"series": 5},
    "latency_split": {"total_ms": 12},
    "factors": {"own_factor": 0.5, "words": "high", "flag": True},
    "places": ["not", "a", "map"],
    "weak_findings": [{"kind": "gc"}, {"kind": "swap", "confidence": 0.3, "evidence": {}}, 7],
    "extra_ms": 3.0,
}


def test_the_readers_leave_out_what_a_plugin_wrote_in_another_shape():
    with pytest.raises(AnalysisShapeError):
        decode(SignalContrast, PLUGIN["signals"][0])
    assert contrasts_of(PLUGIN) == [decode(SignalContrast, ENTRY)]
    assert latency_split_of(PLUGIN) is None
    assert latency_split_of({"latency_split": {"latency_growth_ms": 9.0, "server_growth_ms": None,
                                               "outside_server_growth_ms": None, "lateness_growth_ms": 0.0,
                                               "server_share": None}}) == LatencySplit(9.0, None, None, 0.0, None)
    assert factors_of(PLUGIN) == {"own_factor": 0.5}
    assert places_of(PLUGIN) == {}
    assert weak_findings_of(PLUGIN) == [CauseFinding("swap", 0.3, {})]
    sentences = evidence_sentences(CauseFinding("my_cause", 0.9, PLUGIN))
    assert sentences == [
        "The plug-in's own sentence.",
        "CPU time throttled (CFS quota): 312 ms/s in the spike vs 0 ms/s at baseline (robust z 41); "
        "it counts fully from +50 ms/s.",
        "Extra: 3 ms.",
        f"Findings below the threshold: {cause_title('swap')} 30%.",
        "Confidence is the product of: own factor 50%.",
    ]


def test_a_report_with_a_plugin_cause_in_other_shapes_renders_the_rest(analysis):
    plugged = copy.deepcopy(analysis)
    plugged["spikes"][0]["causes"][0] = {"kind": "my_cause", "confidence": 0.9, "evidence": PLUGIN}
    data = build_report_data(plugged)
    assert render_html(data)
    rows = [row for card in data["spike_cards"] for row in card["cause_rows"]
            if "The plug-in's own sentence." in row["sentences"]]
    assert len(rows) == 1
    assert rows[0]["sentences"] == evidence_sentences(CauseFinding("my_cause", 0.9, PLUGIN))
