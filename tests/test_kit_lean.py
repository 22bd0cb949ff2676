"""The lean tracing engine: OTLP encoding decoded by the official messages, queue bounds, export failures."""

from __future__ import annotations

import os
import socket
import time
import weakref

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState
from receiver_helpers import running_receiver, stored_spans

from tailscope.tracing import kit
from tailscope.tracing.kit.http_server import asgi_parent_context, extract_trace_context
from tailscope.tracing.kit.lean import LeanTracerProvider
from tailscope.tracing.kit.lean_export import BatchExporter, HttpTransport
from tailscope.tracing.kit.otlp_encode import export_request, resource_message, scope_message

RESOURCE = {"service.name": "lean-test", "process.pid": os.getpid()}


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def receiver(tmp_path):
    with running_receiver(tmp_path, port=0, grpc_port=0) as rx:
        yield rx


def unstarted_exporter(max_queue_size: int = 1000, port: int | None = None) -> BatchExporter:
    """A BatchExporter whose thread is not running, so the test decides when spans are encoded."""
    transport = HttpTransport(f"http://127.0.0.1:{port or closed_port()}/v1/traces", timeout_s=2.0)
    return BatchExporter(transport, RESOURCE, max_queue_size=max_queue_size, schedule_delay_s=3600)


def decoded(exporter: BatchExporter) -> ExportTraceServiceRequest:
    """The export request the exporter's next batch is sent as (taken from its queue)."""
    batch, _ = exporter._next_batch()  # noqa: SLF001 - the bytes the export thread would send
    return ExportTraceServiceRequest.FromString(export_request(resource_message(RESOURCE), batch))


def values(key_values) -> dict:
    out = {}
    for kv in key_values:
        which = kv.value.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in kv.value.array_value.values]
        elif which == "kvlist_value":
            out[kv.key] = {e.key: getattr(e.value, e.value.WhichOneof("value")) for e in kv.value.kvlist_value.values}
        else:
            out[kv.key] = getattr(kv.value, which)
    return out


def test_every_field_round_trips_through_the_official_otlp_messages() -> None:
    exporter = unstarted_exporter()
    tracer = LeanTracerProvider(RESOURCE, exporter).get_tracer("scope.one", "1.2.3")
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1),
                         TraceState([("vendor", "x1")]))
    parent = trace.set_span_in_context(NonRecordingSpan(remote))
    attributes = {"s": "text ü", "b": True, "i": -7, "big": 2**62, "f": 2.5, "raw": b"\x00\xff",
                  "strs": ["a", "b"], "ints": (1, 2), "bools": [False, True], "floats": [0.5],
                  "map": {"k": "v"}, "bad": object(), "mixed": [1, "x"]}
    with tracer.start_as_current_span("root", parent, SpanKind.SERVER, attributes) as root:
        root.add_event("first_token", {"n": 3}, timestamp=1_700_000_000_000_000_123)
        with tracer.start_as_current_span("child") as child:
            child.add_link(root.get_span_context(), {"why": "batch"})
            child.set_status(Status(StatusCode.OK))
        try:
            with tracer.start_as_current_span("failing"):
                raise KeyError("nope")
        except KeyError:
            pass
    other = tracer.start_span("explicit", otel_context.Context(), SpanKind.CLIENT, start_time=10, links=[Link(remote)])
    other.end(end_time=20)
    request = decoded(exporter)

    (resource_spans,) = request.resource_spans
    assert values(resource_spans.resource.attributes) == RESOURCE
    (scope_spans,) = resource_spans.scope_spans
    assert (scope_spans.scope.name, scope_spans.scope.version) == ("scope.one", "1.2.3")
    spans = {span.name: span for span in scope_spans.spans}
    assert list(spans) == ["child", "failing", "root", "explicit"]

    root_pb = spans["root"]
    assert root_pb.trace_id == remote.trace_id.to_bytes(16, "big")
    assert root_pb.parent_span_id == remote.span_id.to_bytes(8, "big")
    assert root_pb.span_id == root.get_span_context().span_id.to_bytes(8, "big")
    assert root_pb.trace_state == "vendor=x1"
    assert root_pb.kind == PbSpan.SPAN_KIND_SERVER
    assert root_pb.flags == 0x300, "HAS_IS_REMOTE | IS_REMOTE: the parent came from a traceparent"
    assert 0 < root_pb.start_time_unix_nano <= root_pb.end_time_unix_nano
    expected = {key: value for key, value in attributes.items() if key not in ("bad", "mixed")}
    expected.update(raw=b"\x00\xff", ints=[1, 2])
    assert values(root_pb.attributes) == expected
    assert root_pb.dropped_attributes_count == 2
    (event,) = root_pb.events
    assert (event.name, event.time_unix_nano, values(event.attributes)) == ("first_token", 1_700_000_000_000_000_123,
                                                                           {"n": 3})
    assert root_pb.status.code == PbStatus.STATUS_CODE_UNSET

    child_pb = spans["child"]
    assert child_pb.parent_span_id == root_pb.span_id and child_pb.flags == 0x100
    assert child_pb.kind == PbSpan.SPAN_KIND_INTERNAL
    (link,) = child_pb.links
    assert (link.trace_id, link.span_id, values(link.attributes)) == (root_pb.trace_id, root_pb.span_id,
                                                                      {"why": "batch"})
    assert link.flags == 0x100 and link.trace_state == "vendor=x1"
    assert child_pb.status.code == PbStatus.STATUS_CODE_OK

    failing = spans["failing"]
    assert (failing.status.code, failing.status.message) == (PbStatus.STATUS_CODE_ERROR, "KeyError: 'nope'")
    (exception,) = failing.events
    exception_attributes = values(exception.attributes)
    assert exception.name == "exception" and exception_attributes["exception.type"] == "KeyError"
    assert "KeyError" in exception_attributes["exception.stacktrace"]

    explicit = spans["explicit"]
    assert (explicit.start_time_unix_nano, explicit.end_time_unix_nano) == (10, 20)
    assert explicit.parent_span_id == b"" and explicit.trace_id != root_pb.trace_id
    assert explicit.kind == PbSpan.SPAN_KIND_CLIENT
    assert explicit.links[0].flags == 0x300


