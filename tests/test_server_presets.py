"""Server presets (vllm, tgi, sglang, triton): recorded spans decoded by the real receiver and
decomposed by the presets' rules; recorded /metrics pages scraped by the real Prometheus sampler
and resolved by the presets' metric maps; attribute rules (a stage from a numeric span attribute)
in presets and in a scenario's own rules.

Fixtures: tests/fixtures/server_presets/, written by make_server_preset_fixtures.py with the
OpenTelemetry SDK from each server's documented span and metric names."""

from __future__ import annotations

import http.server
import json
import os
import threading

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
from receiver_helpers import post, running_receiver
from run_builders import write_requests_run

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.json_fields import json_number_fields
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.stages.attribute_stages import attribute_numbers, duration_ns
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.analyzers.stages.presets import ROLES, STAGE_PRESETS, MetricMap, MetricSource
from tailscope.analyzers.stages.rules import PRESETS, parse_stages_config
from tailscope.analyzers.stages.server_metrics import run_server_series, server_series
from tailscope.analyzers.stages.server_tokens import SERVER_SPAN_SOURCE, merged_token_counts
from tailscope.rundir import load_run, schema
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario
from tailscope.signals.prometheus import PrometheusSampler
from tailscope.signals.sampling_loop import ArrowSink, signals_metadata
from tailscope.support.registry import UnknownName

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "server_presets")
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
T0 = 1_767_225_600 * 1_000_000_000
S = 1_000_000_000


def _requests(server: str) -> list[dict]:
    with open(os.path.join(FIXTURES, f"{server}_requests.json"), encoding="utf-8") as fh:
        return json.load(fh)


def received_run(path, server: str, scenario: dict | None = None) -> str:
    """A run directory with the fixture's client records and its spans as the real receiver
    stored them: every OTLP/JSON line posted to it over loopback HTTP."""
    run_dir = write_requests_run(path, _requests(server), scenario=scenario or {"stages": {"preset": server}})
    with running_receiver(run_dir, port=0) as rx, open(os.path.join(FIXTURES, f"{server}_otlp.jsonl"),
                                                        encoding="utf-8") as fh:
        for line in fh:
            status, _, _ = post(rx.port, "/v1/traces", line.encode(), content_type="application/json")
            assert status == 200
    return run_dir


@pytest.fixture(scope="module", params=["vllm", "tgi", "sglang"])
def preset_run(request, tmp_path_factory):
    server = request.param
    return server, received_run(tmp_path_factory.mktemp(server) / "run", server)


def test_each_preset_recovers_the_documented_stages_from_its_servers_spans(preset_run):
    server, run_dir = preset_run
    run = load_run(run_dir)
    req = request_arrays(run.requests)
    truth = {r["trace_id"]: r for r in _requests(server)}
    matrix = stage_matrix(req, run.spans, PRESETS[server])
    assert len(matrix.request_index) == len(truth)
    assert matrix.unmapped == [] and matrix.span_stages == ()  # every span is a stage or ignored
    for row, index in enumerate(matrix.request_index):
        expected = truth[req.trace_id[index]]
        for stage, ms in expected["stages_ms"].items():
            got = matrix.column(stage)[row]
            if ms is None:
                assert np.isnan(got), (stage, expected)
            else:
                assert got == pytest.approx(ms, abs=1e-6), (stage, expected)
        assert matrix.column("server")[row] == pytest.approx(expected["server_ms"], abs=1e-6)
        assert matrix.column("unaccounted")[row] == pytest.approx(expected["unaccounted_ms"], abs=1e-6)
        assert matrix.column("outside_server")[row] == pytest.approx(0.3, abs=1e-6)


