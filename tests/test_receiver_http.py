"""The OTLP/HTTP receiver in-process: real OTel SDK export, real HTTP on loopback."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time

import pytest
from google.rpc import status_pb2
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from receiver_helpers import (
    CHILD_ID,
    ROOT_ID,
    post,
    receiver_stats,
    running_receiver,
    span,
    stored_events,
    stored_metric_signals,
    stored_spans,
    trace_request,
)
from test_receiver_decode import _metrics_request, json_body

from tailscope.tracing.ingest.receiver import OtlpReceiver


@pytest.fixture
def receiver(tmp_path):
    with running_receiver(tmp_path, port=0, max_body_bytes=64 * 1024, queue_size=64) as rx:
        yield rx


def test_sdk_export_round_trip(receiver):
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "ref-target", "process.pid": 31337}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"http://127.0.0.1:{receiver.port}/v1/traces", timeout=10)))
    tracer = provider.get_tracer("test")
    try:
        for i in range(50):
            with tracer.start_as_current_span("POST /v1/infer/text", kind=trace.SpanKind.SERVER,
                                              attributes={"request.index": i, "request.cls": "short"}):
                with tracer.start_as_current_span("inference", attributes={"batch.size": 4, "ratio": 0.25}) as inner:
                    inner.set_status(trace.Status(trace.StatusCode.ERROR))
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    receiver.stop()
    expected = {format(s.context.span_id, "016x"): s for s in memory.get_finished_spans()}
    rows = stored_spans(receiver.run_dir)
    assert len(rows) == len(expected) == 100
    for row in rows:
        sdk_span = expected[row["span_id"]]
        assert row["trace_id"] == format(sdk_span.context.trace_id, "032x")
        assert row["parent_span_id"] == (format(sdk_span.parent.span_id, "016x") if sdk_span.parent else None)
        assert (row["start_ns"], row["end_ns"]) == (sdk_span.start_time, sdk_span.end_time)
        assert row["name"] == sdk_span.name
        assert json.loads(row["attributes"]) == dict(sdk_span.attributes)
        assert (row["service"], row["pid"]) == ("ref-target", 31337)
        assert row["kind"] == (2 if row["name"].startswith("POST") else 1)
        assert row["status_code"] == (2 if row["name"] == "inference" else 0)
    stats = receiver_stats(receiver.run_dir)
    assert stats["spans_received"] == stats["spans_stored"] == 100
    assert stats["spans_dropped"] == 0 and stats["port"] == receiver.port


def test_json_and_gzip_bodies(receiver):
    status, headers, body = post(receiver.port, "/v1/traces", json_body(), "application/json")
    assert (status, headers["Content-Type"], body) == (200, "application/json", b"{}")
    gz = gzip.compress(trace_request([span("gz-root"), span("gz-child", span_id=CHILD_ID, parent=ROOT_ID)]))
    status, headers, body = post(receiver.port, "/v1/traces", gz, headers={"Content-Encoding": "gzip"})
    assert (status, headers["Content-Type"], body) == (200, "application/x-protobuf", b"")
    receiver.stop()
    rows = {r["name"]: r for r in stored_spans(receiver.run_dir)}
    assert set(rows) == {"preprocess", "gz-root", "gz-child"}
    assert rows["preprocess"]["service"] == "json-svc" and rows["preprocess"]["status_code"] == 2
    assert rows["gz-child"]["parent_span_id"] == ROOT_ID.hex()


def test_bad_requests_are_rejected_and_the_receiver_keeps_serving(receiver):
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    try:
        status, headers, body = post(receiver.port, "/v1/traces", b"\xff\xfe garbage", connection=conn)
        assert status == 400
        assert status_pb2.Status.FromString(body).message  # OTLP error body: google.rpc.Status
        status, _, body = post(receiver.port, "/v1/traces", b"{", "application/json", connection=conn)
        assert status == 400 and "message" in json.loads(body)
        # The same keep-alive connection still works.
        status, _, _ = post(receiver.port, "/v1/traces", trace_request([span("after-400")]), connection=conn)
        assert status == 200
    finally:
        conn.close()
    assert post(receiver.port, "/v1/traces", b"x", "text/plain")[0] == 415
    assert post(receiver.port, "/v1/traces", b"x", headers={"Content-Encoding": "br"})[0] == 415
    assert post(receiver.port, "/v1/elsewhere", b"x")[0] == 404
    assert post(receiver.port, "/v1/traces", b"\x1f\x8b not gzip", headers={"Content-Encoding": "gzip"})[0] == 400
    oversized = trace_request([span("big", payload="x" * 100_000)])
    assert post(receiver.port, "/v1/traces", oversized)[0] == 413
    bomb = gzip.compress(b"\x00" * 1_000_000)  # 1 MB inflated, ~1 KB on the wire
    assert post(receiver.port, "/v1/traces", bomb, headers={"Content-Encoding": "gzip"})[0] == 413
    assert post(receiver.port, "/v1/traces", trace_request([span("still-alive")]))[0] == 200
    receiver.stop()
    stats = receiver_stats(receiver.run_dir)
    assert stats["rejected"] == {"malformed": 3, "oversized": 2, "unsupported": 2, "unauthenticated": 0}
    assert stats["requests"] == 10
    assert {r["name"] for r in stored_spans(receiver.run_dir)} == {"after-400", "still-alive"}


def test_gc_pause_span_is_stored_as_event(receiver):
    gc = span("gc.pause", **{"gc__generation": 2, "gc__collected": 900, "gc__uncollectable": 0})
    assert post(receiver.port, "/v1/traces", trace_request([gc], service="ref-target", pid=55))[0] == 200
    receiver.stop()
    assert stored_spans(receiver.run_dir) == []
    (event,) = stored_events(receiver.run_dir)
    assert event["kind"] == "gc_pause" and event["source"] == "ref-target"
    assert (event["start_ns"], event["end_ns"]) == (gc.start_time_unix_nano, gc.end_time_unix_nano)
    assert json.loads(event["attributes"]) == {"generation": 2, "collected": 900, "uncollectable": 0, "pid": 55}
    stats = receiver_stats(receiver.run_dir)
    assert (stats["gc_events"], stats["spans_received"], stats["spans_stored"]) == (1, 1, 0)


def test_metrics_and_logs_are_accepted(receiver):
    status, _, body = post(receiver.port, "/v1/metrics", _metrics_request())
    assert (status, body) == (200, b"")
    logs = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{}, {}]}]}]}).encode()
    assert post(receiver.port, "/v1/logs", logs, "application/json")[0] == 200
    receiver.stop()
    points = [(r["t_ns"], r["series"], r["value"]) for r in stored_metric_signals(receiver.run_dir)]
    assert points == [(10, "queue.depth", 3.0), (11, 'requests{route="/a"}', 5.0), (11, 'requests{route="/b"}', 7.0)]
    stats = receiver_stats(receiver.run_dir)
    assert (stats["metrics_points"], stats["logs_records"]) == (3, 2)


def test_full_queue_answers_503_and_counts_dropped_spans(tmp_path, monkeypatch):
    rx = OtlpReceiver(str(tmp_path), port=0, queue_size=1)
    writer_busy, release = threading.Event(), threading.Event()
    store = rx._store

    def stalled_store(item):  # a writer stuck on a slow disk
        writer_busy.set()
        release.wait(10)
        store(item)

    monkeypatch.setattr(rx, "_store", stalled_store)
    rx.start()
    try:
        assert post(rx.port, "/v1/traces", trace_request([span("s0")]))[0] == 200
        assert writer_busy.wait(5)  # the writer holds s0; the queue (size 1) is empty
        statuses = [post(rx.port, "/v1/traces", trace_request([span(f"s{i}")]))[0] for i in range(1, 4)]
        assert statuses == [200, 503, 503]
        status, headers, _ = post(rx.port, "/v1/traces", trace_request([span("s4"), span("s5", span_id=CHILD_ID)]))
        assert status == 503 and headers["Retry-After"] == "1"
    finally:
        release.set()
        rx.stop()
    stats = receiver_stats(str(tmp_path))
    assert (stats["spans_received"], stats["spans_stored"], stats["spans_dropped"]) == (6, 2, 4)
    assert len(stored_spans(str(tmp_path))) == 2


def test_stats_file_is_rewritten_while_running(receiver):
    assert post(receiver.port, "/v1/traces", trace_request([span("one")]))[0] == 200
    deadline = time.monotonic() + 3
    while receiver_stats(receiver.run_dir)["spans_stored"] != 1:
        assert time.monotonic() < deadline, "receiver.json not updated within 3 s"
        time.sleep(0.1)
    assert len(stored_spans(receiver.run_dir)) == 1  # flushed (every 0.5 s) while running


def test_an_export_arriving_while_the_receiver_closes_is_refused_and_counted(tmp_path):
    """The run's wait for late spans is over and the receiver stops: an export already on its way
    (headers in, body still coming) is answered 503 "receiver closed", not stored, and counted."""
    rx = OtlpReceiver(str(tmp_path), port=0)
    rx.start()
    body = trace_request([span("late"), span("later", span_id=CHILD_ID)])
    conn = http.client.HTTPConnection("127.0.0.1", rx.port, timeout=10)
    conn.putrequest("POST", "/v1/traces")
    conn.putheader("Content-Type", "application/x-protobuf")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    deadline = time.monotonic() + 5
    while not rx._in_flight:  # the handler has the headers and waits for the body
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stopping = threading.Thread(target=rx.stop)
    stopping.start()
    while not rx.closed:
        time.sleep(0.01)
    conn.send(body)
    response = conn.getresponse()
    assert response.status == 503 and b"receiver closed" in response.read()
    conn.close()
    stopping.join(10)
    stats = receiver_stats(str(tmp_path))
    assert (stats["spans_refused_after_close"], stats["spans_dropped"], stats["spans_stored"]) == (2, 0, 0)