def test_spans_of_several_tracers_are_grouped_by_scope() -> None:
    exporter = unstarted_exporter()
    provider = LeanTracerProvider(RESOURCE, exporter)
    for name in ("a", "b", "a"):
        provider.get_tracer(name).start_span(f"from {name}").end()
    (resource_spans,) = decoded(exporter).resource_spans
    grouped = {s.scope.name: [span.name for span in s.spans] for s in resource_spans.scope_spans}
    assert grouped == {"a": ["from a", "from a"], "b": ["from b"]}
    assert scope_message("a", None) == b"\x0a\x01a"


def test_a_batch_span_links_every_valid_request_context_and_skips_invalid_ones() -> None:
    exporter = unstarted_exporter()
    tracer = kit.get_tracer(LeanTracerProvider(RESOURCE, exporter))
    requests = [tracer.start_span(f"request {n}") for n in range(3)]
    contexts = [requests[0], requests[1].get_span_context(), trace.set_span_in_context(requests[2]),
                trace.INVALID_SPAN_CONTEXT, otel_context.Context()]
    with kit.batch_span(tracer, contexts, 3, start_ns=5, **{"batch.id": 9}) as batch:
        requests[0].add_link(batch.get_span_context(), {"role": "batch"})
        requests[0].add_link(trace.INVALID_SPAN_CONTEXT)
    for request in requests:
        request.end()
    spans = {span.name: span for span in decoded(exporter).resource_spans[0].scope_spans[0].spans}
    batch_pb = spans["batch"]
    assert [(link.trace_id, link.span_id) for link in batch_pb.links] == [
        (spans[f"request {n}"].trace_id, spans[f"request {n}"].span_id) for n in range(3)]
    assert values(batch_pb.attributes) == {"batch.size": 3, "batch.id": 9}
    (link,) = spans["request 0"].links
    assert (link.span_id, values(link.attributes)) == (batch_pb.span_id, {"role": "batch"})


def test_children_of_an_unsampled_parent_are_not_recorded() -> None:
    exporter = unstarted_exporter()
    tracer = LeanTracerProvider(RESOURCE, exporter).get_tracer("t")
    state = TraceState([("vendor", "x1")])
    unsampled = SpanContext(1, 2, True, TraceFlags(TraceFlags.RANDOM_TRACE_ID), state)
    span = tracer.start_span("dropped", trace.set_span_in_context(NonRecordingSpan(unsampled)))
    child = tracer.start_span("grandchild", trace.set_span_in_context(span))
    for dropped in (span, child):
        context = dropped.get_span_context()
        assert not dropped.is_recording() and context.is_valid and not context.is_remote
        assert (context.trace_id, context.trace_flags, context.trace_state) == (1, TraceFlags.RANDOM_TRACE_ID, state)
    assert len({2, span.get_span_context().span_id, child.get_span_context().span_id}) == 3, "new span ids"
    span.end()
    child.end()
    assert exporter.queued == 0


