"""The reference target as a real process: HTTP over loopback, spans over real OTLP/HTTP.

The target runs as ``python -m tailscope.targets.reference --port 0`` with
OTEL_EXPORTER_OTLP_ENDPOINT pointing at a small OTLP/HTTP collector served by
this test; its spans are decoded from the protobuf bodies the SDK exporter sent.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SERVER_KIND = 2  # OTLP SpanKind.SPAN_KIND_SERVER
STAGES = ("preprocess", "queue_wait", "batch_wait", "inference", "postprocess")
STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 15.0


# --------------------------------------------------------------------------- OTLP collector


@dataclass(frozen=True)
class CollectedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    resource: dict[str, Any]


def _any_value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


def _decode(request: ExportTraceServiceRequest) -> list[CollectedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _any_value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    CollectedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: _any_value(kv.value) for kv in span.attributes},
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        resource=resource,
                    )
                )
    return spans


class OtlpCollector:
    """An OTLP/HTTP (protobuf) traces endpoint on 127.0.0.1 that keeps every span it receives."""

    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector._lock:
                    collector.spans.extend(_decode(request))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logging
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-collector", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


# --------------------------------------------------------------------------- target process


class TargetProcess:
    """``python -m tailscope.targets.reference`` on a free loopback port, stopped by PID in :meth:`close`."""

    def __init__(self, args: list[str], otlp_url: str | None) -> None:
        env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="200", PYTHONUNBUFFERED="1")
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
        if otlp_url is not None:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_url
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tailscope.targets.reference", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.port = self._read_port()

    def _read_port(self) -> int:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                raise TimeoutError("the target printed no LISTENING line")
        line = self.process.stdout.readline()
        if not line.startswith("LISTENING "):
            raise RuntimeError(f"unexpected first line {line!r}; stderr: {self.process.stderr.read()}")
        return int(line.split()[1])

    def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def terminate_and_wait(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def traceparent() -> tuple[str, str, str]:
    """A sampled W3C traceparent, with its trace id and parent span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


# --------------------------------------------------------------------------- traced run

MAX_BATCH_SIZE = 4
MAX_QUEUE_DELAY_MS = 20.0
QUEUE_DELAY_TOLERANCE_MS = 15.0


@dataclass
class TracedRun:
    pid: int
    exit_code: int
    sent: dict[str, tuple[str, str, int]]  # trace id -> (parent span id, path, status)
    idle_trace_ids: list[str]
    spans: list[CollectedSpan]


def _send_traced(target: TargetProcess, path: str, body: bytes, content_type: str):
    header, trace_id, parent_id = traceparent()
    status, _ = target.request("POST", path, body, {"traceparent": header, "content-type": content_type})
    return trace_id, (parent_id, path, status)


@pytest.fixture(scope="module")
def traced_run() -> TracedRun:
    """One target run: idle requests one at a time, then a concurrent burst; then SIGTERM."""
    with OtlpCollector() as collector:
        target = TargetProcess(
            ["--max-batch-size", str(MAX_BATCH_SIZE), "--max-queue-delay-ms", str(MAX_QUEUE_DELAY_MS)],
            collector.url,
        )
        try:
            sent: dict[str, tuple[str, str, int]] = {}
            idle_trace_ids = []
            for i in range(8):
                text = json.dumps({"text": f"request number {i}: an idle model, nothing else queued"})
                trace_id, record = _send_traced(target, "/v1/infer/text", text.encode(), "application/json")
                sent[trace_id] = record
                idle_trace_ids.append(trace_id)
                time.sleep(0.01)
            bodies = [("/v1/infer/text", ("burst text " * (i + 1)).encode(), "text/plain") for i in range(16)]
            bodies += [("/v1/infer/image", bytes(range(256)) * (12 + i), "application/octet-stream") for i in range(8)]
            with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
                for trace_id, record in pool.map(lambda args: _send_traced(target, *args), bodies):
                    sent[trace_id] = record
            exit_code = target.terminate_and_wait()
        finally:
            target.close()
        return TracedRun(target.process.pid, exit_code, sent, idle_trace_ids, list(collector.spans))


def _spans_of(run: TracedRun, trace_id: str) -> list[CollectedSpan]:
    return [span for span in run.spans if span.trace_id == trace_id]


def test_target_exits_cleanly_on_sigterm_and_serves_every_request(traced_run: TracedRun) -> None:
    assert traced_run.exit_code == 0
    assert {status for _, _, status in traced_run.sent.values()} == {200}


