"""The tracing/server sections as types (analysis_model/stages.py, events.py, server.py): a current
analysis reads into them and back unchanged, and an analysis written before the defaulted parts
existed still validates and renders, without those parts."""

import copy
import json

import jsonschema
import pytest

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.events import Events
from tailscope.analysis_model.server import OtherTraffic
from tailscope.analysis_model.stages import Stages
from tailscope.analyzers.analysis import SCHEMA_PATH, analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.tracing_view import receiver_rows
from tailscope.testkit.synthetic import write_synthetic_run

#: ``stages`` keys an older analysis may lack (not required in the schema; defaulted in Stages).
LATER_STAGE_KEYS = ("span_stages", "server_tokens", "consistency", "missing_spans", "rules", "clock_alignment",
                    "server_metrics", "slow_split")


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("tracing-sections") / "run"
    write_synthetic_run(path, duration_s=30, seed=5,
                        spikes=[{"kind": "network", "at_s": 12, "duration_s": 2, "extra_ms": 250}])
    return analyze_run(path)


def test_the_sections_read_into_their_types_and_back_unchanged(analysis):
    assert encode(decode(Events, analysis["events"], "events")) == analysis["events"]
    assert encode(decode(OtherTraffic, analysis["other_traffic"], "other_traffic")) == analysis["other_traffic"]
    stages = decode(Stages, analysis["stages"], "stages")
    assert set(stages.by_stage) == set(analysis["stages"]["by_stage"]) and stages.rules is not None
    written = {key: value for key, value in encode(stages).items() if key != "rules"}  # a rule writes its own keys only
    assert written == {key: value for key, value in analysis["stages"].items() if key != "rules"}


def test_an_analysis_without_the_later_parts_validates_and_renders_without_them(analysis):
    current = build_report_data(analysis)
    assert current["stages"]["rules"] and current["stages"]["clock"]
    old = copy.deepcopy(analysis)
    for key in LATER_STAGE_KEYS:
        del old["stages"][key]
    del old["server_load"], old["other_traffic"]
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(old, json.load(fh))
    data = build_report_data(old)
    assert data["stages"]["rows"] == current["stages"]["rows"] and data["stages"]["joined"] == current["stages"]["joined"]
    assert (data["stages"]["rules"], data["stages"]["clock"], data["stages"]["missing"]) == ("", "", "")
    assert data["other_traffic"] is None and data["slow_split"] is None
    assert data["charts"]["stages"] == current["charts"]["stages"]
    assert data["charts"]["server"] is None and data["charts"]["other"] is None and data["charts"]["slow_split"] is None
    html = render_html(data)
    assert "Stage rules:" not in html and "Clock offset" not in html


def test_a_wrong_shape_in_the_stages_is_named_where_it_is(analysis):
    broken = copy.deepcopy(analysis)
    name = next(iter(broken["stages"]["by_stage"]))
    broken["stages"]["by_stage"][name]["count"] = "many"
    with pytest.raises(ValueError, match=rf"stages\.by_stage\.{name}\.count: expected int"):
        build_report_data(broken)


def test_a_fault_reads_once_into_the_table_and_the_timeline_with_its_ground_truth_name(analysis):
    with_fault = copy.deepcopy(analysis)
    start = analysis["run"]["load_start_ns"] + 2_000_000_000
    with_fault["events"]["faults"] = [{"kind": "fault", "start_ns": start, "end_ns": start + 1_500_000_000,
                                       "duration_ms": 1500.0, "source": None,
                                       "attributes": {"name": "cpu_hog", "role": "distraction"}}]
    with_fault["events"]["faults_total"] = 1
    data = build_report_data(with_fault)
    [row] = data["events"]["faults"]
    assert (row["kind"], row["source"], row["duration"]) == ("cpu_hog (distraction)", "", "1,500 ms")
    assert data["charts"]["faults"] == [{"x0": 2.0, "x1": 3.5, "label": "cpu_hog (distraction)"}]


def test_receiver_rows_read_the_counters_typed_and_show_a_newer_receivers_keys_as_they_are():
    rows = receiver_rows({"spans_received": 5, "rejected": {"malformed": 1, "oversized": 2}, "future_counter": 3})
    assert rows == [{"key": "spans received", "value": "5"}, {"key": "export requests rejected", "value": "3 (malformed 1, oversized 2)"},
                    {"key": "future_counter", "value": "3"}]
    with pytest.raises(ValueError, match=r"receiver\.spans_dropped: expected int"):
        receiver_rows({"spans_dropped": "many"})
