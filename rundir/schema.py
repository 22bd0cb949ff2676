"""The run-directory format: file names and Arrow schemas (docs/run-format.md).

This module is the single owner of the format. Every writer (load generator,
OTLP receiver, signal samplers, fault injectors) and every reader (analyzers,
reports) names files and columns through it.

All times are epoch nanoseconds (int64), as in OTLP, so that client records,
server spans and signals join without conversion.
"""

from __future__ import annotations

import pyarrow as pa

from tailscope.rundir.request_record import RequestRecord, arrow_schema

#: Bumped when a file or column changes meaning. Readers accept runs whose
#: major version they know and reject newer majors with a clear message.
FORMAT_VERSION = "1.3"  # 1.1: spans.events; 1.2: requests' token columns, chunks.tokens; 1.3: output kinds, sessions
FORMAT_MAJOR = 1

MANIFEST = "manifest.json"
REQUESTS = "requests.arrow"
SPANS = "spans.arrow"
SIGNALS = "signals.arrow"
SIGNALS_META = "signals.json"
#: Units/kinds of the OTLP metrics the receiver stored (``{"metrics": {name: {...}}}``).
SIGNALS_RECEIVER_META = "signals.receiver.json"
EVENTS = "events.arrow"
RECEIVER_STATS = "receiver.json"
ANALYSIS = "analysis.json"
REPORT = "report.html"

#: One row per request the generator scheduled (sent or not): the fields of
#: :class:`~tailscope.rundir.request_record.RequestRecord`, in order, with their
#: Arrow types (that record type is the columns' one description).
REQUESTS_SCHEMA = arrow_schema(RequestRecord)
#: Where a request's token counts came from: the response's ``usage``; the
#: class's tokenizer (no usage); one token per content chunk (neither). A class
#: without output (embeddings) and without usage counts its prompt with the
#: tokenizer or in ``words``.
TOKEN_COUNT_SOURCES = ("usage", "tokenizer", "chunks", "words")

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
        ("events", pa.string()),  # JSON list of {"name", "t_ns", "attributes"}; null if none (1.1)
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

CHUNKS = "chunks.arrow"
#: One row per chunk (token) of a streamed response (request classes with
#: ``stream: true``), written by the harness: the request's trace id, the
#: chunk's index in its response (0 = first token), when it arrived and (1.2,
#: OpenAI-API classes) how many tokens it carried. For those classes only
#: *content* chunks are rows (not the role-only, finish-only or usage chunks).
#: ``tokens`` null (plain stream classes, runs before 1.2) means 1 token.
#: Not part of ``SCHEMAS`` (it can be large): read it with ``read_stream``
#: over ``table_files(run, CHUNKS)`` (tailscope.analyzers.stats.streaming does).
CHUNKS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("index", pa.int32()),
        ("t_ns", pa.int64()),
        ("tokens", pa.int32()),  # tokens in the chunk (1.2); null: one
    ]
)
#: Per request class, up to 20 distinct errors with their counts, written by the
#: harness's record keeper (tailscope.loadgen.error_samples; every request of a
#: distributed run passes it on the master); absent in runs before 1.2.
ERROR_SAMPLES = "error_samples.json"
#: Writer name of the harness's own signal series (generator CPU, in flight,
#: GC time): ``signals.generator.arrow``, part of the signals table.
GENERATOR_WRITER = "generator"

WINDOWS = "windows.arrow"
#: The harness's record-keeping decisions under a ``retention`` policy (JSON).
RETENTION = "retention.json"

#: Per-window, per-class counts and mergeable latency histograms (harness), written
#: for every run. Windows are aligned to epoch multiples of ``end_ns - start_ns``
#: and hold the requests *scheduled* in them. Rows for the same (start_ns, cls) add
#: up: the harness writes the increments since its last flush, so a killed run
#: loses at most one flush. Histograms are sparse (see tailscope.rundir.histograms).
WINDOWS_SCHEMA = pa.schema(
    [
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("cls", pa.string()),
        ("requests", pa.int64()),  # requests scheduled in the window (errors and dropped included)
        ("ok", pa.int64()),  # no error and an end time
        ("errors", pa.int64()),
        *[(f"err_{kind}", pa.int64()) for kind in ERROR_KINDS],
        ("late", pa.int64()),  # sent (or dropped) more than 1 ms after the scheduled time
        ("kept", pa.int64()),  # of these requests, records written to requests.arrow
        ("latency_bucket", pa.list_(pa.int16())),  # end − scheduled of ok requests
        ("latency_count", pa.list_(pa.int32())),
        ("service_bucket", pa.list_(pa.int16())),  # end − sent of ok requests
        ("service_count", pa.list_(pa.int32())),
        ("lateness_bucket", pa.list_(pa.int16())),  # sent − scheduled of sent requests
        ("lateness_count", pa.list_(pa.int32())),
        ("worker", pa.int32()),
    ]
)

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
    WINDOWS: WINDOWS_SCHEMA,
}
