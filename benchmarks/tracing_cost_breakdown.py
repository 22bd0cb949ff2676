"""Where a traced request's CPU goes, in isolation: the kit's middleware, its stage spans, OTLP encoding.

Complements ``tracing_overhead.py`` (the whole reference target under load,
where the same code costs three to six times as much, see docs/tracing.md).
Here one process, pinned to one CPU, drives the kit's real
``TraceContextMiddleware`` around a trivial ASGI app that makes the reference
target's stage calls (``preprocess`` with an attribute set inside,
``postprocess``, and each batch of 8 concurrent requests through the target's
own ``TracedBatchRunner``: ``queue_wait``, ``batch_wait``, ``inference``
linked to a ``batch`` span, on a stand-in model), on one asyncio loop.
Variants, each timed in ``--requests`` bursts, interleaved over ``--rounds``
rounds (minimum per variant reported, as µs of CPU per request):

* ``app``: the app alone, stage helpers on the API's no-op tracer (as the
  target with tracing off) -- the reference;
* ``<engine> middleware``: the middleware on (its SERVER span recorded and
  exported), stages still on the no-op tracer;
* ``<engine> traced``: middleware and stage spans, through the engine's own
  export path as the kit sets it up (lean: encoded when a span ends, queued,
  batched; sdk: ``BatchSpanProcessor`` and the OTLP exporter's protobuf
  encoding), nothing sent;
* ``<engine> unsampled``: as ``traced`` with every traceparent's sampled flag 0;
* ``<engine> encode``: encoding one burst's spans alone (the share of
  ``traced`` that is encoding: lean ``SpanEncoder.span``, sdk
  ``encode_spans(...).SerializeToString()``).

Printed per engine, in µs of CPU per request: the middleware, the stage spans
(beyond what the no-op helpers cost), the whole traced request, the encoding
share of it and the unsampled request, each also as a ratio of lean to the
SDK. Usage: ``python benchmarks/tracing_cost_breakdown.py [--requests 4000]
[--rounds 9]``. No network: nothing is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailscope.loadgen.tracecontext import new_traceparent
from tailscope.targets.reference.batcher import Batch, PendingRequest
from tailscope.targets.reference.pipeline import TracedBatchRunner
from tailscope.tracing import kit
from tailscope.tracing.kit.http_server import TRACE_CONTEXT_SCOPE_KEY, TraceContextMiddleware
from tailscope.tracing.kit.lean import LeanTracerProvider
from tailscope.tracing.kit.lean_export import BatchExporter
from tailscope.tracing.kit.otlp_encode import SpanEncoder

BATCH = 8
RESOURCE = {"service.name": "breakdown", "process.pid": os.getpid()}
BODY_BYTES = 276


class _Discard:
    """A lean transport that sends nothing."""

    timeout_s = 1.0

    def send(self, body: bytes, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class _EncodeAndDiscard(SpanExporter):
    """An SDK exporter that encodes each batch as the OTLP exporter does, and sends nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans).SerializeToString()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def lean_provider() -> trace.TracerProvider:
    """The lean engine as the kit sets it up (spans encoded when they end, queued, batched), sending nothing."""
    return LeanTracerProvider(RESOURCE, BatchExporter(_Discard(), RESOURCE))


def sdk_provider() -> trace.TracerProvider:
    """The SDK as the kit sets it up (BatchSpanProcessor, OTLP protobuf encoding), sending nothing."""
    provider = TracerProvider(resource=Resource.create(RESOURCE))
    provider.add_span_processor(BatchSpanProcessor(_EncodeAndDiscard(), schedule_delay_millis=1000))
    return provider


def sample_spans(engine: str, requests: int) -> tuple[list, Callable[[list], Any]]:
    """One burst's ended spans, collected, and the function that encodes them as ``engine`` does."""
    if engine == "lean":
        spans: list = []
        exporter = BatchExporter(_Discard(), RESOURCE)
        exporter.submit = spans.append  # keep the span objects instead of encoding them
        provider = LeanTracerProvider(RESOURCE, exporter)
        encoder = SpanEncoder()
        encode = lambda batch: [encoder.span(span) for span in batch]  # noqa: E731
    else:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create(RESOURCE))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        encode = lambda batch: encode_spans(batch).SerializeToString()  # noqa: E731
    asyncio.run(drive(TraceContextMiddleware(StageApp(kit.get_tracer(provider)), provider), scopes(requests, True)))
    provider.shutdown()
    return (spans if engine == "lean" else list(memory.get_finished_spans())), encode