def test_vllm_stages_are_laid_end_to_end_within_the_span_and_its_token_counts_are_exposed(tmp_path):
    run_dir = received_run(tmp_path / "run", "vllm")
    run = load_run(run_dir)
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, PRESETS["vllm"])
    assert matrix.stages[:4] == ("api_server", "queue", "prefill", "decode")
    parts = matrix.ms[:, :4].sum(axis=1)
    assert np.all(parts <= matrix.column("server") + 1e-9)
    # queued 0.3 ms after arrival (api_server: time to first token less queue and prefill); the
    # span ends 0.25 ms after the last token: that alone is left unaccounted
    assert np.allclose(matrix.column("api_server"), 0.3, atol=1e-6)
    assert np.allclose(matrix.column("server") - parts, 0.25, atol=1e-6)
    truth = {r["trace_id"]: r for r in _requests("vllm")}
    ids = [req.trace_id[i] for i in matrix.request_index]
    tokens = matrix.server_tokens
    assert tokens.prompt.tolist() == [truth[t]["prompt_tokens"] for t in ids]
    assert tokens.output.tolist() == [truth[t]["output_tokens"] for t in ids]
    # the client saw no usage for the first half (counted chunks), the exact usage for the rest
    n = req.n
    client_source = np.array(["chunks" if i < n // 2 else "usage" for i in range(n)], dtype=object)
    merged = merged_token_counts(np.full(n, 5.0), np.full(n, 3.0), client_source, matrix.request_index, tokens)
    by_id = {req.trace_id[i]: i for i in range(n)}
    for trace_id, expected in truth.items():
        i = by_id[trace_id]
        if i < n // 2:
            assert (merged.prompt[i], merged.output[i], merged.source[i]) == (
                expected["prompt_tokens"], expected["output_tokens"], SERVER_SPAN_SOURCE)
        else:
            assert (merged.prompt[i], merged.output[i], merged.source[i]) == (5.0, 3.0, "usage")


def test_the_analysis_reports_the_vllm_stages_rules_and_server_tokens(tmp_path):
    run_dir = received_run(tmp_path / "run", "vllm")
    analysis = analyze_run(run_dir)
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))
    stages = analysis["stages"]
    assert stages["joined_fraction"] == 1.0 and stages["by_stage"]["queue"]["count"] == 24
    assert stages["by_stage"]["queue"]["p99_ms"] == pytest.approx(40.0)  # every 8th request queued 40 ms
    rules = stages["rules"]
    assert rules["preset"] == "vllm"
    assert {"match": "name ~ /^llm_request$/", "stage": "queue", "attribute": "gen_ai.latency.time_in_queue",
            "unit": "s"} in rules["rules"]
    truth = _requests("vllm")
    assert stages["server_tokens"]["requests"] == 24
    assert stages["server_tokens"]["prompt_tokens"] == sum(r["prompt_tokens"] for r in truth)
    assert stages["server_tokens"]["output_tokens"] == sum(r["output_tokens"] for r in truth)
    assert stages["server_metrics"] == {"preset": "vllm", "roles": {}, "missing": list(
        STAGE_PRESETS["vllm"].metrics.roles())}  # no /metrics were scraped in this run


def test_tgi_takes_the_handler_fields_only_where_its_spans_are_missing(tmp_path):
    run_dir = received_run(tmp_path / "run", "tgi")
    run = load_run(run_dir)
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, PRESETS["tgi"])
    truth = {r["trace_id"]: r for r in _requests("tgi")}
    kept = np.array([truth[req.trace_id[i]]["spans_kept"] for i in matrix.request_index])
    assert kept.sum() == 16 and (~kept).sum() == 4
    # with spans, prefill waits are their own stage; from the fields, inference holds them
    assert np.all(np.isnan(matrix.column("prefill_wait")[~kept]))
    assert np.any(~np.isnan(matrix.column("prefill_wait")[kept]))
    assert matrix.stages[:4] == ("validation", "queue", "inference", "prefill_wait")


def _matrix_of(tmp_path, spans: list[dict], rules, end_ns: int = 200_000_000):
    trace = "ab" * 16
    run_dir = write_requests_run(tmp_path / "run", [{"trace_id": trace, "sent_ns": 0, "end_ns": end_ns}])
    base = {"trace_id": trace, "parent_span_id": "ff" * 8, "service": "s", "kind": 1, "status_code": 0,
            "links": None, "pid": None, "events": None, "attributes": "{}"}
    table = pa.Table.from_pylist([{**base, **row} for row in spans], schema=schema.SPANS_SCHEMA)
    return stage_matrix(request_arrays(load_run(run_dir).requests), table, rules)


USER_RULES = """duration: 5s
target: http://127.0.0.1:9
arrival: {process: constant, rate: 1}
classes: [{name: a, path: /}]
stages:
  preset: none
  rules:
    - match: {name: "^queue_span$"}
      stage: queue
    - match: {name: "^handler$"}
      from_attributes:
        - {stage: parse, attribute: parse_us, unit: us}
        - {stage: queue, attribute: queue_ms, unit: ms}
        - {stage: compute, attribute: compute_ms, unit: ms}
    - match: {name: "^handler"}
      from_attributes:
        - {stage: never_used, attribute: parse_us, unit: us}
"""


