"""Streaming generation, the admin switches, metrics and the resident set of the reference target.

The target runs as a real process; spans arrive over real OTLP/HTTP at the
collector of test_target_service; SSE is read from a real HTTP response.
"""

from __future__ import annotations

import gc
import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from test_target_service import OtlpCollector, TargetProcess, traceparent

from tailscope.targets.reference.gc_load import GcPressure, make_request_garbage
from tailscope.targets.reference.generation import GENERATION_VOCAB, DecoderModel, token_text
from tailscope.targets.reference.resident import ResidentSet


def _stream(port: int, body: dict, headers: dict | None = None) -> tuple[int, list[bytes], list[float]]:
    """POST /v1/generate; (status, SSE events, arrival times in s) read as they arrive."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v1/generate", body=json.dumps(body),
                           headers={"content-type": "application/json", **(headers or {})})
        response = connection.getresponse()
        if response.status != 200:
            return response.status, [response.read()], []
        assert response.getheader("content-type") == "text/event-stream"
        events, times, buffer = [], [], b""
        while True:
            chunk = response.read1(65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                events.append(event)
                times.append(time.monotonic())
        return response.status, events, times
    finally:
        connection.close()


def test_decoder_is_deterministic_and_batches_streams():
    model = DecoderModel(32, seed=3)
    state, last = model.prefill(np.array([0, 5, 9], dtype=np.int32))
    states = np.stack([state, state])
    new_states, tokens = model.step(states, np.array([last, last]))
    assert new_states.shape == (2, 32) and tokens.shape == (2,)
    assert tokens[0] == tokens[1] and 0 <= tokens[0] < GENERATION_VOCAB
    again, tokens_again = DecoderModel(32, seed=3).step(states, np.array([last, last]))
    assert np.array_equal(tokens, tokens_again) and np.allclose(new_states, again)
    assert token_text(0x123) == "lomiren "


def test_generate_streams_one_sse_event_per_token_then_done_with_traced_stages():
    with OtlpCollector() as collector:
        target = TargetProcess(["--decode-max-streams", "8"], collector.url)
        try:
            header, trace_id, _ = traceparent()
            status, events, _ = _stream(target.port, {"prompt": "tell me a story about " * 10, "max_tokens": 12},
                                        {"traceparent": header})
            bodies = [json.loads(e[len(b"data: "):]) for e in events[:-1]]
            with ThreadPoolExecutor(4) as pool:
                concurrent = list(pool.map(lambda i: _stream(target.port, {"prompt": f"p{i}", "max_tokens": 40}),
                                           range(4)))
            bad = _stream(target.port, {"prompt": "x", "max_tokens": 10_000})
            target.terminate_and_wait()
        finally:
            target.close()
        spans = list(collector.spans)
    assert status == 200 and events[-1] == b"data: [DONE]"
    assert [b["index"] for b in bodies] == list(range(12)) and all(b["token"].endswith(" ") for b in bodies)
    assert all(s == 200 and len(e) == 41 for s, e, _ in concurrent)
    assert bad[0] == 400 and b"max_tokens" in bad[1][0]
    mine = {s.name: s for s in spans if s.trace_id == trace_id}
    assert {"POST /v1/generate", "preprocess", "queue_wait", "inference", "prefill", "decode"} <= set(mine)
    inference = mine["inference"]
    assert inference.attributes["gen.tokens"] == 12 and inference.attributes["model.name"] == "generate"
    assert inference.start_ns <= inference.attributes["gen.first_token_ns"] <= inference.end_ns
    assert mine["prefill"].parent_span_id == inference.span_id == mine["decode"].parent_span_id
    assert mine["decode"].attributes["decode.steps"] == 12
    seen = [s.attributes["decode.max_streams_seen"] for s in spans if s.name == "decode"]
    assert max(seen) > 1, "concurrent streams must share decode steps (continuous batching)"


def test_admin_switches_state_and_metrics_endpoint():
    target = TargetProcess(["--no-tracing", "--metrics", "--resident-mb", "8"], None)
    try:
        status, body = target.request("POST", "/admin/io_stall", json.dumps({"kb": 16}).encode())
        assert status == 200 and json.loads(body)["enabled"] is True
        assert target.request("POST", "/v1/infer/text", b"some text")[0] == 200
        state = json.loads(target.request("GET", "/admin/state")[1])
        assert state["io_stall"]["writes"] == 1 and state["resident_bytes"] == 8 * 1024 * 1024
        assert target.request("POST", "/admin/io_stall", b'{"enabled": false}')[0] == 200
        assert target.request("POST", "/admin/gc_pressure", b'{"mb_per_s": "lots"}')[0] == 400
        metrics = target.request("GET", "/metrics")[1].decode()
        assert 'tailscope_target_requests_total{route="/v1/infer/text",status="200"} 1.0' in metrics
        assert 'tailscope_target_batch_size_count{model="text"} 1.0' in metrics
        assert 'tailscope_target_stage_seconds_count{model="text",stage="inference"} 1.0' in metrics
        assert 'tailscope_target_queue_depth{model="text"} 0.0' in metrics
    finally:
        target.close()
    closed = TargetProcess(["--no-tracing", "--no-admin"], None)
    try:
        assert closed.request("GET", "/admin/state")[0] == 404
        assert closed.request("GET", "/metrics")[0] == 404
    finally:
        closed.close()


def test_gc_pressure_makes_full_collections_long_and_stops_when_switched_off():
    pauses: list[tuple[int, float]] = []
    started: dict[int, float] = {}

    def callback(phase, info):
        if phase == "start":
            started[info["generation"]] = time.perf_counter()
        elif info["generation"] in started:
            pauses.append((info["generation"], time.perf_counter() - started.pop(info["generation"])))

    pressure = GcPressure()
    gc.callbacks.append(callback)
    try:
        state = pressure.configure(True, mb_per_s=80, retained_mb=64)
        assert state.enabled and state.retained_objects > 500_000
        time.sleep(3.0)
        during = [p for g, p in pauses if g == 2]
        pressure.configure(False, 0, 0)
        pauses.clear()
        time.sleep(1.0)
        after = [p for g, p in pauses if g == 2]
    finally:
        pressure.close()
        gc.callbacks.remove(callback)
    assert during and max(during) > 0.02, f"gen-2 pauses while on: {during}"
    assert all(p < max(during) / 2 for p in after)
    assert pressure.state().enabled is False and pressure.state().allocated_mb > 20


def test_request_garbage_and_resident_slices():
    assert make_request_garbage(50) == 50
    resident = ResidentSet(4, 64, seed=1)
    assert resident.size_bytes == 4 * 1024 * 1024 and resident.read_slice() == 16
    assert ResidentSet(0, 64).read_slice() == 0
    with pytest.raises(ValueError):
        ResidentSet(-1, 64)
