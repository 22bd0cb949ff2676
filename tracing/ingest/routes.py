"""The OTLP paths the receiver serves and how each decodes and accepts a payload.

Shared by both transports: OTLP/HTTP (:mod:`.receiver`) looks a request's path up
in :data:`ROUTES`; OTLP/gRPC (:mod:`.receiver_grpc`) binds each collector service's
``Export`` to the same route, so a span is decoded and counted the same whichever
transport brought it. ``accept`` functions take the receiver (its ``stats_counter``
and ``enqueue``) as an argument; this module imports neither transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from tailscope.tracing.ingest.receiver import OtlpReceiver

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@dataclass(frozen=True)
class Route:
    """How one OTLP path decodes each content type, and what it does with the result."""

    decoders: dict[str, Callable[[bytes], object]]
    accept: Callable[[OtlpReceiver, object], bool]  # False: queue full, answer 503


def _accept_spans(receiver: OtlpReceiver, columns: SpanColumns) -> bool:
    receiver.stats_counter.add("spans_received", columns.received)
    return receiver.enqueue(columns, dropped_spans=columns.received)


def _accept_metrics(receiver: OtlpReceiver, points: MetricPoints) -> bool:
    return receiver.enqueue(points, dropped_spans=0)


def _accept_logs(receiver: OtlpReceiver, records: int) -> bool:
    receiver.stats_counter.add("logs_records", records)
    return True


ROUTES = {
    "/v1/traces": Route({PROTOBUF: decode_traces_protobuf, JSON: decode_traces_json}, _accept_spans),
    "/v1/metrics": Route(
        {PROTOBUF: decode_metrics_protobuf, JSON: decode_metrics_json}, _accept_metrics
    ),
    "/v1/logs": Route({PROTOBUF: count_logs_protobuf, JSON: count_logs_json}, _accept_logs),
}