class StageApp:
    """An ASGI app making the reference target's stage calls through the kit, 8 requests per batch.

    ``preprocess`` and ``postprocess`` as the target's app makes them; each
    batch runs through the target's own :class:`TracedBatchRunner` (queue and
    batch waits, inference spans linked to the batch span) on a stand-in model.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._runner = TracedBatchRunner("text", lambda payloads: np.zeros((len(payloads), 4), np.float32),
                                         tracer, queue_capacity=256)
        self._waiting: list[PendingRequest] = []
        self._batch_ids = itertools.count(1)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        tracer = self._tracer
        with kit.preprocess(tracer, **{"request.bytes": BODY_BYTES}) as span:
            span.set_attribute("request.tokens", 55)
        request = PendingRequest(None, scope.get(TRACE_CONTEXT_SCOPE_KEY), time.time_ns(), time.monotonic_ns(),
                                 len(self._waiting) + 1, asyncio.get_running_loop().create_future())
        self._waiting.append(request)
        if len(self._waiting) == BATCH:
            self._run_batch()
        await request.future
        with kit.postprocess(tracer):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    def _run_batch(self) -> None:
        requests, self._waiting = self._waiting, []
        outputs = self._runner(Batch(next(self._batch_ids), requests, time.time_ns()))
        for request, output in zip(requests, outputs):
            request.future.set_result(output)


def http_scope(traceparent: bytes, client_port: int) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/v1/infer/text", "raw_path": b"/v1/infer/text", "query_string": b"", "root_path": "",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", client_port),
            "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                        (b"traceparent", traceparent), (b"content-length", str(BODY_BYTES).encode())]}


def scopes(count: int, sampled: bool) -> list[dict]:
    """``count`` request scopes, each with a new traceparent (every one sampled, or none)."""
    rng = random.Random()
    return [http_scope(new_traceparent(rng, 1.0 if sampled else 0.0)[0].encode(), 40000 + n % 32)
            for n in range(count)]


async def _receive() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: dict) -> None:
    pass


async def drive(app: Callable, requests: list[dict]) -> None:
    for start in range(0, len(requests), BATCH):
        await asyncio.gather(*(app(scope, _receive, _send) for scope in requests[start:start + BATCH]))


def cpu_us_per_request(run: Callable[[], None], count: int) -> float:
    started = time.process_time()
    run()
    return (time.process_time() - started) / count * 1e6


def variants(engine: str, requests: int) -> dict[str, Callable[[], float]]:
    """The timed variants of one engine; each returns µs of CPU per request of one burst."""
    provider = lean_provider() if engine == "lean" else sdk_provider()
    middleware_only = TraceContextMiddleware(StageApp(trace.NoOpTracer()), provider)
    traced = TraceContextMiddleware(StageApp(kit.get_tracer(provider)), provider)
    sampled, unsampled = scopes(requests, True), scopes(requests, False)
    spans, encode = sample_spans(engine, requests)

    def burst(app: Callable, requests_: list[dict]) -> float:
        return cpu_us_per_request(lambda: asyncio.run(drive(app, requests_)), len(requests_))

    return {
        f"{engine} middleware": lambda: burst(middleware_only, sampled),
        f"{engine} traced": lambda: burst(traced, sampled),
        f"{engine} unsampled": lambda: burst(traced, unsampled),
        f"{engine} encode": lambda: cpu_us_per_request(lambda: encode(spans), requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=4000, help="requests per burst (a multiple of 8)")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    requests = max(BATCH, args.requests // BATCH * BATCH)
    plain = scopes(requests, True)
    app = StageApp(trace.NoOpTracer())
    timers = {"app": lambda: cpu_us_per_request(lambda: asyncio.run(drive(app, plain)), requests)}
    timers.update(variants("lean", requests))
    timers.update(variants("sdk", requests))
    best: dict[str, float] = {}
    gc.collect()
    for round_index in range(args.rounds + 1):  # the first round warms up and is not counted
        names = list(timers)
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            cost = timers[name]()
            if round_index:
                best[name] = min(best.get(name, cost), cost)
    print(f"tracing cost in isolation: {requests} requests per burst, {args.rounds} rounds, minimum per variant, "
          f"µs of CPU per request (reference: the app alone, {best['app']:.1f} µs)")
    rows = {}
    for engine in ("lean", "sdk"):
        rows[engine] = {
            "middleware": best[f"{engine} middleware"] - best["app"],
            "stage spans": best[f"{engine} traced"] - best[f"{engine} middleware"],
            "traced request": best[f"{engine} traced"] - best["app"],
            "  of it encoding": best[f"{engine} encode"],
            "unsampled request": best[f"{engine} unsampled"] - best["app"],
        }
    print(f"  {'':18} {'lean':>9} {'sdk':>9} {'lean / sdk':>11}")
    for part in rows["lean"]:
        lean, sdk = rows["lean"][part], rows["sdk"][part]
        print(f"  {part:18} {lean:9.1f} {sdk:9.1f} {lean / sdk if sdk > 0 else float('nan'):11.2f}")
    print(f"  spans per traced request: {1 + 5 + 1 / BATCH:.3f} (SERVER, 5 stages, 1/{BATCH} of a batch span)")


if __name__ == "__main__":
    main()
