"""OTLP/JSON bodies and files made by the OTel SDK's own encoder.

The Python SDK has no OTLP/HTTP JSON exporter, so the JSON is built the way
one would: ``encode_spans`` (the protobuf encoder the OTLP exporters use) →
``google.protobuf.json_format`` → the OTLP JSON mapping's one deviation from
proto3 JSON: trace and span ids as hex, not base64.
"""

from __future__ import annotations

import base64
import json

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node):
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def otlp_json(spans) -> dict:
    """The OTLP/JSON ExportTraceServiceRequest of SDK ``ReadableSpan``s."""
    return _hex_ids(json_format.MessageToDict(encode_spans(spans)))


def record_requests(n: int, service: str = "sdk-service", pid: int = 4321):
    """Finished SDK spans of ``n`` requests: a SERVER span with a ``preprocess`` and an
    ``inference`` child (with an event), plus one ``gc.pause`` span."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": pid}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for i in range(n):
        with tracer.start_as_current_span("POST /v1/infer", kind=trace.SpanKind.SERVER, attributes={"i": i}):
            with tracer.start_as_current_span("preprocess"):
                pass
            with tracer.start_as_current_span("inference", attributes={"batch.size": 2}) as span:
                span.add_event("QUEUE_START", {"depth": i})
    with tracer.start_as_current_span("gc.pause", attributes={"gc.generation": 2, "gc.collected": 10}):
        pass
    provider.shutdown()
    return memory.get_finished_spans()


def write_collector_file(path, span_batches) -> None:
    """A Collector file-exporter file: one ExportTraceServiceRequest (JSON) per line."""
    with open(path, "w", encoding="utf-8") as fh:
        for batch in span_batches:
            fh.write(json.dumps(otlp_json(batch), separators=(",", ":")) + "\n")
