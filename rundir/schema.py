"""The run-directory format: file names and Arrow schemas (docs/run-format.md).

This module is the single owner of the format. Every writer (load generator,
OTLP receiver, signal samplers, fault injectors) and every reader (analyzers,
reports) names files and columns through it.

All times are epoch nanoseconds (int64), as in OTLP, so that client records,
server spans and signals join without conversion.
"""

from __future__ import annotations

import pyarrow as pa

#: Bumped when a file or column changes meaning. Readers accept runs whose
#: major version they know and reject newer majors with a clear message.
FORMAT_VERSION = "1.0"
FORMAT_MAJOR = 1

MANIFEST = "manifest.json"
REQUESTS = "requests.arrow"
SPANS = "spans.arrow"
SIGNALS = "signals.arrow"
SIGNALS_META = "signals.json"
EVENTS = "events.arrow"
RECEIVER_STATS = "receiver.json"
ANALYSIS = "analysis.json"
REPORT = "report.html"

#: One row per request the generator scheduled (sent or not).
REQUESTS_SCHEMA = pa.schema(
    [
        ("scheduled_ns", pa.int64()),  # intended send time (open loop) or send time (closed loop)
        ("sent_ns", pa.int64()),  # when the request left the generator
        ("end_ns", pa.int64()),  # last byte received, error or timeout
        ("first_byte_ns", pa.int64()),  # first response byte (TTFB / TTFT); null if none
        ("cls", pa.string()),  # request class name
        ("status", pa.int32()),  # HTTP status; 0 when no response arrived
        ("bytes_out", pa.int64()),
        ("bytes_in", pa.int64()),
        ("trace_id", pa.string()),  # 32 lowercase hex digits, W3C trace id
        ("error_kind", pa.string()),  # null, or http|timeout|refused|reset|dropped|other
        ("error", pa.string()),  # error message, null on success
        ("chunks", pa.int32()),  # streamed chunks received (0 when not streamed)
        ("max_gap_ns", pa.int64()),  # largest inter-chunk gap (streaming), null otherwise
        ("worker", pa.int32()),  # generator worker index (0 for a single process)
    ]
)

#: One row per span received from the target (OTLP) or imported.
SPANS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),  # null for a root span
        ("name", pa.string()),
        ("service", pa.string()),  # resource attribute service.name
        ("kind", pa.int8()),  # OTLP SpanKind (0 unspecified, 1 internal, 2 server, 3 client, ...)
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("status_code", pa.int8()),  # OTLP status: 0 unset, 1 ok, 2 error
        ("attributes", pa.string()),  # JSON object of span attributes
        ("links", pa.string()),  # JSON list of {"trace_id", "span_id"}; null if none
        ("pid", pa.int64()),  # resource attribute process.pid, null if absent
    ]
)

#: Time series in long form. Counters are stored cumulative, with the time of
#: each read, so a rate can be derived over any window.
SIGNALS_SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("series", pa.string()),  # e.g. "host.cpu.busy"; see signals.json for unit and kind
        ("value", pa.float64()),
    ]
)

#: Discrete events with a duration: GC pauses, injected faults (ground truth),
#: outages, generator GC pauses.
EVENTS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # gc_pause | fault | outage | generator_gc | ...
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("source", pa.string()),  # who wrote it: target, generator, injector name
        ("attributes", pa.string()),  # JSON object
    ]
)

#: Error kinds a request record may carry.
ERROR_KINDS = ("http", "timeout", "refused", "reset", "dropped", "other")

def table_files(run_path: str, name: str) -> list[str]:
    """All files of one logical table: ``NAME.arrow`` and ``NAME.<writer>.arrow``.

    Each writing process owns its own file (an Arrow stream has one writer), e.g.
    the receiver writes ``events.receiver.arrow`` beside the harness's
    ``events.arrow``. Readers concatenate them; order is by file name.
    """
    import glob
    import os

    stem = name[: -len(".arrow")]
    exact = os.path.join(run_path, name)
    others = sorted(glob.glob(os.path.join(glob.escape(run_path), stem + ".*.arrow")))
    return ([exact] if os.path.exists(exact) else []) + others


def writer_file(name: str, writer: str | None = None) -> str:
    """File name of ``name``'s table as written by ``writer`` (None: the harness)."""
    return name if not writer else name[: -len(".arrow")] + f".{writer}.arrow"


SCHEMAS = {
    REQUESTS: REQUESTS_SCHEMA,
    SPANS: SPANS_SCHEMA,
    SIGNALS: SIGNALS_SCHEMA,
    EVENTS: EVENTS_SCHEMA,
}
