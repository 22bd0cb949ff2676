"""HTTP server spans for Python targets: an ASGI middleware and a WSGI wrapper.

Both extract the incoming W3C ``traceparent``/``tracestate`` with
``TraceContextTextMapPropagator`` and open one SERVER span named
``"<METHOD> <path>"`` per request, a child of the caller's span (so the
generator's trace id is the trace id of every span the request produces).
While the application runs, the span's context is the current OpenTelemetry
context (``opentelemetry.context``, carried by ``contextvars``), so stage spans
opened with :func:`tailscope.tracing.kit.stage` nest under it without being
passed anything. The ASGI middleware also exposes the span and its context in
the scope under :data:`SERVER_SPAN_SCOPE_KEY` and :data:`TRACE_CONTEXT_SCOPE_KEY`.

The span ends after the application has returned (ASGI) or after the server
closed the response iterable (WSGI), so it encloses every stage of the request.
Responses with a 5xx status set the span status to ERROR; an exception escaping
the application is recorded on the span and re-raised.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from tailscope.tracing.kit.lean import context_with_span

#: ASGI scope key holding the request's SERVER span.
SERVER_SPAN_SCOPE_KEY = "tailscope.server_span"
#: ASGI scope key holding the OpenTelemetry Context whose current span is the SERVER span.
TRACE_CONTEXT_SCOPE_KEY = "tailscope.trace_context"

INSTRUMENTATION_NAME = "tailscope.tracing.kit"

_PROPAGATED_HEADERS = frozenset({b"traceparent", b"tracestate"})
_PROPAGATOR = TraceContextTextMapPropagator()
#: A version-00 traceparent (lower-case hex, no trailing fields): the common case, parsed without the propagator.
_PLAIN_TRACEPARENT = re.compile(rb"[ \t]*00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})[ \t]*")
_TRACE_FLAGS = [TraceFlags(flags) for flags in range(256)]
_new_tuple = tuple.__new__


def _plain_parent(traceparent: bytes) -> otel_context.Context | None:
    """The Context of a plain version-00 ``traceparent`` value; None when it is not one (or invalid)."""
    match = _PLAIN_TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not (trace_id and span_id):
        return None
    # SpanContext(trace_id, span_id, is_remote=True, flags) without re-checking what the match guarantees.
    parent = _new_tuple(SpanContext, (trace_id, span_id, True, _TRACE_FLAGS[int(match[3], 16)],
                                      DEFAULT_TRACE_STATE, True))
    return context_with_span(NonRecordingSpan(parent), otel_context.Context())


def extract_trace_context(carrier: Mapping[str, str]) -> otel_context.Context:
    """The parent Context of a request from its W3C headers (``carrier`` keys lower-case).

    Same result as ``TraceContextTextMapPropagator().extract(carrier)``; a
    plain version-00 ``traceparent`` without ``tracestate`` is parsed directly
    (several times cheaper), anything else goes through the propagator.
    """
    traceparent = carrier.get("traceparent")
    if traceparent is not None and "tracestate" not in carrier:
        context = _plain_parent(traceparent.encode("latin-1"))
        if context is not None:
            return context
    return _PROPAGATOR.extract(carrier)


def asgi_parent_context(scope: Mapping[str, Any]) -> otel_context.Context:
    """:func:`extract_trace_context` of an ASGI scope's headers, reading them once."""
    traceparent = None
    for name, value in scope.get("headers", ()):
        lowered = name.lower()
        if lowered == b"traceparent":
            traceparent = value
        elif lowered == b"tracestate":
            traceparent = None
            break
    else:
        if traceparent is not None:
            context = _plain_parent(traceparent)
            if context is not None:
                return context
    return _PROPAGATOR.extract(asgi_trace_headers(scope))


def server_span_name(method: str, path: str) -> str:
    """The SERVER span name for a request: ``"<METHOD> <path>"``, e.g. ``"POST /v1/infer/text"``."""
    return f"{method} {path}"


def record_http_status(span: Span, status_code: int) -> None:
    """Set ``http.response.status_code`` on ``span``; a 5xx status marks the span as ERROR."""
    span.set_attribute("http.response.status_code", status_code)
    if status_code >= 500:
        span.set_status(Status(StatusCode.ERROR, f"HTTP {status_code}"))


