"""Stage-mapping rules: presets, user rules (first match wins), Triton-style span events, errors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from run_builders import TRITON_FIXTURE, triton_requests, write_requests_run

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.consistency import CHILD_SPAN_SOURCE, consistency_warnings
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.analyzers.stages.rules import (
    PRESETS,
    StageRuleError,
    StageRules,
    parse_stages_config,
    rules_for_scenario,
)
from tailscope.rundir import load_run, schema
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.tracing.ingest.importers import import_spans

TRITON_STAGES = ("request_parse", "enqueue", "queue", "compute_input", "inference", "compute_output",
                 "response_serialize", "http_send", "request_release")


@pytest.fixture(scope="module")
def triton_run(tmp_path_factory):
    run_dir = write_requests_run(tmp_path_factory.mktemp("triton") / "run", triton_requests(),
                                 scenario={"stages": {"preset": "triton"}})
    import_spans(run_dir, [TRITON_FIXTURE])
    return run_dir


def test_triton_preset_recovers_every_stage_and_the_unaccounted_time(triton_run):
    run = load_run(triton_run)
    truth = {r["trace_id"]: r for r in triton_requests()}
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, PRESETS["triton"])
    assert len(matrix.request_index) == 60 and matrix.unmapped == []
    for row, index in enumerate(matrix.request_index):
        expected = truth[req.trace_id[index]]
        for stage in TRITON_STAGES:
            assert matrix.column(stage)[row] == pytest.approx(expected["stages_ms"].get(stage, np.nan), abs=1e-9,
                                                              nan_ok=True)
        assert matrix.column("server")[row] == pytest.approx(expected["server_ms"], abs=1e-9)
        assert matrix.column("unaccounted")[row] == pytest.approx(expected["unaccounted_ms"], abs=1e-9)
        # 0.15 ms each way, and Triton receives the body (0.05 ms) and 0.036 ms more before its span starts
        assert matrix.column("outside_server")[row] == pytest.approx(0.386, abs=1e-9)
    assert matrix.consistency.exceeding_requests == 0


def test_triton_analysis_shows_the_slow_queue_and_the_rules(triton_run):
    stages = analyze_run(triton_run)["stages"]
    assert stages["joined_fraction"] == 1.0
    assert stages["by_stage"]["queue"]["p99_ms"] == pytest.approx(30.0)  # every 20th request waits 30 ms
    assert stages["by_stage"]["queue"]["count"] == 60
    assert stages["rules"]["preset"] == "triton" and stages["rules"]["server"] == "name ~ /^InferRequest$/"
    assert {"between": ["QUEUE_START", "COMPUTE_START"], "stage": "queue"} in stages["rules"]["rules"]


def test_without_the_preset_every_triton_span_is_a_server_span_and_nothing_is_a_stage(triton_run):
    run = load_run(triton_run)
    matrix = stage_matrix(request_arrays(run.requests), run.spans, PRESETS["reference"])
    # Triton sends all three SERVER-kind: the longest (InferRequest) is the request's, the others no stage
    assert matrix.unmapped == [] and matrix.span_stages == ()
    assert np.allclose(matrix.column("unaccounted"), matrix.column("server"))
    assert matrix.consistency.exceeding_requests == 0


def test_a_model_span_no_rule_ignores_overlaps_the_event_stages_and_the_check_names_it(triton_run):
    """The triton preset before Triton's attribute was named `triton.model_name`: the model span
    became a stage beside the event stages it contains; the sum passed the server span unnoticed."""
    run = load_run(triton_run)
    triton = PRESETS["triton"]
    rules = StageRules(span_rules=triton.span_rules[:1], event_rules=triton.event_rules, server=triton.server,
                       preset="triton")
    matrix = stage_matrix(request_arrays(run.requests), run.spans, rules)
    assert matrix.span_stages == ("resnet50",)  # the server span's child; `compute` is ignored inside it
    assert np.allclose(matrix.column("unaccounted"), 0.0)  # the symptom: nothing left unaccounted
    facts = encode(matrix.consistency)  # as analysis.json states it
    assert facts["exceeding_requests"] == facts["checked_requests"] == 60
    assert facts["stage_sum_mean_ms"] > 1.9 * facts["server_mean_ms"]
    assert [c["stage"] for c in facts["culprits"]] == ["resnet50"]
    assert facts["culprits"][0]["sources"] == [CHILD_SPAN_SOURCE] and facts["culprits"][0]["resolves_share"] == 1.0
    [warning] = consistency_warnings(matrix.consistency)
    assert warning["code"] == "stage_overlap"
    assert "in 60 of 60 joined requests" in warning["message"] and "'resnet50'" in warning["message"]
    assert "preset 'triton'" in warning["message"]


def _spans(rows: list[dict]) -> pa.Table:
    base = {"parent_span_id": None, "service": "s", "kind": 1, "status_code": 0, "links": None, "pid": None,
            "events": None, "attributes": "{}"}
    return pa.Table.from_pylist([{**base, **row} for row in rows], schema=schema.SPANS_SCHEMA)


def test_user_rules_come_first_and_the_first_match_wins(tmp_path):
    trace = "ab" * 16
    run_dir = write_requests_run(tmp_path / "run", [{"trace_id": trace, "sent_ns": 0, "end_ns": 100_000_000}])
    t = 1_000_000
    spans = _spans([
        {"trace_id": trace, "span_id": "01" * 8, "name": "POST /x", "kind": 2, "start_ns": t, "end_ns": 91 * t},
        {"trace_id": trace, "span_id": "02" * 8, "name": "tokenize", "start_ns": t, "end_ns": 3 * t},
        {"trace_id": trace, "span_id": "03" * 8, "name": "preprocess", "start_ns": 3 * t, "end_ns": 4 * t},
        {"trace_id": trace, "span_id": "04" * 8, "name": "step", "start_ns": 4 * t, "end_ns": 10 * t,
         "attributes": json.dumps({"phase": "queue", "n": 7})},
        {"trace_id": trace, "span_id": "05" * 8, "name": "step", "start_ns": 10 * t, "end_ns": 50 * t,
         "attributes": json.dumps({"phase": "forward", "n": 7})},
        {"trace_id": trace, "span_id": "06" * 8, "name": "health", "start_ns": 50 * t, "end_ns": 51 * t},
        {"trace_id": trace, "span_id": "07" * 8, "name": "mystery", "start_ns": 51 * t, "end_ns": 52 * t},
    ])
    rules = parse_stages_config({"rules": [
        {"match": {"name": "^(tokenize|preprocess)$"}, "stage": "preprocess"},
        {"match": {"name": "^step$", "attribute": {"phase": "^queue$"}}, "stage": "queue"},
        {"match": {"attribute": {"phase": "forward", "n": "^7$"}}, "stage": "inference"},
        {"match": {"name": "health"}, "stage": "ignore"},
        {"match": {"name": "^tokenize$"}, "stage": "never_reached"},
    ]})
    matrix = stage_matrix(request_arrays(load_run(run_dir).requests), spans, rules)
    got = {stage: matrix.column(stage)[0] for stage in matrix.stages}
    assert got["preprocess"] == 3.0 and got["queue"] == 6.0 and got["inference"] == 40.0
    assert np.isnan(got["never_reached"]) and got["server"] == 90.0
    assert got["unaccounted"] == pytest.approx(90.0 - 49.0)
    assert encode(matrix.unmapped) == [{"name": "mystery", "count": 1}]


def test_top_level_span_is_the_server_span_when_no_span_is_server_kind(tmp_path):
    trace = "cd" * 16
    run_dir = write_requests_run(tmp_path / "run", [{"trace_id": trace, "sent_ns": 0, "end_ns": 50_000_000}])
    t = 1_000_000
    spans = _spans([  # a framework that marks nothing SERVER; its root continues the generator's span
        {"trace_id": trace, "span_id": "01" * 8, "parent_span_id": "ff" * 8, "name": "handler",
         "start_ns": t, "end_ns": 21 * t},
        {"trace_id": trace, "span_id": "02" * 8, "parent_span_id": "01" * 8, "name": "inference",
         "start_ns": 2 * t, "end_ns": 12 * t},
    ])
    matrix = stage_matrix(request_arrays(load_run(run_dir).requests), spans, PRESETS["reference"])
    assert matrix.column("server")[0] == 20.0 and matrix.column("inference")[0] == 10.0
    assert matrix.unmapped == []


def test_reference_preset_matches_the_old_name_map_on_a_synthetic_run(tmp_path):
    write_synthetic_run(tmp_path / "syn", duration_s=8, rate=40, seed=3, with_signals=False)
    run = load_run(tmp_path / "syn")
    req = request_arrays(run.requests)
    by_preset = stage_matrix(req, run.spans, PRESETS["reference"])
    by_map = stage_matrix(req, run.spans, {"preprocess": "preprocess", "queue_wait": "queue",
                                           "batch_wait": "batch_wait", "inference": "inference",
                                           "postprocess": "postprocess"})
    assert by_preset.stages == by_map.stages
    assert np.array_equal(by_preset.ms, by_map.ms, equal_nan=True)
    assert len(by_preset.request_index) > 250


SCENARIO = """duration: 5s
target: http://127.0.0.1:9
arrival: {process: constant, rate: 1}
classes: [{name: a, path: /}]
stages:
"""


@pytest.mark.parametrize("section, where, message", [
    ("  preset: trtllm\n", "6: stages.preset", "unknown preset 'trtllm'"),
    ("  rules:\n    - match: {name: '(('}\n      stage: queue\n", "7: stages.rules[0].match.name",
     "invalid regular expression"),
    ("  rules:\n    - match: {name: x}\n      stage: server\n", "8: stages.rules[0].stage", "derived by the analysis"),
    ("  rules:\n    - between: [A]\n      stage: q\n", "7: stages.rules[0].between", "two event names"),
    ("  rules:\n    - stage: q\n", "7: stages.rules[0]", "exactly one of `match`"),
    ("  clock: sometimes\n", "6: stages.clock", "auto, on, off"),
    ("  rules:\n    - match: {}\n      stage: q\n", "7: stages.rules[0].match", "needs `name` or `attribute`"),
])
def test_scenario_errors_are_located(section, where, message):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(SCENARIO + section, "s.yaml")
    assert f"s.yaml:{where}" in str(info.value) and message in str(info.value)


def test_scenario_section_parses_into_rules():
    scenario = parse_scenario(SCENARIO + "  preset: triton\n  clock: off\n  rules:\n"
                              "    - match: {name: '^decode$'}\n      stage: preprocess\n", "s.yaml")
    rules = scenario.sections["stages"]
    assert rules.preset == "triton" and rules.clock == "off" and rules.user_rules == 1
    assert rules.stage_names()[0] == "preprocess"


def test_a_broken_section_in_an_old_manifest_falls_back_with_a_warning():
    resolved = rules_for_scenario({"stages": {"preset": 42}})
    assert resolved.rules.preset == "reference"
    assert resolved.warnings[0]["code"] == "invalid_stage_rules"
    with pytest.raises(StageRuleError):
        parse_stages_config({"preset": 42})


@pytest.mark.parametrize("span_id", [lambda hex_id: hex_id, lambda hex_id: f"span-{hex_id[:2]}"],
                         ids=["otlp-ids", "other-ids"])
def test_unmapped_children_of_the_server_span_are_stages_under_their_own_names(tmp_path, span_id):
    trace = "ef" * 16
    run_dir = write_requests_run(tmp_path / "run", [{"trace_id": trace, "sent_ns": 0, "end_ns": 100_000_000}])
    t = 1_000_000
    spans = _spans([{**row, "span_id": span_id(row["span_id"]), "parent_span_id": span_id(row["parent_span_id"])}
                    for row in [  # a plain OTel SDK service: decode, model (twice), encode; nothing a rule names
        {"trace_id": trace, "span_id": "01" * 8, "parent_span_id": "ff" * 8, "name": "POST /predict", "kind": 2,
         "start_ns": t, "end_ns": 91 * t},
        {"trace_id": trace, "span_id": "06" * 8, "parent_span_id": "01" * 8, "name": "encode",
         "start_ns": 80 * t, "end_ns": 85 * t},
        {"trace_id": trace, "span_id": "02" * 8, "parent_span_id": "01" * 8, "name": "decode",
         "start_ns": 2 * t, "end_ns": 6 * t},
        {"trace_id": trace, "span_id": "03" * 8, "parent_span_id": "01" * 8, "name": "model",
         "start_ns": 10 * t, "end_ns": 50 * t},
        {"trace_id": trace, "span_id": "04" * 8, "parent_span_id": "03" * 8, "name": "inference",  # a preset's
         "start_ns": 20 * t, "end_ns": 45 * t},
        {"trace_id": trace, "span_id": "05" * 8, "parent_span_id": "04" * 8, "name": "kernel",  # rolls up
         "start_ns": 21 * t, "end_ns": 30 * t},
        {"trace_id": trace, "span_id": "08" * 8, "parent_span_id": "01" * 8, "name": "model",
         "start_ns": 60 * t, "end_ns": 70 * t},
        {"trace_id": trace, "span_id": "07" * 8, "parent_span_id": "ee" * 8, "name": "orphan",  # parent lost
         "start_ns": 86 * t, "end_ns": 88 * t},
    ]])
    matrix = stage_matrix(request_arrays(load_run(run_dir).requests), spans, PRESETS["reference"])
    assert matrix.span_stages == ("decode", "model", "encode")  # in the order they start
    got = {stage: matrix.column(stage)[0] for stage in matrix.stages}
    assert got["decode"] == 4.0 and got["encode"] == 5.0 and got["inference"] == 25.0
    assert got["model"] == pytest.approx(40.0 + 10.0 - 25.0)  # both model spans, less the preset's inference
    assert got["server"] == 90.0 and got["unaccounted"] == pytest.approx(90.0 - 4 - 5 - 25 - 25)
    assert {u.name for u in matrix.unmapped} == {"decode", "model", "encode", "kernel", "orphan"}
    ruled = parse_stages_config({"rules": [{"match": {"name": "^model$"}, "stage": "compute"}]})
    matrix = stage_matrix(request_arrays(load_run(run_dir).requests), spans, ruled)
    assert matrix.span_stages == ("decode", "encode") and matrix.column("compute")[0] == 50.0


def test_a_spike_is_decomposed_into_the_span_name_stages(tmp_path):
    write_synthetic_run(tmp_path / "syn", duration_s=40, rate=100, seed=5, with_signals=False,
                        spikes=[{"kind": "gpu", "at_s": 20, "duration_s": 5, "extra_ms": 80, "stage": "inference"}])
    analysis = analyze_run(tmp_path / "syn", stage_map={"preprocess": "preprocess"})  # the rest: no rule
    assert analysis["stages"]["span_stages"] == ["queue_wait", "batch_wait", "inference", "postprocess"]
    spike = max(analysis["spikes"], key=lambda s: s["p99_ms"])
    decomposition = spike["decomposition"]
    assert decomposition["dominant_stage"] == "inference"
    assert {"queue_wait", "inference", "preprocess"} <= set(decomposition["stages"])


def test_a_span_named_like_a_rules_stage_adds_to_that_stage(tmp_path):
    trace = "ab" * 16
    run_dir = write_requests_run(tmp_path / "run", [{"trace_id": trace, "sent_ns": 0, "end_ns": 100_000_000}])
    t = 1_000_000
    spans = _spans([
        {"trace_id": trace, "span_id": "01" * 8, "parent_span_id": "ff" * 8, "name": "POST /x", "kind": 2,
         "start_ns": t, "end_ns": 91 * t},
        {"trace_id": trace, "span_id": "02" * 8, "parent_span_id": "01" * 8, "name": "queue_wait",  # preset: queue
         "start_ns": 2 * t, "end_ns": 12 * t},
        {"trace_id": trace, "span_id": "03" * 8, "parent_span_id": "01" * 8, "name": "queue",  # no rule: its name
         "start_ns": 20 * t, "end_ns": 25 * t},
        {"trace_id": trace, "span_id": "04" * 8, "parent_span_id": "01" * 8, "name": "server",  # a derived name
         "start_ns": 30 * t, "end_ns": 33 * t},
    ])
    matrix = stage_matrix(request_arrays(load_run(run_dir).requests), spans, PRESETS["reference"])
    assert matrix.stages.count("queue") == 1 and matrix.column("queue")[0] == 15.0
    assert matrix.span_stages == ("span:server",) and matrix.column("span:server")[0] == 3.0
    assert matrix.column("server")[0] == 90.0
