"""The run's record sections typed (analysis_model/run.py, records.py, streaming.py): ``run``,
``classes``, ``windows``, ``slow_requests``, ``tail_line``, ``rolling_lines``, ``distribution``,
``streaming`` and ``error_samples`` read back as the analyzer wrote them, and an analysis written
before their later fields still reads (the defaults) and still renders."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest

from tailscope.analysis_model.codec import decode, encode, written_when_set, written_with
from tailscope.analysis_model.records import Window
from tailscope.analysis_model.run import Run
from tailscope.analysis_model.sections import TYPED
from tailscope.analysis_model.streaming import Streaming
from tailscope.analysis_model.summary import RequestSummary
from tailscope.analyzers.analysis import analyze_run
from tailscope.reports.data import build_report_data
from tailscope.reports.html import render_html
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

SECTIONS = ("run", "windows", "slow_requests", "tail_line", "rolling_lines", "distribution", "streaming",
            "error_samples")


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    write_synthetic_run(root / "plain", duration_s=30, seed=5,
                        spikes=[{"kind": "network", "at_s": 12, "duration_s": 2, "extra_ms": 250}])
    write_synthetic_llm_run(root / "llm", duration_s=30, seed=3,
                            ttft_spike={"at_s": 12, "duration_s": 3, "extra_ms": 400})
    return {"plain": analyze_run(root / "plain"), "llm": analyze_run(root / "llm")}


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("run", ["plain", "llm"])
def test_each_section_reads_back_to_the_same_json(analyses, run, section):
    data = analyses[run][section]
    assert json.dumps(encode(decode(TYPED[section], data, section))) == json.dumps(data)


def test_the_llm_columns_and_the_streamed_metrics_are_there_only_in_a_streaming_llm_run(analyses):
    plain = [decode(Window, w) for w in analyses["plain"]["windows"]]
    llm = [decode(Window, w) for w in analyses["llm"]["windows"]]
    assert all(w.llm_requests is None and "ttft_p99_ms" not in encode(w) for w in plain)
    assert all(w.llm_requests is not None and "ttft_p99_ms" in encode(w) for w in llm)
    assert any(w.ttft_p99_ms is None for w in llm) or all(w.llm_requests for w in llm)  # null is written
    assert decode(Streaming, analyses["plain"]["streaming"]).overall is None
    overall = decode(Streaming, analyses["llm"]["streaming"]).overall
    assert overall is not None and overall.requests > 0 and overall.ttft_ms.p50.value_ms > 0


def test_a_class_reads_as_a_request_summary_without_the_run_only_parts(analyses):
    classes = decode(TYPED["classes"], analyses["plain"]["classes"], "classes")
    assert set(classes) == {"short", "long"}
    for name, summary in classes.items():
        assert type(summary) is RequestSummary  # the run's Summary adds load_model, dropped, goodput
        assert summary.requests == analyses["plain"]["classes"][name]["requests"]
        assert encode(summary) == analyses["plain"]["classes"][name]


def test_a_field_written_with_another_is_left_out_exactly_while_that_one_is_none():
    @dataclass(frozen=True)
    class Row:
        total: int
        extra: int | None = written_when_set()
        extra_share: float | None = written_with("extra")

    assert encode(Row(1)) == {"total": 1}
    assert encode(Row(1, 0, None)) == {"total": 1, "extra": 0, "extra_share": None}
    assert decode(Row, {"total": 1, "extra": 2, "extra_share": None}) == Row(1, 2, None)
    assert decode(Row, {"total": 1}) == Row(1)


def _as_older(analysis: dict) -> dict:
    """``analysis`` as a tailscope before the record sections' later fields wrote it."""
    old = copy.deepcopy(analysis)
    for key in ("format_version", "tailscope_version", "environment", "damaged_files", "abort_reasons"):
        old["run"].pop(key)
    for window in old["windows"]:
        for key in ("n", "p90_ms", "p999_ms", "too_few_samples", "max_ms"):
            window.pop(key)
    for metrics in [old["streaming"], *old["streaming"]["classes"].values()]:
        for key in ("chunks_per_request", "decode_tokens_per_s_p50", "decode_tokens_per_s_mean"):
            metrics.pop(key, None)
    old["error_samples"].pop("max_per_class")
    for entry in old["error_samples"]["classes"].values():
        for sample in entry["samples"]:
            sample.pop("first_ns", None)
    return old


@pytest.mark.parametrize("run", ["plain", "llm"])
def test_an_older_analysis_without_the_later_fields_reads_with_the_defaults(analyses, run):
    old = _as_older(analyses[run])
    facts = decode(Run, old["run"], "run")
    assert (facts.environment, facts.damaged_files, facts.abort_reasons, facts.format_version) == (None, (), (), None)
    windows = [decode(Window, w) for w in old["windows"]]
    assert windows and all((w.n, w.p90_ms, w.too_few_samples, w.max_ms) == (None, None, (), None) for w in windows)


@pytest.mark.parametrize("run", ["plain", "llm"])
def test_an_older_analysis_without_the_later_fields_still_renders(analyses, run):
    old = _as_older(analyses[run])
    data = build_report_data(old)
    setup = {row["key"]: row["value"] for row in data["setup"]["run_rows"]}
    assert (setup["format"], setup["tailscope"], data["setup"]["environment"]) == ("None", "None", [])
    current = build_report_data(analyses[run])
    if current["streaming"] is None:
        assert data["streaming"] is None
    else:  # the same tables, less the facts the older analysis lacks
        later = {"chunks_per_request", "decode_tokens_per_s_p50", "decode_tokens_per_s_mean"}
        assert data["streaming"]["rows"] == current["streaming"]["rows"]
        assert data["streaming"]["facts"] == [f for f in current["streaming"]["facts"] if f["key"] not in later]
    assert data["charts"]["slow"] == current["charts"]["slow"] and data["charts"]["tail"] == current["charts"]["tail"]
    html = render_html(data)
    assert analyses[run]["run"]["name"] in html


def test_an_analysis_without_the_optional_record_sections_still_renders(analyses):
    old = copy.deepcopy(analyses["llm"])
    for key in ("slow_requests", "tail_line", "rolling_lines", "distribution", "streaming", "error_samples"):
        old.pop(key)
    data = build_report_data(old)
    assert data["charts"]["slow"]["shown"] == 0 and data["charts"]["tail"] is None
    assert (data["streaming"], data["stream_rates"], data["error_samples"], data["has_distribution"]) == (None, [], [], False)
    assert render_html(data)