def record_failure(span: Span, exc: BaseException) -> None:
    """Record an exception that escaped the application and mark the span as ERROR."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


# --------------------------------------------------------------------------- ASGI


def asgi_trace_headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """The W3C trace-context headers of an ASGI HTTP scope, as a ``{name: value}`` carrier."""
    carrier: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        lowered = name.lower()
        if lowered in _PROPAGATED_HEADERS:
            carrier[lowered.decode("latin-1")] = value.decode("latin-1")
    return carrier


def asgi_request_attributes(scope: Mapping[str, Any]) -> dict[str, Any]:
    """Semantic-convention ``http.*``/``url.*``/``server.*``/``client.*`` attributes of an ASGI scope."""
    attributes: dict[str, Any] = {
        "http.request.method": scope["method"],
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    query = scope.get("query_string", b"")
    if query:
        attributes["url.query"] = query.decode("latin-1")
    server = scope.get("server")
    if server:
        attributes["server.address"] = str(server[0])
        if server[1] is not None:
            attributes["server.port"] = int(server[1])
    client = scope.get("client")
    if client:
        attributes["client.address"] = str(client[0])
        attributes["client.port"] = int(client[1])
    for name, value in scope.get("headers", ()):
        if name.lower() == b"user-agent":
            attributes["user_agent.original"] = value.decode("latin-1")
            break
    return attributes


class TraceContextMiddleware:
    """ASGI middleware: one SERVER span per HTTP request, child of the incoming ``traceparent``.

    ``tracer_provider`` is used explicitly (the global provider is never read).
    Non-HTTP scopes (``lifespan``, ``websocket``) pass through untouched.
    """

    def __init__(self, app: Callable[..., Any], tracer_provider: trace.TracerProvider) -> None:
        self._app = app
        self._tracer = tracer_provider.get_tracer(INSTRUMENTATION_NAME)

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        parent = asgi_parent_context(scope)
        span = self._tracer.start_span(server_span_name(scope["method"], scope["path"]), parent, SpanKind.SERVER)
        if span.is_recording():  # an unsampled request costs no attributes
            span.set_attributes(asgi_request_attributes(scope))
        request_context = context_with_span(span, parent)
        traced_scope = {**scope, SERVER_SPAN_SCOPE_KEY: span, TRACE_CONTEXT_SCOPE_KEY: request_context}

        # The span ends when the last body chunk is handed to the server, not
        # when the app returns: the client may have the whole response by then,
        # and the server span must fit inside the client's view of the request.
        response_done_ns: list[int] = []

        def send_recording_status(message: dict[str, Any]) -> Any:
            # A plain function returning the server's awaitable: no coroutine of its own per message.
            kind = message["type"]
            if kind == "http.response.body":
                if not message.get("more_body", False):
                    response_done_ns.append(time.time_ns())
            elif kind == "http.response.start":
                record_http_status(span, int(message["status"]))
            return send(message)

        token = otel_context.attach(request_context)
        try:
            await self._app(traced_scope, receive, send_recording_status)
        except BaseException as exc:
            record_failure(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end(end_time=response_done_ns[0] if response_done_ns else None)


# --------------------------------------------------------------------------- WSGI


class _EnvironGetter(Getter[Mapping[str, Any]]):
    """Reads propagation headers from a WSGI environ (``traceparent`` → ``HTTP_TRACEPARENT``)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get("HTTP_" + key.upper().replace("-", "_"))
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [k[5:].lower().replace("_", "-") for k in carrier if k.startswith("HTTP_")]


_ENVIRON_GETTER = _EnvironGetter()


def wsgi_request_attributes(environ: Mapping[str, Any]) -> dict[str, Any]:
    """Semantic-convention HTTP attributes of a WSGI environ."""
    attributes: dict[str, Any] = {
        "http.request.method": environ.get("REQUEST_METHOD", "GET"),
        "url.path": environ.get("PATH_INFO", "") or "/",
        "url.scheme": environ.get("wsgi.url_scheme", "http"),
    }
    if environ.get("QUERY_STRING"):
        attributes["url.query"] = environ["QUERY_STRING"]
    if environ.get("SERVER_NAME"):
        attributes["server.address"] = environ["SERVER_NAME"]
    if str(environ.get("SERVER_PORT", "")).isdigit():
        attributes["server.port"] = int(environ["SERVER_PORT"])
    if environ.get("REMOTE_ADDR"):
        attributes["client.address"] = environ["REMOTE_ADDR"]
    protocol = str(environ.get("SERVER_PROTOCOL", ""))
    if protocol.startswith("HTTP/"):
        attributes["network.protocol.version"] = protocol[5:]
    if environ.get("HTTP_USER_AGENT"):
        attributes["user_agent.original"] = environ["HTTP_USER_AGENT"]
    return attributes


class _TracedResponse:
    """Response iterable that keeps the request context current while iterating and ends the span on close()."""

    def __init__(self, body: Iterable[bytes], span: Span, request_context: otel_context.Context) -> None:
        self._body = body
        self._span = span
        self._context = request_context

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._body)
        while True:
            token = otel_context.attach(self._context)
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except BaseException as exc:
                record_failure(self._span, exc)
                raise
            finally:
                otel_context.detach(token)
            yield chunk

    def close(self) -> None:
        try:
            close_body = getattr(self._body, "close", None)
            if close_body is not None:
                close_body()
        finally:
            self._span.end()


def wsgi_middleware(app: Callable[..., Any], tracer_provider: trace.TracerProvider) -> Callable[..., Any]:
    """Wrap a WSGI application so each request gets a SERVER span, child of the incoming ``traceparent``.

    The span ends when the server closes the response iterable (PEP 3333
    guarantees ``close()`` is called), so it covers streaming bodies too.
    """
    tracer = tracer_provider.get_tracer(INSTRUMENTATION_NAME)

    def traced_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        parent = _PROPAGATOR.extract(environ, getter=_ENVIRON_GETTER)
        attributes = wsgi_request_attributes(environ)
        span = tracer.start_span(
            server_span_name(attributes["http.request.method"], attributes["url.path"]),
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        request_context = trace.set_span_in_context(span, parent)

        def start_response_recording_status(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            record_http_status(span, int(status.split(" ", 1)[0]))
            return start_response(status, headers, exc_info)

        token = otel_context.attach(request_context)
        try:
            body = app(environ, start_response_recording_status)
        except BaseException as exc:
            record_failure(span, exc)
            span.end()
            raise
        finally:
            otel_context.detach(token)
        return _TracedResponse(body, span, request_context)

    return traced_app
