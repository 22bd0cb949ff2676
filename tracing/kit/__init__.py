"""The tailscope instrumentation kit: what a Python inference service imports to be explained.

One call sets up tracing (:func:`setup_tracing`); a middleware opens the SERVER
span of each request (:class:`TraceContextMiddleware`, :func:`wsgi_middleware`);
helpers emit the stage spans tailscope's analyzers decompose latency into
(``preprocess``, ``queue_wait``, ``batch_wait``, ``inference``,
``postprocess``), the ``batch`` span of a dynamic batcher, queue-depth
attributes, and GC pauses (:class:`GcPauseReporter`). Span names and
attributes follow docs/architecture.md ("Span conventions").

All explicit times are epoch nanoseconds (int64), as in OTLP. The kit never
touches the global tracer provider: the provider is returned and passed on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanContext, SpanKind
from opentelemetry.util.re import parse_env_headers

from tailscope.tracing.kit.gc_events import GC_PAUSE_SPAN, GcPauseReporter
from tailscope.tracing.kit.http_server import (
    INSTRUMENTATION_NAME,
    SERVER_SPAN_SCOPE_KEY,
    TRACE_CONTEXT_SCOPE_KEY,
    TraceContextMiddleware,
    record_failure,
    wsgi_middleware,
)
from tailscope.tracing.kit.lean import LeanTracerProvider
from tailscope.tracing.kit.lean_export import BatchExporter, GrpcTransport, HttpTransport, Transport

__all__ = [
    "BATCH",
    "BATCH_WAIT",
    "DEFAULT_OTLP_ENDPOINT",
    "DEFAULT_OTLP_GRPC_ENDPOINT",
    "ENGINES",
    "PROTOCOLS",
    "GC_PAUSE_SPAN",
    "INFERENCE",
    "POSTPROCESS",
    "PREPROCESS",
    "QUEUE_WAIT",
    "SERVER_SPAN_SCOPE_KEY",
    "TRACE_CONTEXT_SCOPE_KEY",
    "GcPauseReporter",
    "TraceContextMiddleware",
    "batch_span",
    "batch_wait",
    "get_tracer",
    "inference",
    "postprocess",
    "preprocess",
    "queue_attributes",
    "queue_wait",
    "record_stage",
    "resolve_engine",
    "resolve_protocol",
    "resolve_traces_endpoint",
    "set_queue_depth",
    "setup_tracing",
    "span_context_of",
    "stage",
    "wsgi_middleware",
]

#: Stage span names (docs/architecture.md, "Span conventions").
PREPROCESS = "preprocess"
QUEUE_WAIT = "queue_wait"
BATCH_WAIT = "batch_wait"
INFERENCE = "inference"
POSTPROCESS = "postprocess"
BATCH = "batch"

#: Where spans go when neither an endpoint nor the OTEL_EXPORTER_OTLP_* variables say otherwise.
DEFAULT_OTLP_ENDPOINT = "http://127.0.0.1:4318"
#: The same for OTLP/gRPC (``protocol="grpc"``).
DEFAULT_OTLP_GRPC_ENDPOINT = "http://127.0.0.1:4317"
_TRACES_PATH = "/v1/traces"
#: OTLP transports the kit exports with (values of ``OTEL_EXPORTER_OTLP_PROTOCOL``).
PROTOCOLS = ("http/protobuf", "grpc")

#: Tracing engines of :func:`setup_tracing` (``engine=``, or ``TAILSCOPE_TRACING_ENGINE``).
ENGINES = ("lean", "sdk")
ENGINE_VARIABLE = "TAILSCOPE_TRACING_ENGINE"

#: BatchSpanProcessor settings used unless the standard OTEL_BSP_* variables set them:
#: export at least once a second (the run directory is flushed as often), and
#: queue enough spans for a few seconds of a few hundred requests/s.
_BATCH_PROCESSOR_DEFAULTS = {
    "OTEL_BSP_SCHEDULE_DELAY": ("schedule_delay_millis", 1000),
    "OTEL_BSP_MAX_QUEUE_SIZE": ("max_queue_size", 16384),
}
_DEFAULT_EXPORT_BATCH_SIZE = 512
_INTERNAL = SpanKind.INTERNAL
_DEFAULT_OTLP_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------- setup


def resolve_traces_endpoint(endpoint: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The full OTLP/HTTP traces URL to export to.

    ``endpoint`` is a base URL (``http://host:4318``) or a full traces URL
    (ending in ``/v1/traces``). When it is None the standard variables decide:
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is), then
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL), then :data:`DEFAULT_OTLP_ENDPOINT`.
    """
    if endpoint is None:
        traces_endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if traces_endpoint:
            return traces_endpoint
        endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_ENDPOINT
    if endpoint.rstrip("/").endswith(_TRACES_PATH):
        return endpoint
    return endpoint.rstrip("/") + _TRACES_PATH


