"""Shared helpers of the receiver tests: hand-built OTLP bodies and posting them."""

from __future__ import annotations

import contextlib
import http.client
import os

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tailscope.rundir import read_json, read_stream, schema
from tailscope.tracing.ingest.receiver import OtlpReceiver

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
ROOT_ID = bytes.fromhex("b7ad6b7169203331")
CHILD_ID = bytes.fromhex("00f067aa0ba902b7")


@contextlib.contextmanager
def running_receiver(run_dir, **options):
    """An OtlpReceiver writing into ``run_dir``, started, and stopped on exit (also on failure)."""
    rx = OtlpReceiver(str(run_dir), **options)
    rx.start()
    try:
        yield rx
    finally:
        rx.stop()


def kv(key: str, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def trace_request(spans: list[Span], service: str = "svc", pid: int = 4242) -> bytes:
    """A serialized ExportTraceServiceRequest with one resource and one scope."""
    resource_spans = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource_spans.resource.attributes.extend([kv("service.name", service), kv("process.pid", pid)])
    return ExportTraceServiceRequest(resource_spans=[resource_spans]).SerializeToString()


def span(name: str, span_id: bytes = ROOT_ID, parent: bytes = b"", start_ns: int = 1_700_000_000_000_000_000,
         end_ns: int = 1_700_000_000_005_000_000, **attrs) -> Span:
    return Span(trace_id=TRACE_ID, span_id=span_id, parent_span_id=parent, name=name, kind=Span.SPAN_KIND_SERVER,
                start_time_unix_nano=start_ns, end_time_unix_nano=end_ns,
                attributes=[kv(k.replace("__", "."), v) for k, v in attrs.items()])


def post(port: int, path: str, body: bytes, content_type: str = "application/x-protobuf",
         headers: dict | None = None, connection: http.client.HTTPConnection | None = None):
    """POST and return (status, headers dict, body bytes)."""
    conn = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type, **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        if connection is None:
            conn.close()


def stored_spans(run_dir: str) -> list[dict]:
    read = read_stream(os.path.join(run_dir, schema.SPANS), schema.SPANS_SCHEMA)
    assert not read.truncated and not read.missing
    return read.table.to_pylist()


def stored_events(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, schema.writer_file(schema.EVENTS, "receiver"))
    return read_stream(path, schema.EVENTS_SCHEMA).table.to_pylist()


def stored_metric_signals(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, schema.writer_file(schema.SIGNALS, "receiver"))
    return read_stream(path, schema.SIGNALS_SCHEMA).table.to_pylist()


def receiver_stats(run_dir: str) -> dict:
    return read_json(os.path.join(run_dir, schema.RECEIVER_STATS))
