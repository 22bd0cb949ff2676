"""The span ``pid`` comes from the exporting process's resource: ``process.pid`` (the OpenTelemetry
convention), else vLLM's ``vllm.process_id`` — a string, the only PID vLLM's resource carries
(vllm/tracing/otel.py ``init_otel_tracer``, 0.32). The same on the real server:
tests/real_servers/test_vllm.py."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from receiver_helpers import kv

from tailscope.tracing.ingest.otlp_decode import decode_traces_protobuf


def _export(resource: dict) -> bytes:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="llm_request", kind=Span.SPAN_KIND_SERVER,
                start_time_unix_nano=1_000, end_time_unix_nano=2_000)
    resource_spans = ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])
    resource_spans.resource.attributes.extend([kv(key, value) for key, value in resource.items()])
    return ExportTraceServiceRequest(resource_spans=[resource_spans]).SerializeToString()


# vLLM 0.32's resource, as Resource.create() completes it
VLLM_RESOURCE = {"telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
                 "telemetry.sdk.version": "1.45.2", "vllm.instrumenting_module_name": "vllm.api_server",
                 "vllm.process_id": "8986", "service.name": "unknown_service"}


@pytest.mark.parametrize("resource, pid", [
    (VLLM_RESOURCE, 8986),
    ({**VLLM_RESOURCE, "process.pid": 77}, 77),  # the convention wins where both are given
    ({"service.name": "svc", "process.pid": 4242}, 4242),
    ({**VLLM_RESOURCE, "vllm.process_id": "not-a-pid"}, None),
    ({"service.name": "svc"}, None),
])
def test_the_spans_pid_is_read_from_process_pid_else_vllm_process_id(resource, pid):
    columns = decode_traces_protobuf(_export(resource))
    assert list(columns.pid) == [pid]