def test_every_stage_span_carries_the_incoming_trace_id_and_nests_in_the_server_span(traced_run: TracedRun) -> None:
    for trace_id, (parent_id, path, _) in traced_run.sent.items():
        spans = _spans_of(traced_run, trace_id)
        servers = [span for span in spans if span.kind == SERVER_KIND]
        assert len(servers) == 1, f"trace {trace_id}: {[s.name for s in spans]}"
        server = servers[0]
        assert server.name == f"POST {path}"
        assert server.parent_span_id == parent_id
        assert server.attributes["http.response.status_code"] == 200
        assert server.resource["service.name"] == "tailscope-target"
        assert server.resource["process.pid"] == traced_run.pid
        stage_names = sorted(span.name for span in spans if span is not server)
        assert stage_names == sorted(STAGES)
        for span in spans:
            if span is server:
                continue
            assert span.parent_span_id == server.span_id, span.name
            assert server.start_ns <= span.start_ns <= span.end_ns <= server.end_ns, span.name


def test_stages_follow_each_other_in_order(traced_run: TracedRun) -> None:
    for trace_id in traced_run.sent:
        by_name = {span.name: span for span in _spans_of(traced_run, trace_id)}
        ordered = [by_name[name] for name in STAGES]
        for earlier, later in zip(ordered, ordered[1:]):
            assert earlier.end_ns <= later.start_ns, (earlier.name, later.name)


def test_batches_never_exceed_max_batch_size_and_link_both_ways(traced_run: TracedRun) -> None:
    batches = {span.span_id: span for span in traced_run.spans if span.name == "batch"}
    inferences = [span for span in traced_run.spans if span.name == "inference"]
    assert len(inferences) == len(traced_run.sent)
    sizes = set()
    for inference in inferences:
        size = inference.attributes["batch.size"]
        assert 1 <= size <= MAX_BATCH_SIZE
        sizes.add(size)
        (link,) = inference.links
        batch = batches[link[1]]
        assert batch.trace_id not in traced_run.sent, "a batch span lives in a trace of its own"
        assert batch.attributes["batch.size"] == size
        assert batch.attributes["batch.id"] == inference.attributes["batch.id"]
        assert (inference.trace_id, inference.span_id) in batch.links
    assert max(sizes) > 1, "the concurrent burst should have been batched"


def test_queue_wait_spans_carry_queue_depth_and_capacity(traced_run: TracedRun) -> None:
    waits = [span for span in traced_run.spans if span.name == "queue_wait"]
    assert len(waits) == len(traced_run.sent)
    for wait in waits:
        assert wait.attributes["queue.capacity"] == 256
        assert 1 <= wait.attributes["queue.depth"] <= 256
    assert max(wait.attributes["queue.depth"] for wait in waits) > 1


def test_with_an_idle_model_no_request_waits_longer_than_the_max_queue_delay(traced_run: TracedRun) -> None:
    for trace_id in traced_run.idle_trace_ids:
        (wait,) = [span for span in _spans_of(traced_run, trace_id) if span.name == "queue_wait"]
        waited_ms = (wait.end_ns - wait.start_ns) / 1e6
        assert waited_ms <= MAX_QUEUE_DELAY_MS + QUEUE_DELAY_TOLERANCE_MS
        assert waited_ms >= MAX_QUEUE_DELAY_MS - 1.0, "an unfilled batch waits for the delay before running"


# --------------------------------------------------------------------------- overload


def test_a_full_queue_answers_429_at_once_and_untraced_target_still_exits_cleanly() -> None:
    target = TargetProcess(
        ["--no-tracing", "--max-batch-size", "1", "--max-queue-size", "2", "--model-extra-delay-ms", "600"],
        otlp_url=None,
    )
    try:
        assert target.request("GET", "/healthz") == (200, b"ok")

        def send(i: int) -> tuple[int, bytes, float]:
            started = time.monotonic()
            status, body = target.request("POST", "/v1/infer/text", f"text {i}".encode())
            return status, body, time.monotonic() - started

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(send, range(8)))
        statuses = [status for status, _, _ in results]
        assert set(statuses) <= {200, 429}
        assert statuses.count(200) >= 3, "one executing plus max_queue_size waiting are served"
        assert statuses.count(429) >= 1
        for status, body, elapsed_s in results:
            if status == 429:
                assert "error" in json.loads(body)
                assert elapsed_s < 0.6, "a rejection does not wait for the model"
        assert target.terminate_and_wait() == 0
    finally:
        target.close()
