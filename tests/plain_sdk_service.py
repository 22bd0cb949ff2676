"""A user's own service, instrumented only with the standard OpenTelemetry SDK (tests only).

Run as ``python tests/plain_sdk_service.py --port P [--nodelay]``; it prints
``LISTENING <port>`` once it accepts connections. Nothing from tailscope is
imported: the SDK's default ``BatchSpanProcessor`` and OTLP/HTTP exporter send
the spans wherever ``OTEL_EXPORTER_OTLP_ENDPOINT`` says, the incoming
``traceparent`` is extracted with the SDK's default (W3C) propagator, and each
request has a SERVER span with three children named by the service itself:
``decode``, ``model``, ``encode`` (``model`` has a child ``matmul``).

``POST /predict`` answers 200 with a small JSON body. ``POST /broken`` answers
500 with an HTML page that carries a ``<script>``: the error body a test checks
is shown as text. The server is ``http.server`` with HTTP/1.1 keep-alive; it
writes the response head and body in two sends, and without ``--nodelay`` it
leaves Nagle's algorithm on: the body then waits for the client's delayed ACK
of the head (about 40 ms on Linux) — the classic stall. ``--nodelay`` sets
``TCP_NODELAY`` on every connection.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

#: What /broken answers: untrusted HTML a report must show as text.
HOSTILE_BODY = (b"<html><body><h1>Internal error</h1><script>window.__pwned = 1; document.title = 'pwned'"
                b"</script><img src=x onerror=\"window.__pwned = 2\"></body></html>")


def busy(seconds: float) -> None:
    """Sleep-free work: the stages must take real time on the server's clock."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    tracer = None

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        context = propagate.extract(dict(self.headers))
        with self.tracer.start_as_current_span(f"POST {self.path}", context=context,
                                               kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("http.request.method", "POST")
            if self.path == "/broken":
                self._answer(500, HOSTILE_BODY, "text/html")
                return
            with self.tracer.start_as_current_span("decode"):
                busy(0.0005)
                words = body.decode("utf-8", "replace").split()
            with self.tracer.start_as_current_span("model"):
                busy(0.001)
                with self.tracer.start_as_current_span("matmul"):
                    busy(0.001)
            with self.tracer.start_as_current_span("encode"):
                busy(0.0003)
                out = json.dumps({"words": len(words)}).encode()
            self._answer(200, out, "application/json")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()  # the head goes out in one send ...
        self.wfile.write(body)  # ... the body in another


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--nodelay", action="store_true", help="set TCP_NODELAY (no Nagle stall)")
    args = parser.parse_args(argv)
    provider = TracerProvider(resource=Resource.create({"service.name": "plain-sdk-service"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    Handler.tracer = trace.get_tracer("plain-sdk-service")
    Handler.disable_nagle_algorithm = args.nodelay
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