def test_a_queued_span_is_bytes_and_keeps_no_span_object_alive() -> None:
    exporter = unstarted_exporter()
    tracer = LeanTracerProvider(RESOURCE, exporter).get_tracer("t")
    with tracer.start_as_current_span("ended", attributes={"k": "v"}) as span:
        span.add_link(SpanContext(5, 6, False, TraceFlags(1)))
    alive = weakref.ref(span)
    del span
    assert exporter.queued == 1 and alive() is None, "the queue holds the encoding, not the span"
    (resource_spans,) = decoded(exporter).resource_spans
    assert [s.name for s in resource_spans.scope_spans[0].spans] == ["ended"] and exporter.queued == 0


def test_a_span_that_cannot_be_encoded_is_dropped_and_counted_without_raising() -> None:
    class BrokenState(TraceState):
        def to_header(self) -> str:
            raise RuntimeError("cannot serialize")

    exporter = unstarted_exporter()
    tracer = LeanTracerProvider(RESOURCE, exporter).get_tracer("t")
    remote = SpanContext(7, 8, True, TraceFlags(1), BrokenState([("a", "b")]))
    tracer.start_span("unencodable", trace.set_span_in_context(NonRecordingSpan(remote))).end()
    tracer.start_span("fine").end()
    assert exporter.spans_dropped == 1 and exporter.queued == 1


def test_a_full_queue_drops_and_counts_and_the_rest_reaches_the_receiver(receiver) -> None:
    exporter = unstarted_exporter(max_queue_size=5, port=receiver.port)
    provider = LeanTracerProvider(RESOURCE, exporter)
    tracer = provider.get_tracer("t")
    for index in range(8):
        tracer.start_span(f"span {index}").end()
    assert provider.spans_dropped == 3
    provider.shutdown()
    assert provider.spans_exported == 5 and provider.export_failures == 0
    receiver.stop()
    assert sorted(row["name"] for row in stored_spans(receiver.run_dir)) == [f"span {i}" for i in range(5)]


def test_an_unreachable_endpoint_counts_a_failure_and_shutdown_stays_bounded() -> None:
    exporter = BatchExporter(HttpTransport(f"http://127.0.0.1:{closed_port()}/v1/traces", timeout_s=1.0), RESOURCE,
                             schedule_delay_s=0.05)
    provider = LeanTracerProvider(RESOURCE, exporter)
    provider.get_tracer("t").start_span("lost").end()
    deadline = time.monotonic() + 10
    while provider.export_failures == 0:
        assert time.monotonic() < deadline, "the failed export was not counted"
        time.sleep(0.02)
    started = time.monotonic()
    provider.shutdown()
    assert time.monotonic() - started < 3
    assert (provider.spans_exported, provider.spans_dropped) == (0, 1)


def test_engine_resolution() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert kit.resolve_engine(None, environ={}) == "lean"
    assert kit.resolve_engine(None, environ={"TAILSCOPE_TRACING_ENGINE": "sdk"}) == "sdk"
    assert kit.resolve_engine("lean", environ={"TAILSCOPE_TRACING_ENGINE": "sdk"}) == "lean"
    assert kit.resolve_engine(None, InMemorySpanExporter(), environ={}) == "sdk"
    with pytest.raises(ValueError, match="engine='sdk'"):
        kit.resolve_engine("lean", InMemorySpanExporter())
    with pytest.raises(ValueError, match="unknown tracing engine"):
        kit.resolve_engine("fast", environ={})


@pytest.mark.parametrize("headers", [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 "},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=1,b=2"},
    {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"},
    {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
    {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
    {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": "garbage"},
    {},
])
def test_the_fast_traceparent_parser_agrees_with_the_propagator(headers) -> None:
    expected = trace.get_current_span(TraceContextTextMapPropagator().extract(headers)).get_span_context()
    scope = {"headers": [(name.encode(), value.encode()) for name, value in headers.items()]}
    for context in (extract_trace_context(headers), asgi_parent_context(scope)):
        assert trace.get_current_span(context).get_span_context() == expected