def resolve_protocol(protocol: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """``http/protobuf`` or ``grpc``: ``protocol``, else ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``,
    else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``. Raises ValueError for
    anything else (``http/json`` included: the Python SDK has no JSON exporter)."""
    chosen = (protocol or environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
              or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if chosen not in PROTOCOLS:
        raise ValueError(f"unsupported OTLP protocol {chosen!r}; expected one of {', '.join(PROTOCOLS)}")
    return chosen


def resolve_grpc_endpoint(endpoint: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The OTLP/gRPC endpoint: ``endpoint``, else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, else :data:`DEFAULT_OTLP_GRPC_ENDPOINT` (an ``http://``
    URL means no TLS)."""
    return (endpoint or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_GRPC_ENDPOINT)


def otlp_span_exporter(protocol: str, endpoint: str | None, environ: Mapping[str, str] = os.environ) -> SpanExporter:
    """The OTel SDK's OTLP span exporter for ``protocol`` (see :func:`resolve_protocol`)."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        target = resolve_grpc_endpoint(endpoint, environ)
        return GrpcSpanExporter(endpoint=target, insecure=target.startswith("http://") or None)
    return OTLPSpanExporter(endpoint=resolve_traces_endpoint(endpoint, environ))


def _batch_processor_settings(environ: Mapping[str, str]) -> dict[str, int]:
    return {kwarg: value for variable, (kwarg, value) in _BATCH_PROCESSOR_DEFAULTS.items() if variable not in environ}


def resolve_engine(engine: str | None, exporter: SpanExporter | None = None,
                   environ: Mapping[str, str] = os.environ) -> str:
    """``lean`` or ``sdk``: ``engine``, else ``sdk`` when an SDK ``exporter`` is given, else
    ``TAILSCOPE_TRACING_ENGINE``, else ``lean``. Raises ValueError for an unknown engine, or for
    ``lean`` with an SDK exporter (the lean engine exports OTLP only)."""
    chosen = engine or ("sdk" if exporter is not None else environ.get(ENGINE_VARIABLE) or "lean")
    if chosen not in ENGINES:
        raise ValueError(f"unknown tracing engine {chosen!r}; expected one of {', '.join(ENGINES)}")
    if chosen == "lean" and exporter is not None:
        raise ValueError("an SDK span exporter needs engine='sdk'; the lean engine exports OTLP itself")
    return chosen


def _otlp_setting(environ: Mapping[str, str], name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``, else None."""
    return environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or environ.get(f"OTEL_EXPORTER_OTLP_{name}") or None


def otlp_transport(protocol: str, endpoint: str | None, environ: Mapping[str, str] = os.environ) -> Transport:
    """The lean engine's OTLP transport for ``protocol``, honouring the standard ``OTEL_EXPORTER_OTLP_*``
    endpoint, ``TIMEOUT`` (s), ``HEADERS`` and ``COMPRESSION`` (gzip/none) variables."""
    timeout = float(_otlp_setting(environ, "TIMEOUT") or _DEFAULT_OTLP_TIMEOUT_S)
    headers = dict(parse_env_headers(_otlp_setting(environ, "HEADERS") or "", liberal=True))
    compression = (_otlp_setting(environ, "COMPRESSION") or "none").lower()
    options = {"timeout_s": timeout, "headers": headers, "compression": None if compression == "none" else compression}
    if protocol == "grpc":
        return GrpcTransport(resolve_grpc_endpoint(endpoint, environ), **options)
    return HttpTransport(resolve_traces_endpoint(endpoint, environ), **options)


def lean_tracer_provider(
    resource: Resource, protocol: str, endpoint: str | None, environ: Mapping[str, str] = os.environ
) -> LeanTracerProvider:
    """A :class:`~tailscope.tracing.kit.lean.LeanTracerProvider` exporting to the OTLP endpoint; batching
    follows ``OTEL_BSP_SCHEDULE_DELAY`` (ms, default 1000), ``OTEL_BSP_MAX_QUEUE_SIZE`` (16384) and
    ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (512)."""
    batching = BatchExporter(
        otlp_transport(protocol, endpoint, environ),
        resource.attributes,
        max_queue_size=int(environ.get("OTEL_BSP_MAX_QUEUE_SIZE") or _BATCH_PROCESSOR_DEFAULTS["OTEL_BSP_MAX_QUEUE_SIZE"][1]),
        schedule_delay_s=float(environ.get("OTEL_BSP_SCHEDULE_DELAY") or 1000) / 1000,
        max_export_batch_size=int(environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") or _DEFAULT_EXPORT_BATCH_SIZE),
    )
    return LeanTracerProvider(resource.attributes, batching)


def setup_tracing(
    service_name: str,
    endpoint: str | None = None,
    *,
    resource_attributes: Mapping[str, Any] | None = None,
    exporter: SpanExporter | None = None,
    protocol: str | None = None,
    engine: str | None = None,
) -> trace.TracerProvider:
    """Create a TracerProvider exporting this process's spans; it is returned, never set globally.

    The resource carries ``service.name`` and ``process.pid`` (plus
    ``resource_attributes`` and anything in ``OTEL_RESOURCE_ATTRIBUTES``).
    Spans are exported in batches (at least once a second unless
    ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise) over OTLP: HTTP/protobuf at
    :func:`resolve_traces_endpoint` (``endpoint``), or gRPC at
    :func:`resolve_grpc_endpoint` when ``protocol`` (or the standard
    ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``) is ``grpc``.

    ``engine`` (:func:`resolve_engine`): ``lean`` (the default) is
    :class:`~tailscope.tracing.kit.lean.LeanTracerProvider`, a few microseconds per
    span; ``sdk`` is the OpenTelemetry SDK's TracerProvider with a
    BatchSpanProcessor and the SDK's OTLP exporter. Both produce the same spans.
    With ``exporter`` (an SDK ``SpanExporter``, e.g. ``InMemorySpanExporter`` in
    tests) the SDK engine hands each span to it when it ends (SimpleSpanProcessor).

    Call ``provider.shutdown()`` before exiting: it exports queued spans.
    Raises ValueError for an unknown engine or protocol.
    """
    chosen = resolve_engine(engine, exporter)
    attributes = {**(resource_attributes or {}), "service.name": service_name, "process.pid": os.getpid()}
    resource = Resource.create(attributes)
    if chosen == "lean":
        return lean_tracer_provider(resource, resolve_protocol(protocol), endpoint)
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        otlp = otlp_span_exporter(resolve_protocol(protocol), endpoint)
        provider.add_span_processor(BatchSpanProcessor(otlp, **_batch_processor_settings(os.environ)))
    return provider


def get_tracer(tracer_provider: trace.TracerProvider) -> trace.Tracer:
    """The kit's tracer from ``tracer_provider`` (instrumentation scope ``tailscope.tracing.kit``)."""
    return tracer_provider.get_tracer(INSTRUMENTATION_NAME)


# --------------------------------------------------------------------------- stages


def span_context_of(item: SpanContext | Span | otel_context.Context) -> SpanContext:
    """The SpanContext of a SpanContext, a Span, or a Context's current span."""
    if isinstance(item, SpanContext):
        return item
    if isinstance(item, otel_context.Context):
        return trace.get_current_span(item).get_span_context()
    return item.get_span_context()


def stage(
    tracer: trace.Tracer,
    name: str,
    *,
    parent: otel_context.Context | None = None,
    links: Iterable[Link] | None = None,
    **attributes: Any,
) -> AbstractContextManager[Span]:
    """Time a stage as an INTERNAL span named ``name``, made current while the block runs.

    The span is a child of ``parent`` (default: the current context, e.g. the
    SERVER span opened by the middleware). Keyword arguments become span
    attributes; pass dotted names as ``**{"batch.size": 4}``. An exception
    leaving the block is recorded on the span (status ERROR) and re-raised.
    """
    return tracer.start_as_current_span(name, parent, _INTERNAL, attributes or None, links)


def preprocess(
    tracer: trace.Tracer, *, parent: otel_context.Context | None = None, **attributes: Any
) -> AbstractContextManager[Span]:
    """:func:`stage` named ``preprocess`` (decode, tokenise, resize)."""
    return tracer.start_as_current_span(PREPROCESS, parent, _INTERNAL, attributes or None)


def queue_wait(
    tracer: trace.Tracer, *, parent: otel_context.Context | None = None, **attributes: Any
) -> AbstractContextManager[Span]:
    """:func:`stage` named ``queue_wait`` (enqueue → picked into a batch); see :func:`record_stage`
    for the usual case where enqueue and pick happen on different threads."""
    return tracer.start_as_current_span(QUEUE_WAIT, parent, _INTERNAL, attributes or None)


def batch_wait(
    tracer: trace.Tracer, *, parent: otel_context.Context | None = None, **attributes: Any
) -> AbstractContextManager[Span]:
    """:func:`stage` named ``batch_wait`` (picked into a batch → batch starts executing)."""
    return tracer.start_as_current_span(BATCH_WAIT, parent, _INTERNAL, attributes or None)


def inference(
    tracer: trace.Tracer,
    *,
    parent: otel_context.Context | None = None,
    links: Iterable[Link] | None = None,
    **attributes: Any,
) -> AbstractContextManager[Span]:
    """:func:`stage` named ``inference``; give it ``**{"batch.size": n, "batch.id": i}`` and a link to the batch span."""
    return stage(tracer, INFERENCE, parent=parent, links=links, **attributes)


def postprocess(
    tracer: trace.Tracer, *, parent: otel_context.Context | None = None, **attributes: Any
) -> AbstractContextManager[Span]:
    """:func:`stage` named ``postprocess`` (softmax, top-k, serialisation)."""
    return tracer.start_as_current_span(POSTPROCESS, parent, _INTERNAL, attributes or None)


def record_stage(
    tracer: trace.Tracer,
    name: str,
    start_ns: int,
    end_ns: int,
    parent_context: otel_context.Context | None,
    attributes: Mapping[str, Any] | None = None,
    *,
    links: Iterable[Link] | None = None,
) -> SpanContext:
    """Emit an already-finished INTERNAL span with explicit epoch-ns times; return its SpanContext.

    For stages whose start was observed on another thread or earlier, e.g.
    ``queue_wait`` (enqueued in the event loop, picked by the batcher).
    ``parent_context`` None means the current context. Raises ValueError when
    ``end_ns < start_ns``.
    """
    if end_ns < start_ns:
        raise ValueError(f"stage {name!r} ends before it starts: start_ns={start_ns}, end_ns={end_ns}")
    span = tracer.start_span(name, parent_context, _INTERNAL, attributes or None, links, start_ns)
    span.end(end_ns)
    return span.get_span_context()


@contextmanager
def batch_span(
    tracer: trace.Tracer,
    request_contexts: Iterable[SpanContext | Span | otel_context.Context],
    size: int,
    *,
    start_ns: int | None = None,
    **attributes: Any,
) -> Iterator[Span]:
    """Open the span ``batch`` in a trace of its own, linked to each request's span context.

    ``request_contexts`` are the requests' ``inference`` spans (or any span,
    SpanContext or Context per request); invalid contexts are skipped. The span
    carries ``batch.size = size`` plus ``attributes``; it is not made current
    (the requests' stage spans stay children of their own SERVER spans). It
    ends when the block exits; an escaping exception is recorded on it.
    """
    span = tracer.start_span(
        BATCH,
        context=otel_context.Context(),
        kind=SpanKind.INTERNAL,
        attributes={"batch.size": size, **attributes},
        start_time=start_ns,
    )
    add_link = span.add_link  # cheaper than building Link objects for start_span
    for context in map(span_context_of, request_contexts):
        if context.is_valid:
            add_link(context)
    try:
        yield span
    except BaseException as exc:
        record_failure(span, exc)
        raise
    finally:
        span.end()


# --------------------------------------------------------------------------- queue depth


def queue_attributes(depth: int, capacity: int) -> dict[str, int]:
    """``{"queue.depth": depth, "queue.capacity": capacity}`` for a ``queue_wait`` span.

    ``depth`` is the number of requests waiting when this one was enqueued
    (itself included); ``capacity`` is the bound above which requests are rejected.
    """
    return {"queue.depth": depth, "queue.capacity": capacity}


def set_queue_depth(span: Span, depth: int, capacity: int) -> None:
    """Attach ``queue.depth`` and ``queue.capacity`` (see :func:`queue_attributes`) to ``span``."""
    span.set_attributes(queue_attributes(depth, capacity))
