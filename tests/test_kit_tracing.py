"""Instrumentation kit: tracer setup, stage spans, explicit-time spans, batch spans, queue attributes."""

from __future__ import annotations

import os
import time

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tailscope.tracing import kit


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    provider = kit.setup_tracing("kit-test", exporter=exporter, resource_attributes={"deployment.environment": "test"})
    try:
        yield provider, kit.get_tracer(provider), exporter
    finally:
        provider.shutdown()


def by_name(exporter: InMemorySpanExporter, name: str):
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_setup_tracing_names_the_service_and_process_and_leaves_the_global_provider_alone(exported) -> None:
    provider, tracer, exporter = exported
    assert trace.get_tracer_provider() is not provider
    with kit.stage(tracer, "work"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.resource.attributes["service.name"] == "kit-test"
    assert span.resource.attributes["process.pid"] == os.getpid()
    assert span.resource.attributes["deployment.environment"] == "test"


@pytest.mark.parametrize(
    ("endpoint", "environ", "expected"),
    [
        (None, {}, "http://127.0.0.1:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9999/"}, "http://127.0.0.1:9999/v1/traces"),
        (
            None,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/t"},
            "http://b:2/t",
        ),
        ("http://127.0.0.1:5000", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}, "http://127.0.0.1:5000/v1/traces"),
        ("http://127.0.0.1:5000/v1/traces", {}, "http://127.0.0.1:5000/v1/traces"),
    ],
)
def test_the_traces_endpoint_follows_the_argument_then_the_standard_variables(endpoint, environ, expected) -> None:
    assert kit.resolve_traces_endpoint(endpoint, environ) == expected


def test_stage_helpers_nest_under_the_current_span_with_their_exact_names(exported) -> None:
    _, tracer, exporter = exported
    with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER) as server:
        for helper in (kit.preprocess, kit.queue_wait, kit.batch_wait, kit.inference, kit.postprocess):
            with helper(tracer, **{"request.tokens": 3}):
                pass
    stages = [span for span in exporter.get_finished_spans() if span.name != "POST /x"]
    assert [span.name for span in stages] == ["preprocess", "queue_wait", "batch_wait", "inference", "postprocess"]
    for span in stages:
        assert span.parent.span_id == server.get_span_context().span_id
        assert span.context.trace_id == server.get_span_context().trace_id
        assert span.kind == SpanKind.INTERNAL
        assert span.attributes["request.tokens"] == 3


def test_a_stage_that_raises_is_recorded_as_an_error_and_the_exception_propagates(exported) -> None:
    _, tracer, exporter = exported
    with pytest.raises(KeyError):
        with kit.preprocess(tracer):
            raise KeyError("bad input")
    (span,) = by_name(exporter, "preprocess")
    assert span.status.status_code == StatusCode.ERROR
    assert span.events[0].name == "exception"


def test_record_stage_emits_explicit_epoch_ns_times_under_the_given_parent(exported) -> None:
    _, tracer, exporter = exported
    with tracer.start_as_current_span("POST /x") as server:
        request_context = otel_context.get_current()
    start_ns = time.time_ns()
    attributes = kit.queue_attributes(depth=3, capacity=64)
    recorded = kit.record_stage(tracer, kit.QUEUE_WAIT, start_ns, start_ns + 5_000_000, request_context, attributes)
    (span,) = by_name(exporter, "queue_wait")
    assert (span.start_time, span.end_time) == (start_ns, start_ns + 5_000_000)
    assert span.parent.span_id == server.get_span_context().span_id
    assert span.context == recorded
    assert dict(span.attributes) == {"queue.depth": 3, "queue.capacity": 64}
    with pytest.raises(ValueError):
        kit.record_stage(tracer, kit.QUEUE_WAIT, start_ns, start_ns - 1, request_context)


def test_set_queue_depth_adds_both_queue_attributes(exported) -> None:
    _, tracer, exporter = exported
    with kit.queue_wait(tracer) as span:
        kit.set_queue_depth(span, 7, 256)
    (span,) = by_name(exporter, "queue_wait")
    assert (span.attributes["queue.depth"], span.attributes["queue.capacity"]) == (7, 256)


def test_batch_span_is_its_own_trace_linked_to_every_request(exported) -> None:
    _, tracer, exporter = exported
    requests = []
    for _ in range(3):
        with tracer.start_as_current_span("POST /x") as server:
            requests.append(server)
    with tracer.start_as_current_span("unrelated current span") as current:
        with kit.batch_span(tracer, [requests[0], requests[1].get_span_context(), trace.set_span_in_context(requests[2])], 3) as batch:
            assert trace.get_current_span() is current, "the batch span is not made current"
    (span,) = by_name(exporter, "batch")
    assert span.parent is None
    assert span.context.trace_id not in {request.get_span_context().trace_id for request in requests}
    assert span.attributes["batch.size"] == 3
    assert [link.context for link in span.links] == [request.get_span_context() for request in requests]
    assert span.end_time is not None and batch.get_span_context() == span.context
