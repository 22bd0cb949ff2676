"""A FastAPI service with OpenTelemetry's standard instrumentation (tests only).

Run as ``python tests/fastapi_otel_service.py [--port P]``; it prints
``LISTENING <port>`` once its socket listens. Nothing from tailscope is
imported: ``opentelemetry-instrumentation-fastapi`` makes the SERVER span of
each request (and its ``http send``/``http receive`` children), continuing the
incoming ``traceparent``; the SDK's default ``BatchSpanProcessor`` and OTLP/HTTP
exporter send the spans where ``OTEL_EXPORTER_OTLP_ENDPOINT`` says, with the
headers of ``OTEL_EXPORTER_OTLP_HEADERS`` (e.g. a receiver's bearer token).
The server is uvicorn, on 127.0.0.1 only.

``POST /predict`` does about 3 ms of work in three spans of its own, made with the
OpenTelemetry API as any service would: ``preprocess`` (parsing the body, about 0.5 ms),
``model`` (about 2 ms) and ``postprocess`` (about 0.5 ms), children of the request's SERVER
span, one after the other; it answers a small JSON body.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

import uvicorn
from fastapi import FastAPI, Request
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def busy(seconds: float) -> None:
    """Sleep-free work: the request must take real time on the server's clock."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def build_app() -> FastAPI:
    app = FastAPI()

    tracer = trace.get_tracer("fastapi-otel-service")

    @app.post("/predict")
    async def predict(request: Request) -> dict:
        body = await request.body()
        with tracer.start_as_current_span("preprocess"):
            words = body.split()
            busy(0.0005)
        with tracer.start_as_current_span("model"):
            busy(0.002)
        with tracer.start_as_current_span("postprocess"):
            busy(0.0005)
            return {"bytes": len(body), "words": len(words)}

    FastAPIInstrumentor.instrument_app(app)
    return app


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    provider = TracerProvider(resource=Resource.create({"service.name": "fastapi-otel-service"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(build_app(), log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])  # returns on SIGTERM/SIGINT (uvicorn's own handlers)
    finally:
        provider.shutdown()  # the batch exporter sends what it holds
    return 0


if __name__ == "__main__":
    sys.exit(main())
