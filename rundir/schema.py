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
        # OpenAI-API classes (``api:``) only; null for plain HTTP classes and in runs before 1.2.
        # first_byte_ns is then the first content chunk: TTFT = first_byte_ns - scheduled_ns.
        ("prompt_tokens", pa.int32()),  # the server's usage.prompt_tokens, else the client's count
        ("output_tokens", pa.int32()),  # usage.completion_tokens, else tokenizer or chunk count; null: embeddings
        ("token_count_source", pa.string()),  # usage | tokenizer | chunks | words (TOKEN_COUNT_SOURCES)
        ("finish_reason", pa.string()),  # the server's last finish_reason (stop, length, ...); null if none
        ("last_token_ns", pa.int64()),  # last content chunk (the usage chunk and [DONE] do not count)
        ("error_body", pa.string()),  # first 256 bytes: an OpenAI-API class's error JSON; any unstreamed HTTP error's body
        # Multi-turn sessions (arrival.sessions) only; null otherwise and in runs before 1.3.
        ("session_id", pa.int64()),  # the session (conversation) the request is a turn of: random, > 0
        ("turn", pa.int32()),  # the turn's index in its session, 1 = the first
        ("session_turns", pa.int32()),  # turns the session was to have (complete when all ended without error)
        # Kinds of output of generating OpenAI-API classes (1.3; null otherwise and before 1.3):
        # reasoning (reasoning_content / reasoning deltas), answer (content / text), tool calls.
        ("reasoning_tokens", pa.int32()),  # usage.completion_tokens_details.reasoning_tokens, else its chunks' tokens
        ("answer_tokens", pa.int32()),  # tokens of the answer chunks (output - reasoning - tool-call tokens)
        ("first_reasoning_ns", pa.int64()),  # first / last chunk with reasoning text; null: none
        ("last_reasoning_ns", pa.int64()),
        ("first_answer_ns", pa.int64()),  # first / last answer chunk; null: none
        ("last_answer_ns", pa.int64()),
        ("tool_calls", pa.int32()),  # tool calls in the reply (assembled by index)
        ("tool_call_ns", pa.int64()),  # the last tool call complete (its last piece of arguments); null: none
        # Chat classes with `images` (1.3; null otherwise): PNGs sent as image_url data URLs (bytes_out holds them).
        ("images", pa.int32()),  # images in the request
        ("image_pixels", pa.int64()),  # their pixels in total (width x height, summed)
        # rerank / score classes (1.3; null otherwise): one query against several documents.
        ("documents", pa.int32()),  # documents in the request
        ("document_tokens", pa.int64()),  # their tokens in total, by the client's count (words or tokenizer)
    ]
)
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
