"""Issue 28: an LLM run's e2e spikes are judged for answer length where output lengths differ — a
burst of long answers is not an incident; a real slowdown per token is, and so is a queue burst
(seeded synthetic LLM runs)."""

from __future__ import annotations

import html
import json
import os

import jsonschema
import numpy as np
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.spikes.detection import length_adjusted_ms
from tailscope.testkit.synthetic_llm import write_synthetic_llm_run

NS = 1_000_000_000
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
EPISODE = {"at_s": 30, "duration_s": 15}


def _analyse(path, rate: float, **kwargs) -> dict:
    write_synthetic_llm_run(path, duration_s=90, rate=rate, seed=2, **kwargs)
    return analyze_run(path)


@pytest.mark.parametrize("rate", [5, 20])
def test_a_burst_of_long_answers_is_not_a_spike_but_is_named(tmp_path, rate):
    """Before, e2e latency was tested as is: the answers four times longer for 15 s were an
    unexplained latency spike."""
    analysis = _analyse(tmp_path / "long", rate, output_burst={**EPISODE, "factor": 4})
    detection = analysis["spike_detection"]
    assert detection["judged_on"] == "e2e_for_answer_length"
    assert analysis["spikes"] == []
    (longer,) = detection["longer_answers"]
    origin = analysis["run"]["load_start_ns"]
    assert abs((longer["start_ns"] - origin) / NS - 30) <= 2 and abs((longer["end_ns"] - origin) / NS - 45) <= 2
    assert longer["output_tokens_ratio"] > 2.5 and longer["length_adjusted_ratio"] < 1.25
    assert " only with output length — longer answers: output tokens ×" in longer["summary"]
    assert "e2e for their length flat" in longer["summary"]
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(json.loads(json.dumps(analysis)), json.load(fh))


@pytest.mark.parametrize("rate", [5, 20])
def test_a_queue_burst_stays_a_spike(tmp_path, rate):
    """Dividing e2e by the token count alone hid a queue burst: for a short answer the first token's
    wait dominates, so the quotient's tail is the short answers' (the LLM lab's overload went unseen)."""
    analysis = _analyse(tmp_path / "queue", rate, ttft_spike={**EPISODE, "extra_ms": 1500})
    assert analysis["spike_detection"]["judged_on"] == "e2e_for_answer_length"
    (spike,) = analysis["spikes"]
    origin = analysis["run"]["load_start_ns"]
    assert abs((spike["start_ns"] - origin) / NS - 30) <= 2 and abs((spike["end_ns"] - origin) / NS - 45) <= 2
    assert spike["answer_length"]["ratio"] > 1.3


@pytest.mark.parametrize("rate", [5, 20])
def test_a_per_token_slowdown_is_a_spike_that_says_so(tmp_path, rate):
    analysis = _analyse(tmp_path / "slow", rate, decode_spike={**EPISODE, "factor": 3})
    assert analysis["spike_detection"]["judged_on"] == "e2e_for_answer_length"
    assert analysis["spike_detection"]["longer_answers"] == []
    (spike,) = analysis["spikes"]
    origin = analysis["run"]["load_start_ns"]
    assert abs((spike["start_ns"] - origin) / NS - 30) <= 2 and abs((spike["end_ns"] - origin) / NS - 45) <= 2
    judged = spike["answer_length"]
    assert judged["ratio"] > 1.8 and 0.7 < judged["output_tokens_ratio"] < 1.4
    assert judged["summary"].startswith(f"e2e for its answer length rose {judged['ratio']:.1f}× (P99 ")
    # the record's P99 and baseline stay plain e2e: the baseline is the normal requests' e2e P99
    assert spike["excess_ms"] == spike["p99_ms"] - spike["baseline_p99_ms"]
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(json.loads(json.dumps(analysis)), json.load(fh))


def test_a_steady_run_has_neither(tmp_path):
    analysis = _analyse(tmp_path / "steady", 20)
    assert analysis["spikes"] == [] and analysis["spike_detection"]["longer_answers"] == []


def test_answers_of_one_length_are_judged_on_latency(tmp_path):
    analysis = _analyse(tmp_path / "fixed", 20, output_tokens=(32, 34))
    assert analysis["spike_detection"]["judged_on"] == "latency"
    assert analysis["spike_detection"]["longer_answers"] == []


def test_length_adjusted_ms_needs_varying_counts_that_e2e_grows_with():
    n = 200
    rng = np.random.default_rng(0)

    tokens = rng.integers(8, 64, n).astype(float)

    class Req:  # the fields length_adjusted_ms reads: e2e = 80 ms + 20 ms per token
        in_latency = is_ok = np.ones(n, bool)
        latency_ms = 80.0 + 20.0 * tokens
    assert length_adjusted_ms(Req, None) is None
    assert length_adjusted_ms(Req, np.full(n, 50.0)) is None  # one length: judged on latency
    typical = 80.0 + 20.0 * np.median(tokens)
    assert np.allclose(length_adjusted_ms(Req, tokens), typical)  # every answer on the line: all typical
    Req.latency_ms = Req.latency_ms * np.where(np.arange(n) < 10, 3.0, 1.0)
    assert np.all(length_adjusted_ms(Req, tokens)[:10] > 2.5 * typical)  # three times slower for its length (the fit moves a little)
    assert length_adjusted_ms(Req, np.where(np.arange(n) < 150, np.nan, tokens)) is None  # too few counted


def test_the_report_names_longer_answers_and_the_answer_length_card(tmp_path):
    from tailscope.conductor.reporting import analyse_and_write

    write_synthetic_llm_run(tmp_path / "slow", duration_s=90, rate=20, seed=2, decode_spike={**EPISODE, "factor": 3},
                            output_burst={"at_s": 65, "duration_s": 10, "factor": 4})
    report = analyse_and_write(str(tmp_path / "slow"))
    page = html.unescape(open(report.paths["html"], encoding="utf-8").read()).replace("<b>", "").replace("</b>", "")
    (spike,) = report.analysis["spikes"]
    assert f"Judged for answer length: {spike['answer_length']['summary']}" in page
    (longer,) = report.analysis["spike_detection"]["longer_answers"]
    assert "Not incidents, longer answers: " + longer["summary"] in page
    assert "baseline P99 of e2e latency adjusted for answer length" in page
