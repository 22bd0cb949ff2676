"""The ``receiver`` section: the OTLP receiver's counters, as it wrote them to receiver.json.

``properties.receiver`` of analyzers/analysis.schema.json; written by tracing/ingest/receiver.py
(``ReceiverStats``, rewritten every second and at stop) and copied into the analysis as it is;
drawn by the report's receiver table (reports/tracing_view.py). Every key is one an older receiver
may not have written: a counter it lacks reads None (not shown), not 0. Keys a newer receiver
adds are not fields here; the report shows them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True)
class Receiver:
    """Spans received, stored, dropped (the ingest queue full) and refused after the run closed;
    GC events, metric points and log records received; export requests (by transport: ``http``,
    ``grpc``) and those rejected by reason (``malformed``, ``oversized``, ``unsupported``,
    ``unauthenticated``); the ports (None: gRPC off), whether a bearer token was required and TLS
    used; the error that stopped the span streams (e.g. disk full) and the spans a retention policy
    did not keep. Counts are totals over the run."""

    spans_received: int | None = written_when_set()
    spans_stored: int | None = written_when_set()
    spans_dropped: int | None = written_when_set()
    spans_refused_after_close: int | None = written_when_set()
    gc_events: int | None = written_when_set()
    requests: int | None = written_when_set()
    requests_by_transport: dict[str, int] | None = written_when_set()
    rejected: dict[str, int] | None = written_when_set()
    metrics_points: int | None = written_when_set()
    logs_records: int | None = written_when_set()
    port: int | None = None
    grpc_port: int | None = None
    auth: Literal["bearer token", "none"] | None = written_when_set()
    tls: bool | None = written_when_set()
    write_error: str | None = written_when_set()
    spans_not_retained: int | None = written_when_set()
