"""The plain FastAPI + OpenTelemetry service with stop-the-world GC pauses and, unless asked, no GC events.

tests/fastapi_otel_service.py's app and setup (OpenTelemetry's FastAPI instrumentation, OTLP/HTTP
export to ``OTEL_EXPORTER_OTLP_ENDPOINT``; nothing of tailscope), plus a heap of ``--heap``
self-referencing dicts kept alive and a thread that runs a full collection (``gc.collect()``) over
it: a CPython collection holds the GIL throughout, so every thread of the service — the event loop,
the span exporter — stops for its length (about 100–250 ms for 500,000 objects on the 2-core CI
machine). The pauses start ``--start-s`` after the first request and come every ``--every-s``
seconds, ``--count`` times (0: until the end), in bursts of ``--burst`` collections
``--burst-gap-s`` apart, so a run sees quiet time before and between them.

``--gc-events`` adds the snippet of docs/tracing.md ("GC pauses from any Python service",
tests/gc_pause_snippet.py): each collection is then also sent as a ``gc.pause`` span.

``--gc-metrics`` exports the CPython runtime metric of the OpenTelemetry semantic conventions
instead, as a service with runtime metrics would: ``cpython.gc.collections`` (an ObservableCounter,
unit ``{collection}``, attribute ``cpython.gc.generation`` 0/1/2) counted by a ``gc.callbacks`` hook,
through the SDK's MeterProvider, a PeriodicExportingMetricReader every ``--metrics-interval-ms``
and the OTLP/HTTP metric exporter (to ``OTEL_EXPORTER_OTLP_ENDPOINT``/v1/metrics). No pause times,
no events: the collections per export interval and the spans' stalls are all tailscope gets.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastapi_otel_service  # noqa: E402  (this folder, not a package)

FIRST_REQUEST = threading.Event()
PLAIN_APP = fastapi_otel_service.build_app


def stall_forever(heap_objects: int, start_s: float, every_s: float, count: int, burst: int = 1,
                  burst_gap_s: float = 0.4) -> None:
    """Keep the heap alive; from ``start_s`` after the first request, every ``every_s`` a burst of
    ``burst`` full collections ``burst_gap_s`` apart (``count`` bursts; 0: until the end)."""
    heap = []
    for i in range(heap_objects):
        node = {"i": i}
        node["self"] = node
        heap.append(node)
    FIRST_REQUEST.wait()
    time.sleep(start_s)
    done = 0
    while count == 0 or done < count:
        began = time.perf_counter()
        for i in range(burst):
            if i:
                time.sleep(burst_gap_s)
            at, paused = time.time_ns(), time.perf_counter()
            gc.collect()
            print(f"PAUSE {at} {(time.perf_counter() - paused) * 1e3:.1f} ms", flush=True)
        done += 1
        time.sleep(max(every_s - (time.perf_counter() - began), 0.0))


def export_gc_metrics(interval_ms: int) -> None:
    """Count collections per generation (gc.callbacks) and export them as ``cpython.gc.collections``."""
    from opentelemetry import metrics
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    collections = [0, 0, 0]

    def count(phase: str, info: dict) -> None:
        if phase == "stop":
            collections[info["generation"]] += 1

    gc.callbacks.append(count)

    def observe(options: CallbackOptions):
        return [Observation(n, {"cpython.gc.generation": generation}) for generation, n in enumerate(collections)]

    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval_ms)
    provider = MeterProvider(resource=Resource.create({"service.name": "fastapi-otel-service"}),
                             metric_readers=[reader])
    metrics.set_meter_provider(provider)
    metrics.get_meter("stalling-otel-service").create_observable_counter(
        "cpython.gc.collections", callbacks=[observe], unit="{collection}",
        description="The number of times a generation was collected since interpreter start.")


def build_app():
    """tests/fastapi_otel_service.py's app, noting its first request."""
    app = PLAIN_APP()

    @app.middleware("http")
    async def note_first(request, call_next):
        FIRST_REQUEST.set()
        return await call_next(request)

    return app


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--heap", type=int, default=500_000, help="objects the collection walks")
    parser.add_argument("--start-s", type=float, default=6.0)
    parser.add_argument("--every-s", type=float, default=2.0)
    parser.add_argument("--count", type=int, default=4, help="bursts (0: until the end)")
    parser.add_argument("--burst", type=int, default=1, help="collections per burst")
    parser.add_argument("--burst-gap-s", type=float, default=0.4)
    parser.add_argument("--gc-events", action="store_true", help="send each collection as a gc.pause span")
    parser.add_argument("--gc-metrics", action="store_true",
                        help="export cpython.gc.collections (OpenTelemetry runtime metric) over OTLP")
    parser.add_argument("--metrics-interval-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.gc_metrics:
        export_gc_metrics(args.metrics_interval_ms)
    if args.gc_events:
        import gc_pause_snippet  # noqa: F401  (installs its gc.callbacks hook and thread)
    threading.Thread(target=stall_forever, args=(args.heap, args.start_s, args.every_s, args.count, args.burst,
                                                      args.burst_gap_s),
                     daemon=True, name="stalls").start()
    fastapi_otel_service.build_app = build_app  # main() builds the app through this name
    return fastapi_otel_service.main(["--port", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
