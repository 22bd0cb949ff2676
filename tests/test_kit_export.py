"""The kit's own OTLP export into the real receiver, over HTTP and gRPC."""

from __future__ import annotations

import gc
import json
import os

import pytest
from opentelemetry.trace import SpanKind
from receiver_helpers import receiver_stats, running_receiver, stored_events, stored_spans

from tailscope.tracing import kit


@pytest.fixture
def receiver(tmp_path):
    with running_receiver(tmp_path, port=0, grpc_port=0) as rx:
        yield rx


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_stage_spans_and_gc_pauses_reach_the_receiver(receiver, monkeypatch, protocol):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    port = receiver.grpc_port if protocol == "grpc" else receiver.port
    provider = kit.setup_tracing("kit-export", f"http://127.0.0.1:{port}")
    tracer = kit.get_tracer(provider)
    reporter = kit.GcPauseReporter(provider, flush_interval_s=0.05)
    reporter.start()
    try:
        with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER):
            with kit.preprocess(tracer):
                pass
            with kit.inference(tracer, **{"batch.size": 3}):
                pass
        gc.collect()
    finally:
        reporter.stop()
        provider.shutdown()
    receiver.stop()
    rows = {r["name"]: r for r in stored_spans(receiver.run_dir)}
    assert set(rows) == {"POST /x", "preprocess", "inference"}
    assert {r["pid"] for r in rows.values()} == {os.getpid()}
    assert json.loads(rows["inference"]["attributes"]) == {"batch.size": 3}
    pauses = [e for e in stored_events(receiver.run_dir) if e["kind"] == "gc_pause"]
    assert pauses and all(json.loads(e["attributes"])["pid"] == os.getpid() for e in pauses)
    transport = "grpc" if protocol == "grpc" else "http"
    assert receiver_stats(receiver.run_dir)["requests_by_transport"][transport] >= 1


def test_protocol_resolution():
    assert kit.resolve_protocol(None, {}) == "http/protobuf"
    assert kit.resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    assert kit.resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                       "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}) == "http/protobuf"
    assert kit.resolve_protocol("grpc", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == "grpc"
    with pytest.raises(ValueError, match="http/json"):
        kit.resolve_protocol("http/json", {})
