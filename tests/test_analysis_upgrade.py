"""An analysis written before format 1.1 (stage ``client_network``) still renders, with the
current stage name ``outside_server``."""

import json

import pytest

from tailscope.analyzers.analysis import ANALYSIS_FORMAT_VERSION, analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.reports.upgrade import upgrade_analysis
from tailscope.testkit.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("upgrade") / "run"
    write_synthetic_run(path, duration_s=30, seed=5,
                        spikes=[{"kind": "network", "at_s": 12, "duration_s": 2, "extra_ms": 250}])
    return analyze_run(path)


def _as_format_1_0(analysis: dict) -> dict:
    text = json.dumps(analysis).replace("outside_server", "client_network")
    old = json.loads(text)
    old["format_version"] = "1.0"
    return old


def test_current_analysis_names_outside_server(analysis):
    assert ANALYSIS_FORMAT_VERSION == "1.1"
    assert "outside_server" in analysis["stages"]["by_stage"]
    assert "client_network" not in json.dumps(analysis)
    assert upgrade_analysis(analysis) is analysis


def test_format_1_0_analysis_renders_with_the_current_name(analysis):
    old = _as_format_1_0(analysis)
    assert "client_network" in old["stages"]["by_stage"]
    assert any("client_network" in json.dumps(s) for s in old["spikes"])  # the spike's stage / split
    data = build_report_data(old)
    assert data == build_report_data(analysis)
    assert "outside_server" in [row["stage"] for row in data["stages"]["rows"]]
    html = render_html(data)
    assert "client_network" not in html and "outside_server" in html
    assert "client_network" in old["stages"]["by_stage"]  # the input is not changed


def test_the_old_word_is_renamed_in_keys_and_texts_not_inside_other_words():
    old = {"format_version": "1.0", "note": "client_network grew most", "client_network_growth_ms": 3.0,
           "other": "my_client_networks", "list": ["client_network"]}
    assert upgrade_analysis(old) == {"format_version": "1.0", "note": "outside_server grew most",
                                     "outside_server_growth_ms": 3.0, "other": "my_client_networks",
                                     "list": ["outside_server"]}
    assert upgrade_analysis({**old, "format_version": "1.1"})["note"] == "client_network grew most"
