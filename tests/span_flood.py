"""A span flood from the real OpenTelemetry SDK: ``python span_flood.py ENDPOINT SECONDS``.

Creates spans as fast as one thread can for SECONDS and exports them with the
SDK's BatchSpanProcessor and OTLP/HTTP exporter (batches of 512, 10 ms
schedule delay) to ENDPOINT (e.g. http://127.0.0.1:4318/v1/traces). Prints
``FLOOD <spans created>`` at the end. Used by the receiver-pressure tests.
"""

from __future__ import annotations

import sys
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main() -> int:
    endpoint, seconds = sys.argv[1], float(sys.argv[2])
    provider = TracerProvider(resource=Resource.create({"service.name": "flood"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint, timeout=2), max_queue_size=200_000,
        max_export_batch_size=512, schedule_delay_millis=10))
    tracer = provider.get_tracer("flood")
    created = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(200):
            with tracer.start_as_current_span("flood", attributes={"i": created, "pad": "x" * 200}):
                created += 1
    provider.shutdown()
    print(f"FLOOD {created}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