def test_a_scenarios_attribute_rule_lays_its_stages_end_to_end_and_yields_to_span_rules(tmp_path):
    rules = parse_scenario(USER_RULES, "s.yaml").sections["stages"]
    ms = 1_000_000
    matrix = _matrix_of(tmp_path, [
        {"span_id": "01" * 8, "name": "POST /x", "kind": 2, "start_ns": ms, "end_ns": 101 * ms},
        # 2 + 30 + 80 ms of phases in a 100 ms handler: compute is clipped at the handler's end
        {"span_id": "02" * 8, "parent_span_id": "01" * 8, "name": "handler", "start_ns": ms, "end_ns": 101 * ms,
         "attributes": json.dumps({"parse_us": 2000, "queue_ms": "30ms", "compute_ms": 80})},
    ], rules)
    got = {stage: matrix.column(stage)[0] for stage in matrix.stages}
    assert got["parse"] == pytest.approx(2.0) and got["queue"] == pytest.approx(30.0)
    assert got["compute"] == pytest.approx(68.0)  # 100 − 2 − 30: laid end to end, never past the span
    assert np.isnan(got["never_used"])  # a span is read by the first attribute rule that matches it
    assert matrix.unmapped == [] and matrix.span_stages == ()  # the handler is read, not a stage itself
    # a span rule's stage wins over the attribute's for the same request
    matrix = _matrix_of(tmp_path / "b", [
        {"span_id": "01" * 8, "name": "POST /x", "kind": 2, "start_ns": ms, "end_ns": 101 * ms},
        {"span_id": "02" * 8, "parent_span_id": "01" * 8, "name": "handler", "start_ns": ms, "end_ns": 101 * ms,
         "attributes": json.dumps({"parse_us": 2000, "queue_ms": 30, "compute_ms": 10})},
        {"span_id": "03" * 8, "parent_span_id": "02" * 8, "name": "queue_span", "start_ns": 3 * ms,
         "end_ns": 28 * ms},
    ], rules)
    assert matrix.column("queue")[0] == pytest.approx(25.0) and matrix.column("compute")[0] == pytest.approx(10.0)


ERRORS = """duration: 5s
target: http://127.0.0.1:9
arrival: {process: constant, rate: 1}
classes: [{name: a, path: /}]
stages:
  rules:
"""


@pytest.mark.parametrize("rule, where, message", [
    ("    - from_attributes: [{stage: q, attribute: a, unit: s}]\n", "7: stages.rules[0]", "needs a `match`"),
    ("    - match: {name: x}\n      from_attributes:\n        - {stage: q, attribute: a, unit: h}\n",
     "9: stages.rules[0].from_attributes[0].unit", "unknown unit 'h'; expected one of s, ms, us, ns"),
    ("    - match: {name: x}\n      from_attributes:\n        - {stage: q, attribute: a, unit: s}\n"
     "        - {stage: r, unit: s}\n", "10: stages.rules[0].from_attributes[1]", "missing `attribute`"),
    ("    - match: {name: x}\n      stage: q\n      from_attributes: [{stage: q, attribute: a, unit: s}]\n",
     "8: stages.rules[0].stage", "remove `stage`"),
    ("    - match: {name: x}\n      from_attributes:\n        - {stage: q, attribute: a, unit: s}\n"
     "        - {stage: q, attribute: b, unit: s}\n", "10: stages.rules[0].from_attributes[1].stage", "twice"),
    ("    - match: {name: x}\n      from_attributes: []\n", "8: stages.rules[0].from_attributes", "non-empty list"),
    ("    - match: {name: x}\n      from_attributes:\n        - {stage: server, attribute: a, unit: s}\n",
     "9: stages.rules[0].from_attributes[0].stage", "derived by the analysis"),
    ("    - match: {name: x}\n      from_attributes:\n        - {stage: q, attribute: a, unit: s, scale: 2}\n",
     "9: stages.rules[0].from_attributes[0].scale", "unknown field 'scale'"),
])
def test_attribute_rule_errors_name_file_line_and_field(rule, where, message):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(ERRORS + rule, "s.yaml")
    assert f"s.yaml:{where}" in str(info.value) and message in str(info.value)


def test_duration_attributes_are_read_column_wise_in_their_units():
    rows = [
        {"d": 1.5}, {"d": 2}, {"d": "1.5ms"}, {"d": "820µs"}, {"d": "820μs"}, {"d": "3s"}, {"d": "250ns"},
        {"d": "12us"}, {"d": -1}, {"d": True}, {"d": "fast"}, {"d": None}, {}, {"other": "d", "x": "\"d\": \"5ms\""},
    ]
    texts = [json.dumps(r) for r in rows] + [json.dumps(rows[3], ensure_ascii=False)] + [None]
    expected = [1.5e6, 2e6, 1.5e6, 820e3, 820e3, 3e9, 250, 12e3] + [np.nan] * 6 + [820e3, np.nan]
    got = duration_ns(pa.array(texts), "d", "ms")
    assert np.allclose(got, expected, equal_nan=True)
    many = pa.array([json.dumps({"d": f"{i}.25ms", "i": i}) for i in range(500)])  # the column-wise regex path
    assert np.allclose(duration_ns(many, "d", "s"), (np.arange(500) + 0.25) * 1e6)


