"""Server spans from the kit's ASGI middleware (under uvicorn) and WSGI wrapper (under wsgiref), over loopback."""

from __future__ import annotations

import http.client
import secrets
import socket
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import uvicorn
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tailscope.tracing import kit


def traceparent() -> tuple[str, int, int]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", int(trace_id, 16), int(span_id, 16)


def get(port: int, path: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    provider = kit.setup_tracing("http-test", exporter=exporter)
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


def server_spans(exporter: InMemorySpanExporter, timeout_s: float = 5.0):
    """Finished SERVER spans, waiting for the first one: it ends just after the response was sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = [span for span in exporter.get_finished_spans() if span.kind == SpanKind.SERVER]
        if spans or time.monotonic() > deadline:
            return spans
        time.sleep(0.005)


def assert_server_span_with_stage(exporter: InMemorySpanExporter, name: str, trace_id: int, parent_id: int, status: int):
    assert [span.name for span in server_spans(exporter)] == [name]
    spans = {span.name: span for span in exporter.get_finished_spans()}
    server, stage = spans[name], spans["preprocess"]
    assert server.kind == SpanKind.SERVER
    assert server.context.trace_id == trace_id
    assert server.parent.span_id == parent_id
    assert server.attributes["http.response.status_code"] == status
    assert server.attributes["http.request.method"] == "GET"
    assert stage.context.trace_id == trace_id
    assert stage.parent.span_id == server.context.span_id
    assert server.start_time <= stage.start_time <= stage.end_time <= server.end_time
    return server


# --------------------------------------------------------------------------- ASGI


def make_asgi_app(provider, seen_scopes: list):
    tracer = kit.get_tracer(provider)

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        seen_scopes.append(scope)
        with kit.preprocess(tracer):
            status = 500 if scope["path"] == "/fail" else 200
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return kit.TraceContextMiddleware(app, provider)


@pytest.fixture
def asgi_server(exported):
    provider, exporter = exported
    seen_scopes: list = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(make_asgi_app(provider, seen_scopes), lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield sock.getsockname()[1], exporter, seen_scopes
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_asgi_middleware_continues_the_incoming_trace_and_encloses_stage_spans(asgi_server) -> None:
    port, exporter, seen_scopes = asgi_server
    header, trace_id, parent_id = traceparent()
    assert get(port, "/v1/things?x=1", {"traceparent": header, "user-agent": "kit-test"}) == 200
    server = assert_server_span_with_stage(exporter, "GET /v1/things", trace_id, parent_id, 200)
    assert server.attributes["url.path"] == "/v1/things"
    assert server.attributes["url.query"] == "x=1"
    assert server.attributes["user_agent.original"] == "kit-test"
    assert server.status.status_code == StatusCode.UNSET
    (scope,) = seen_scopes
    assert scope[kit.SERVER_SPAN_SCOPE_KEY].get_span_context() == server.context
    assert trace.get_current_span(scope[kit.TRACE_CONTEXT_SCOPE_KEY]).get_span_context() == server.context


def test_asgi_middleware_marks_5xx_as_error_and_starts_a_trace_without_traceparent(asgi_server) -> None:
    port, exporter, _ = asgi_server
    assert get(port, "/fail", {}) == 500
    (server,) = server_spans(exporter)
    assert server.name == "GET /fail"
    assert server.parent is None
    assert server.status.status_code == StatusCode.ERROR


# --------------------------------------------------------------------------- WSGI


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - silence per-request logging
        return


def test_wsgi_middleware_continues_the_incoming_trace_and_ends_after_the_body(exported) -> None:
    provider, exporter = exported
    tracer = kit.get_tracer(provider)

    def app(environ, start_response):
        with kit.preprocess(tracer):
            start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"streamed "
        assert trace.get_current_span().is_recording(), "the request context is current while streaming"
        yield b"body"

    server = make_server("127.0.0.1", 0, kit.wsgi_middleware(app, provider), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        header, trace_id, parent_id = traceparent()
        assert get(server.server_port, "/items", {"traceparent": header}) == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert_server_span_with_stage(exporter, "GET /items", trace_id, parent_id, 200)
