"""Every run says why its P99 is what it is, spikes or none (issue 28, "what to build" 3).

The ``p99_set_by`` finding (analyzers/findings/tail.py) on seeded synthetic runs at 20 to
2,000 req/s, and on an LLM run whose long answers set the end-to-end P99.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.health import Generator
from tailscope.analysis_model.summary import Summary
from tailscope.analyzers.analysis import SCHEMA_PATH, analyze_run
from tailscope.analyzers.findings.protocol import FindingInputs
from tailscope.analyzers.findings.tail import check_p99_set_by
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.decomposition import join_spans, stage_matrix
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.rundir import RunWriter, load_run
from tailscope.testkit.synthetic import SYNTHETIC_START_NS, write_synthetic_run


def validate_analysis(analysis: dict) -> None:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.Draft202012Validator(json.load(fh)).validate(analysis)


def _p99_finding(analysis: dict) -> dict:
    (found,) = [f for f in analysis["findings"] if f["kind"] == "p99_set_by"]
    assert found["severity"] == "low"
    return found


def _recurring_stalls(duration_s: int, every_s: float = 4.0, length_ms: float = 150.0) -> list[dict]:
    return [{"kind": "stall", "at_s": t + 0.3, "duration_s": length_ms / 1000, "extra_ms": length_ms}
            for t in np.arange(2.0, duration_s, every_s)]


def test_recurring_stalls_with_no_spike_set_p99_and_the_first_screen_says_so(tmp_path):
    truth = write_synthetic_run(tmp_path / "run", duration_s=60, rate=20, seed=2, gc_events=False,
                                spikes=_recurring_stalls(60))
    analysis = analyze_run(truth["path"])
    validate_analysis(analysis)
    # the answer where the spike test found nothing (as recurring stalls below its power leave it): the
    # same analysis with its spikes taken away, judged by the finding's own check
    run = load_run(truth["path"])
    req = request_arrays(run.requests)
    rules = rules_for_scenario(run.manifest.get("scenario") or {}, None).rules
    join = join_spans(req, run.spans, rules)
    checked = check_p99_set_by(FindingInputs(
        summary=decode(Summary, analysis["summary"], "summary"), spikes=[],
        generator=decode(Generator, analysis["generator"], "generator"), load_start_ns=analysis["run"]["load_start_ns"],
        req=req, matrix=stage_matrix(req, run.spans, rules, join=join), run=run, span_request=join.span_request))
    found = encode(checked)
    assert found["evidence"]["by"] == "stalls"
    assert found["summary"].startswith(f"P99 latency ({analysis['summary']['latency_ms']['p99']['value_ms']:.1f} ms) "
                                       "is set by the target's pauses: ")
    assert "stalls of its process (every ~4.0 s, each ~" in found["summary"]
    assert found["evidence"]["pauses"]["above_share"] >= 0.9


@pytest.mark.parametrize("rate", [200, 2000])
def test_when_spikes_hold_the_slow_requests_the_answer_names_them_and_their_causes(tmp_path, rate):
    truth = write_synthetic_run(tmp_path / "run", duration_s=60, rate=rate, seed=2, gc_events=False,
                                spikes=_recurring_stalls(60))
    analysis = analyze_run(truth["path"])
    found = _p99_finding(analysis)
    assert found["evidence"]["by"] == "spikes" and analysis["spikes"]
    assert found["evidence"]["spike_causes"] == {"process_stall": len(analysis["spikes"])}
    assert "top cause: process_stall" in found["summary"]


def test_a_steady_run_of_two_classes_is_set_by_its_request_mix(tmp_path):
    truth = write_synthetic_run(tmp_path / "run", duration_s=40, rate=50, seed=1)
    found = _p99_finding(analyze_run(truth["path"]))
    assert found["evidence"]["by"] == "class" and found["evidence"]["class"]["name"] == "long"
    assert "'long' requests" in found["summary"]


def test_a_steady_run_of_one_class_is_set_by_the_stage_that_grew(tmp_path):
    truth = write_synthetic_run(tmp_path / "run", duration_s=40, rate=50, seed=1, classes=("short",))
    found = _p99_finding(analyze_run(truth["path"]))
    assert found["evidence"]["by"] == "stage" and found["evidence"]["stage"]["name"] == "inference"
    assert found["summary"].startswith("P99 latency (") and "is set by inference: the " in found["summary"]


def test_an_llm_run_whose_long_answers_set_p99_says_output_length_not_an_incident(tmp_path):
    rng = np.random.default_rng(4)
    writer = RunWriter(str(tmp_path / "llm"), {"name": "llm", "scenario": {}, "target": "http://127.0.0.1:9"})
    t = SYNTHETIC_START_NS
    for i in range(600):
        t += int(rng.exponential(0.5e9))  # 2 req/s, 5 minutes
        output = int(rng.choice([20, 40, 60, 400], p=[0.3, 0.3, 0.385, 0.015]))
        latency_ns = int((30 + 12 * output) * rng.uniform(0.95, 1.05) * 1e6)  # 12 ms per token, flat
        writer.requests.append_row({
            "scheduled_ns": t, "sent_ns": t, "end_ns": t + latency_ns, "first_byte_ns": t + 30_000_000,
            "cls": "chat", "status": 200, "bytes_out": 100, "bytes_in": 100, "trace_id": f"{i:032x}",
            "error_kind": None, "error": None, "chunks": 0, "max_gap_ns": None, "worker": 0,
            "prompt_tokens": 50, "output_tokens": output})
    writer.close()
    found = _p99_finding(analyze_run(str(tmp_path / "llm")))
    assert found["evidence"]["by"] == "output_length"
    assert found["evidence"]["output_tokens"]["ratio"] >= 5
    assert "time per output token is flat" in found["summary"]


def test_a_train_of_tiny_pauses_that_overlaps_the_slow_requests_does_not_explain_them(tmp_path, monkeypatch):
    """0.3-ms collections every 60 ms overlap every long request and explain none of its latency:
    the answer is the request mix, and the pause facts say how little the pauses covered."""
    import tailscope.analyzers.findings.tail as tail
    from tailscope.analyzers.inputs.pauses import Pauses

    truth = write_synthetic_run(tmp_path / "run", duration_s=40, rate=50, seed=1, gc_events=False)
    start = SYNTHETIC_START_NS + np.arange(0, 40_000_000_000, 60_000_000, dtype=np.int64)
    end = start + 300_000
    train = Pauses(start, end, np.zeros(len(start), np.int64), np.arange(len(start), dtype=np.int64) * 300_000)
    monkeypatch.setattr(tail, "pauses_of", lambda events, kind: train)
    found = _p99_finding(analyze_run(truth["path"]))
    pauses = found["evidence"]["pauses"]
    assert pauses["source"] == "gc" and pauses["above_share"] >= 0.9 > pauses["others_share"] + 0.3
    assert pauses["accounts_share"] < tail.PAUSE_ACCOUNTS
    assert found["evidence"]["by"] == "class"