def test_attribute_numbers_read_like_json_number_fields_whichever_reader_takes_a_chunk():
    plain = [json.dumps({"a": i * 0.5, "b": i, "nested": {"a": 7}}) for i in range(300)] + [None, "", "{}"]
    odd = [json.dumps({"a": True}), json.dumps({"a": "1"}), "[1, 2]", '{"a": 1, "a": 2}', "not json",
           json.dumps({"b": 3.5})]  # Arrow's JSON reader refuses this chunk: json_fields reads it
    texts = pa.chunked_array([pa.array(plain), pa.array(odd), pa.array(plain[:5])])
    got = attribute_numbers(texts, ("a", "b", "a"))
    want = json_number_fields(texts, ("a", "b"))
    assert set(got) == {"a", "b"}
    assert all(np.array_equal(got[k], want[k], equal_nan=True) for k in ("a", "b"))
    assert got["a"][299] == 149.5 and np.isnan(got["a"][300:303]).all() and got["a"][306] == 2.0


# --------------------------------------------------------------------------- metric maps


class _Pages(http.server.BaseHTTPRequestHandler):
    page = ""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = type(self).page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def scraped_run(path, fixture: str, preset: str) -> str:
    """A run whose signals are the fixture's two scrapes (one second apart) as the real Prometheus
    sampler read them over loopback HTTP and the sampling sink stored them."""
    with open(os.path.join(FIXTURES, f"{fixture}_metrics.prom"), encoding="utf-8") as fh:
        pages = [p for p in fh.read().split("# EOF\n") if p.strip()]
    run_dir = write_requests_run(path, [{"trace_id": "ab" * 16, "sent_ns": T0, "end_ns": T0 + 2 * S}],
                                 scenario={"stages": {"preset": preset}})
    handler = type("Pages", (_Pages,), {"page": pages[0]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    sink = ArrowSink(run_dir)
    try:
        sampler = PrometheusSampler([f"http://127.0.0.1:{server.server_address[1]}/metrics"])
        assert sampler.probe() is None
        for k, page in enumerate(pages):
            handler.page = page
            sink.write(T0 + k * S, [row for batch in sampler.scrape_all() for row in batch.rows])
        sink.describe(signals_metadata(1.0, None, [sampler], {"prometheus": {"available": True, "reason": None}}))
    finally:
        sink.close()
        server.shutdown()
        server.server_close()
    return run_dir


# role → (metric used, series, value of the first bin); gauges: the first scrape combined (sum; kv_usage: max),
# counters: the combined rate per second between the two scrapes, in the role's unit
EXPECTED = {
    ("vllm", "vllm"): {
        "waiting": ("vllm:num_requests_waiting", 2, 7.0), "running": ("vllm:num_requests_running", 2, 15.0),
        "kv_usage": ("vllm:kv_cache_usage_perc", 2, 0.83), "preemptions": ("vllm:num_preemptions_total", 2, 6.0),
        "prompt_tokens": ("vllm:prompt_tokens_total", 2, 3000.0),
        "generation_tokens": ("vllm:generation_tokens_total", 2, 1600.0),
        "queue_time": ("vllm:request_queue_time_seconds_sum", 2, 8.0),
        "compute_time": ("vllm:request_inference_time_seconds_sum", 2, 15.0),
        "finished": ("vllm:request_success_total", 6, 20.0)},
    # two scrapes of the real vLLM 0.32 (CPU build, tests/real_servers) around three requests: waiting
    # for capacity only (not "deferred") and the prompt tokens computed locally (one label set of three)
    ("vllm_0_32", "vllm"): {
        "waiting": ('vllm:num_requests_waiting_by_reason{reason="capacity"}', 1, 0.0),
        "running": ("vllm:num_requests_running", 1, 0.0),
        "kv_usage": ("vllm:kv_cache_usage_perc", 1, 0.0), "preemptions": ("vllm:num_preemptions_total", 1, 0.0),
        "prompt_tokens": ('vllm:prompt_tokens_by_source_total{source="local_compute"}', 1, 291.0),
        "generation_tokens": ("vllm:generation_tokens_total", 1, 24.0),
        "queue_time": ("vllm:request_queue_time_seconds_sum", 1, 0.00010679899992283026 - 3.392999997231527e-05),
        "compute_time": ("vllm:request_inference_time_seconds_sum", 1, 0.1309995809999691 - 0.06702479299997322),
        "finished": ("vllm:request_success_total", 5, 3.0),
        # the CPU build caches prefixes by default: 291 prompt tokens looked up, none found (three new prompts)
        "prefix_cache_queries": ("vllm:prefix_cache_queries_total", 1, 291.0),
        "prefix_cache_hits": ("vllm:prefix_cache_hits_total", 1, 0.0)},
    ("vllm_v0", "vllm"): {
        "waiting": ("vllm:num_requests_waiting", 1, 1.0), "running": ("vllm:num_requests_running", 1, 4.0),
        "kv_usage": ("vllm:gpu_cache_usage_perc", 1, 0.5)},
    ("tgi", "tgi"): {
        "waiting": ("tgi_queue_size", 1, 4.0), "running": ("tgi_batch_current_size", 1, 16.0),
        "prompt_tokens": ("tgi_request_input_length_sum", 1, 1200.0),
        "generation_tokens": ("tgi_request_generated_tokens_sum", 1, 700.0),
        "queue_time": ("tgi_request_queue_duration_sum", 1, 1.5),
        "compute_time": ("tgi_request_inference_duration_sum", 1, 12.0),
        "finished": ("tgi_request_success", 1, 6.0)},
    ("sglang", "sglang"): {
        "waiting": ("sglang:num_queue_reqs", 1, 2826.0), "running": ("sglang:num_running_reqs", 1, 162.0),
        "kv_usage": ("sglang:token_usage", 1, 0.28), "prompt_tokens": ("sglang:prompt_tokens_total", 1, 2000.0),
        "generation_tokens": ("sglang:generation_tokens_total", 1, 900.0)},
    ("triton", "triton"): {
        "waiting": ("nv_inference_pending_request_count", 2, 7.0),
        "queue_time": ("nv_inference_queue_duration_us", 2, 0.5),
        "compute_time": ("nv_inference_compute_infer_duration_us", 2, 0.8),
        "finished": ("nv_inference_request_success", 2, 40.0)},
}


@pytest.mark.parametrize("fixture, preset", list(EXPECTED), ids=[f for f, _ in EXPECTED])
def test_each_preset_says_which_scraped_series_mean_what(tmp_path, fixture, preset):
    run = load_run(scraped_run(tmp_path / "run", fixture, preset))
    signals = SignalIndex(run.signals, run.signals_meta)
    servers = run_server_series(run, signals)
    expected = EXPECTED[(fixture, preset)]
    assert servers.preset == preset and set(servers.series) == set(expected)
    assert set(servers.missing) == set(STAGE_PRESETS[preset].metrics.roles()) - set(expected)
    edges = np.array([T0, T0 + S, T0 + 2 * S])
    for role, (metric, count, first) in expected.items():
        assert servers.metric[role] == metric and len(servers.names(role)) == count
        assert all(signals.kind(name) == ROLES[role].kind for name in servers.names(role))
        assert servers.binned(role, signals, edges)[0] == pytest.approx(first), role
    assert servers.describe().roles["waiting"].metric == expected["waiting"][0]
    assert server_series(signals.names(), None).series == {} and not servers.has("nothing")


def test_the_analysis_lists_the_series_of_each_role(tmp_path):
    run_dir = scraped_run(tmp_path / "run", "vllm", "vllm")
    section = analyze_run(run_dir)["stages"]["server_metrics"]
    # the recorded page predates vLLM's prefix-cache counters
    assert section["preset"] == "vllm" and section["missing"] == ["prefix_cache_queries", "prefix_cache_hits"]
    assert section["roles"]["kv_usage"] == {
        "metric": "vllm:kv_cache_usage_perc", "kind": "gauge", "unit": "ratio",
        "series": ['prom.vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}',
                   'prom.vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"}']}


def test_presets_are_one_registry_and_metric_maps_name_known_roles():
    assert STAGE_PRESETS.names() == ("reference", "triton", "vllm", "tgi", "sglang", "none")
    assert all(PRESETS[name] is preset.rules for name, preset in STAGE_PRESETS.items())
    assert all(preset.checked_against for name, preset in STAGE_PRESETS.items() if name != "none")
    with pytest.raises(UnknownName, match="unknown stage preset 'trtllm'; known: reference, triton"):
        STAGE_PRESETS["trtllm"]
    with pytest.raises(ValueError, match="unknown metric role 'queue_depth'"):
        MetricMap((("queue_depth", MetricSource(("x",))),))
    assert parse_stages_config({"preset": "vllm"}).tokens is PRESETS["vllm"].tokens
