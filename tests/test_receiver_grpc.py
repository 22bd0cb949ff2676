"""OTLP/gRPC into the receiver: the real OTel SDK gRPC exporters over loopback, limits, counts."""

from __future__ import annotations

import gzip
import json
import threading

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from receiver_helpers import CHILD_ID, receiver_stats, running_receiver, span, stored_metric_signals, stored_spans, trace_request

from tailscope.tracing.ingest.receiver import OtlpReceiver
from tailscope.tracing.ingest.receiver_grpc import service_names

TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
MAX_BODY = 64 * 1024


@pytest.fixture
def receiver(tmp_path):
    with running_receiver(tmp_path, port=0, max_body_bytes=MAX_BODY, queue_size=64, grpc_port=0) as rx:
        yield rx


@pytest.fixture
def channel(receiver):
    with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}",
                               options=[("grpc.max_send_message_length", -1)]) as ch:
        yield ch


def call(channel, method: str, body: bytes, **kwargs):
    """Unary call with raw bytes; returns the status code."""
    try:
        channel.unary_unary(method)(body, timeout=10, **kwargs)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def test_official_service_names():
    assert service_names() == [
        "opentelemetry.proto.collector.trace.v1.TraceService",
        "opentelemetry.proto.collector.metrics.v1.MetricsService",
        "opentelemetry.proto.collector.logs.v1.LogsService",
    ]


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_sdk_grpc_span_exporter_round_trip(receiver, compression):
    from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression

    memory = InMemorySpanExporter()
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{receiver.grpc_port}", insecure=True, timeout=10,
                                compression=Compression.Gzip if compression else None)
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-target", "process.pid": 777}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    try:
        for i in range(20):
            with tracer.start_as_current_span("POST /infer", kind=trace.SpanKind.SERVER) as server:
                server.add_event("QUEUE_START", {"queue.depth": i})
                with tracer.start_as_current_span("inference", attributes={"batch.size": i}):
                    pass
    finally:
        provider.shutdown()
    receiver.stop()
    expected = {format(s.context.span_id, "016x"): s for s in memory.get_finished_spans()}
    rows = stored_spans(receiver.run_dir)
    assert len(rows) == len(expected) == 40
    for row in rows:
        sdk_span = expected[row["span_id"]]
        assert row["trace_id"] == format(sdk_span.context.trace_id, "032x")
        assert (row["start_ns"], row["end_ns"], row["name"]) == (sdk_span.start_time, sdk_span.end_time, sdk_span.name)
        assert json.loads(row["attributes"]) == dict(sdk_span.attributes)
        assert (row["service"], row["pid"]) == ("grpc-target", 777)
        if sdk_span.events:
            (event,) = json.loads(row["events"])
            assert event == {"name": "QUEUE_START", "t_ns": sdk_span.events[0].timestamp,
                             "attributes": dict(sdk_span.events[0].attributes)}
        else:
            assert row["events"] is None
    stats = receiver_stats(receiver.run_dir)
    assert stats["spans_received"] == stats["spans_stored"] == 40
    assert stats["requests_by_transport"] == {"http": 0, "grpc": 40}
    assert stats["grpc_port"] == receiver.grpc_port


def test_sdk_grpc_metric_exporter_and_logs(receiver, channel):
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"127.0.0.1:{receiver.grpc_port}", insecure=True, timeout=10),
        export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[reader])
    try:
        provider.get_meter("test").create_counter("batches").add(3)
        assert reader.force_flush(10_000)
    finally:
        provider.shutdown()
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(
        log_records=[LogRecord(), LogRecord()])])])
    assert call(channel, LOGS, logs.SerializeToString()) == grpc.StatusCode.OK
    receiver.stop()
    assert [r["value"] for r in stored_metric_signals(receiver.run_dir) if r["series"] == "batches"][:1] == [3.0]
    stats = receiver_stats(receiver.run_dir)
    assert stats["logs_records"] == 2 and stats["metrics_points"] >= 1


def test_bad_messages_are_rejected_counted_and_the_server_keeps_serving(receiver, channel):
    assert call(channel, TRACES, b"\xff\xfe garbage") == grpc.StatusCode.INVALID_ARGUMENT
    bad_ids = trace_request([span("x")]).replace(bytes.fromhex("0af7651916cd43dd8448eb211c80319c"), b"\x01" * 16)
    assert call(channel, TRACES, trace_request([span("ok-before")])) == grpc.StatusCode.OK
    assert call(channel, TRACES, trace_request([span("big", payload="x" * 100_000)])) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED
    bomb = trace_request([span("bomb", payload="\x00" * 2_000_000)])
    assert len(gzip.compress(bomb)) < MAX_BODY  # small on the wire, 2 MB inflated
    assert call(channel, TRACES, bomb, compression=grpc.Compression.Gzip) == grpc.StatusCode.RESOURCE_EXHAUSTED
    truncated = trace_request([span("cut")])[:-7]
    assert call(channel, TRACES, truncated) == grpc.StatusCode.INVALID_ARGUMENT
    assert call(channel, TRACES, bad_ids) == grpc.StatusCode.OK  # any 16 bytes are a valid trace id
    assert call(channel, TRACES, trace_request([span("still-alive")])) == grpc.StatusCode.OK
    receiver.stop()
    stats = receiver_stats(receiver.run_dir)
    assert stats["rejected"] == {"malformed": 2, "oversized": 2, "unsupported": 0, "unauthenticated": 0}
    assert stats["requests_by_transport"]["grpc"] == 7
    assert {r["name"] for r in stored_spans(receiver.run_dir)} == {"ok-before", "x", "still-alive"}


def test_full_queue_answers_unavailable_and_counts_dropped_spans(tmp_path, monkeypatch):
    rx = OtlpReceiver(str(tmp_path), port=0, queue_size=1, grpc_port=0)
    writer_busy, release = threading.Event(), threading.Event()
    store = rx._store

    def stalled_store(item):  # a writer stuck on a slow disk
        writer_busy.set()
        release.wait(10)
        store(item)

    monkeypatch.setattr(rx, "_store", stalled_store)
    rx.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}") as channel:
            assert call(channel, TRACES, trace_request([span("s0")])) == grpc.StatusCode.OK
            assert writer_busy.wait(5)
            codes = [call(channel, TRACES, trace_request([span(f"s{i}")])) for i in range(1, 4)]
            assert codes == [grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE]
            two = trace_request([span("s4"), span("s5", span_id=CHILD_ID)])
            assert call(channel, TRACES, two) == grpc.StatusCode.UNAVAILABLE
    finally:
        release.set()
        rx.stop()
    stats = receiver_stats(str(tmp_path))
    assert (stats["spans_received"], stats["spans_stored"], stats["spans_dropped"]) == (6, 2, 4)


def test_busy_grpc_port_fails_start_and_leaves_nothing_bound(tmp_path, receiver):
    second = OtlpReceiver(str(tmp_path / "second"), port=0, grpc_port=receiver.grpc_port)
    with pytest.raises(OSError):
        second.start()
    # The HTTP socket of the failed receiver was closed: a third one can start on free ports.
    third = OtlpReceiver(str(tmp_path / "third"), port=0, grpc_port=0)
    third.start()
    third.stop()


def test_grpc_off_by_default_in_process(tmp_path):
    rx = OtlpReceiver(str(tmp_path), port=0)
    rx.start()
    try:
        assert rx.grpc_port is None and rx.stats()["grpc_port"] is None
    finally:
        rx.stop()
