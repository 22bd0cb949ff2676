"""The spikes as types (analysis_model/spikes.py): the analyzer's spikes and spike_detection read
back into their types and write the same JSON again (the types hold every key written), and an
analysis written before the spike fields that have defaults still builds and renders its report."""

from __future__ import annotations

import copy
import json

import pytest

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.spikes import Spike, SpikeDetection
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.overview_view import detection_text
from tailscope.reports.upgrade import spike_detection_of, spikes_of
from tailscope.testkit.synthetic import write_synthetic_run

#: Fields a spike written before the tail-share test lacks (format 1.0 of the first slice, and
#: the retention fields of later 1.1 analyses), and those of its decomposition and detection.
OLD_SPIKE_LACKS = ("p99_claimed", "percentiles_from", "records_kept", "slow_requests", "slow_share",
                   "expected_slow_share", "p_value", "peak_window_slow_share", "baseline_quantile",
                   "evidence_series", "representative_trace")
OLD_DECOMPOSITION_LACKS = ("available", "unavailable_reason")
OLD_DETECTION_LACKS = ("baseline_quantile", "baseline_samples", "warmup_s", "too_short", "judged_on",
                       "longer_answers")


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("spikes") / "run"
    write_synthetic_run(path, duration_s=40, seed=4, spikes=[{"kind": "gc", "at_s": 20, "duration_s": 3, "extra_ms": 300}])
    return json.loads(json.dumps(analyze_run(path)))


def test_the_spike_sections_read_back_into_their_types_and_write_the_same_json(analysis):
    assert analysis["spikes"], "the injected GC pause is a spike"
    spikes = decode(list[Spike], analysis["spikes"], "spikes")
    assert encode(spikes) == analysis["spikes"]  # no key the analyzer writes is outside the type
    assert spikes[0].causes[0].kind == "gc" and spikes[0].decomposition.available
    assert spikes[0].evidence_series and spikes[0].representative_trace is not None
    detection = decode(SpikeDetection, analysis["spike_detection"], "spike_detection")
    assert encode(detection) == analysis["spike_detection"] and detection.performed


def _as_before_the_tail_share_test(analysis: dict) -> dict:
    old = copy.deepcopy(analysis)
    for spike in old["spikes"]:
        for key in OLD_SPIKE_LACKS:
            del spike[key]
        for key in OLD_DECOMPOSITION_LACKS:
            del spike["decomposition"][key]
    for key in OLD_DETECTION_LACKS:
        del old["spike_detection"][key]
    return old


def test_an_analysis_without_the_later_spike_fields_still_renders_as_it_read_then(analysis):
    old = _as_before_the_tail_share_test(analysis)
    (spike,) = spikes_of(old)
    (current,) = spikes_of(analysis)
    # the defaults are how the report read a missing field: available stage split, 1% steady share
    assert spike.decomposition.available and spike.expected_slow_share == 0.01 and spike.p_value is None
    # the derived ones come from what the old spike holds (reports/upgrade.py)
    assert spike.slow_requests == current.decomposition.slow_requests
    assert spike.records_kept == current.requests and spike.evidence_series == ()
    data = build_report_data(old)
    now = build_report_data(analysis)
    row, row_now = data["spikes"][0], now["spikes"][0]
    for key in ("window", "peak", "p99", "baseline", "ratio", "excess", "requests", "top_cause", "summary", "stage_note"):
        assert row[key] == row_now[key], key
    assert "warm-up" in now["detection"] and "warm-up" not in data["detection"]  # an old one did not state it
    assert data["detection"].startswith(now["detection"].split("; the first")[0])
    html = render_html(data)
    assert "GC pauses of the target" in html


def test_an_analysis_from_before_spike_detection_had_its_section_reads_as_none(analysis):
    old = {key: value for key, value in analysis.items() if key not in ("spike_detection", "spikes")}
    assert spike_detection_of(old) is None and spikes_of(old) == []
    assert detection_text(spike_detection_of(old), 0, 0) == "No spike detection: too few latency samples."
