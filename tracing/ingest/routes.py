"""The OTLP paths the receiver serves and how each decodes and accepts a payload.

Shared by both transports: OTLP/HTTP (:mod:`.receiver`) looks a request's path up
in :data:`ROUTES`; OTLP/gRPC (:mod:`.receiver_grpc`) binds each collector service's
``Export`` to the same route, so a span is decoded and counted the same whichever
transport brought it. Both transports hand what they decode to an :class:`OtlpSink`
(the receiver is one; the shape follows the OpenTelemetry SDK's span processor: the
producer knows only the protocol), so this module and the transports import no receiver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tailscope.tracing.ingest.otlp_decode import (
    MetricPoints,
    SpanColumns,
    count_logs_json,
    count_logs_protobuf,
    decode_metrics_json,
    decode_metrics_protobuf,
    decode_traces_json,
    decode_traces_protobuf,
)
from tailscope.tracing.ingest.receiver_auth import BearerCheck

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class IngestCounters(Protocol):
    """The counters a transport bumps (``receiver.json``'s; thread-safe)."""

    def add(self, key: str, n: int = 1) -> None: ...
    def count_request(self, transport: str) -> None: ...  # transport: "http" | "grpc"
    def reject(self, reason: str) -> None: ...  # reason: unauthenticated | oversized | malformed | ...


class OtlpSink(Protocol):
    """Where an OTLP transport hands decoded payloads, and the rules it serves by
    (:class:`~tailscope.tracing.ingest.receiver.OtlpReceiver` is the one sink)."""

    stats_counter: IngestCounters
    auth: BearerCheck
    max_body_bytes: int  # the largest body accepted, bytes (after gzip inflation too)

    @property
    def closed(self) -> bool: ...  # True once the run's wait for spans is over

    def request_started(self) -> None: ...
    def request_finished(self) -> None: ...

    def enqueue(self, item: object, dropped_spans: int) -> bool:
        """Queue decoded columns; False when refused (counted ``dropped_spans`` spans lost)."""
        ...


@dataclass(frozen=True)
class Route:
    """How one OTLP path decodes each content type, and what it does with the result."""

    decoders: dict[str, Callable[[bytes], object]]
    accept: Callable[[OtlpSink, object], bool]  # False: queue full, answer 503


def _accept_spans(receiver: OtlpSink, columns: SpanColumns) -> bool:
    receiver.stats_counter.add("spans_received", columns.received)
    return receiver.enqueue(columns, dropped_spans=columns.received)


def _accept_metrics(receiver: OtlpSink, points: MetricPoints) -> bool:
    return receiver.enqueue(points, dropped_spans=0)


def _accept_logs(receiver: OtlpSink, records: int) -> bool:
    receiver.stats_counter.add("logs_records", records)
    return True


ROUTES = {
    "/v1/traces": Route({PROTOBUF: decode_traces_protobuf, JSON: decode_traces_json}, _accept_spans),
    "/v1/metrics": Route(
        {PROTOBUF: decode_metrics_protobuf, JSON: decode_metrics_json}, _accept_metrics
    ),
    "/v1/logs": Route({PROTOBUF: count_logs_protobuf, JSON: count_logs_json}, _accept_logs),
}
