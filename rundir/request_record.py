"""One request's record: the type of a ``requests.arrow`` row, and the durations derived from it.

:class:`RequestRecord` is the single description of the request table: its
fields, in order, with their Arrow types (``Annotated``), *are*
:data:`tailscope.rundir.schema.REQUESTS_SCHEMA` (derived from it by
:func:`arrow_schema`). One record travels, unchanged, from the generator's
:class:`~tailscope.loadgen.recorder.Recorder` through the record keeper (or a
worker's column buffer and the master's merge) to the Arrow writer
(:meth:`tailscope.rundir.Appender.append_record`).

A NamedTuple (not a dataclass) because it is built once per request on the
generator's hot path: keyword construction of the 35 fields costs ~2.8 µs
against ~6.6 µs for a frozen slotted dataclass (Python 3.11, this repo's CI
machine; docs/loadgen.md), and being a tuple it goes into the writer's
columns with one ``zip``.

The three durations of a request (DESIGN.md, decision 3) are defined here
once, for Python ints and numpy int64 arrays alike, all in ns:
:func:`latency_ns` (``end − scheduled``: time waiting in the generator counts,
so no coordinated omission), :func:`service_ns` (``end − sent``) and
:func:`lateness_ns` (``sent − scheduled``). The live statistics, the windows'
histograms, the worker merge and the analyzers all call them.
"""

from __future__ import annotations

import typing
from typing import Annotated, NamedTuple

import pyarrow as pa

# Column types: an Arrow type per field; ``| None`` where the column is nullable in practice.
_I32 = Annotated[int, pa.int32()]
_I64 = Annotated[int, pa.int64()]
_STR = Annotated[str, pa.string()]
_I32N = Annotated[int | None, pa.int32()]
_I64N = Annotated[int | None, pa.int64()]
_STRN = Annotated[str | None, pa.string()]


class RequestRecord(NamedTuple):
    """One row of ``requests.arrow``: one request the generator scheduled (sent or not).

    Times are epoch ns; sizes bytes; token counts tokens. Field order is the
    file's column order (docs/run-format.md documents each column).
    """

    scheduled_ns: _I64  # intended send time (open loop) or send time (closed loop)
    sent_ns: _I64N  # when the request left the generator; None: never sent (error_kind "dropped")
    end_ns: _I64  # last byte received, error or timeout
    first_byte_ns: _I64N  # first response byte (TTFB / TTFT); null if none
    cls: _STR  # request class name
    status: _I32  # HTTP status; 0 when no response arrived
    bytes_out: _I64
    bytes_in: _I64
    trace_id: _STRN  # 32 lowercase hex digits, W3C trace id
    error_kind: _STRN  # null, or http|timeout|refused|reset|dropped|other
    error: _STRN  # error message, null on success
    chunks: _I32 = 0  # streamed chunks received (0 when not streamed)
    max_gap_ns: _I64N = None  # largest inter-chunk gap (streaming), null otherwise
    worker: _I32 = 0  # generator worker index (0 for a single process)
    # OpenAI-API classes (``api:``) only; null for plain HTTP classes and in runs before 1.2.
    # first_byte_ns is then the first content chunk: TTFT = first_byte_ns - scheduled_ns.
    prompt_tokens: _I32N = None  # the server's usage.prompt_tokens, else the client's count
    output_tokens: _I32N = None  # usage.completion_tokens, else tokenizer or chunk count; null: embeddings
    token_count_source: _STRN = None  # usage | tokenizer | chunks | words (schema.TOKEN_COUNT_SOURCES)
    finish_reason: _STRN = None  # the server's last finish_reason (stop, length, ...); null if none
    last_token_ns: _I64N = None  # last content chunk (the usage chunk and [DONE] do not count)
    error_body: _STRN = None  # first 256 bytes: an OpenAI-API class's error JSON; any unstreamed HTTP error's body
    # Multi-turn sessions (arrival.sessions) only; null otherwise and in runs before 1.3.
    session_id: _I64N = None  # the session (conversation) the request is a turn of: random, > 0
    turn: _I32N = None  # the turn's index in its session, 1 = the first
    session_turns: _I32N = None  # turns the session was to have (complete when all ended without error)
    # Kinds of output of generating OpenAI-API classes (1.3; null otherwise and before 1.3):
    # reasoning (reasoning_content / reasoning deltas), answer (content / text), tool calls.
    reasoning_tokens: _I32N = None  # usage.completion_tokens_details.reasoning_tokens, else its chunks' tokens
    answer_tokens: _I32N = None  # tokens of the answer chunks (output - reasoning - tool-call tokens)
    first_reasoning_ns: _I64N = None  # first / last chunk with reasoning text; null: none
    last_reasoning_ns: _I64N = None
    first_answer_ns: _I64N = None  # first / last answer chunk; null: none
    last_answer_ns: _I64N = None
    tool_calls: _I32N = None  # tool calls in the reply (assembled by index)
    tool_call_ns: _I64N = None  # the last tool call complete (its last piece of arguments); null: none
    # Chat classes with `images` (1.3; null otherwise): PNGs sent as image_url data URLs (bytes_out holds them).
    images: _I32N = None  # images in the request
    image_pixels: _I64N = None  # their pixels in total (width x height, summed)
    # rerank / score classes (1.3; null otherwise): one query against several documents.
    documents: _I32N = None  # documents in the request
    document_tokens: _I64N = None  # their tokens in total, by the client's count (words or tokenizer)


#: The fields of a plain HTTP request's record: the first 14; the rest (OpenAI-API, sessions,
#: output kinds, images, ranking) are null for it.
HTTP_FIELDS = RequestRecord._fields[:14]
_NULL_REST = (None,) * (len(RequestRecord._fields) - len(HTTP_FIELDS))
_tuple_new = tuple.__new__


def http_record(scheduled_ns: int, sent_ns: int | None, end_ns: int, first_byte_ns: int | None, cls: str,
                status: int, bytes_out: int, bytes_in: int, trace_id: str | None, error_kind: str | None,
                error: str | None, chunks: int = 0, max_gap_ns: int | None = None, worker: int = 0,
                error_body: str | None = None) -> RequestRecord:
    """The record of a plain HTTP request (every later field null but ``error_body``): equal to
    ``RequestRecord(...)`` with the same keywords, built in ~0.8 µs instead of ~2.1 µs (the
    35-parameter keyword call), since the generator builds one per request (docs/loadgen.md)."""
    if error_body is not None:
        return RequestRecord(scheduled_ns, sent_ns, end_ns, first_byte_ns, cls, status, bytes_out, bytes_in,
                             trace_id, error_kind, error, chunks, max_gap_ns, worker, error_body=error_body)
    return _tuple_new(RequestRecord, (scheduled_ns, sent_ns, end_ns, first_byte_ns, cls, status, bytes_out,
                                      bytes_in, trace_id, error_kind, error, chunks, max_gap_ns, worker) + _NULL_REST)


#: The output-kind fields, in order (what ``OpenAIReply.kinds()`` returns).
KIND_FIELDS = ("reasoning_tokens", "answer_tokens", "first_reasoning_ns", "last_reasoning_ns",
               "first_answer_ns", "last_answer_ns", "tool_calls", "tool_call_ns")


def arrow_schema(record_type: type = RequestRecord) -> pa.Schema:
    """The Arrow schema of a NamedTuple record type: each field, in order, with the Arrow
    type of its ``Annotated`` annotation (every column nullable, as Arrow's default)."""
    hints = typing.get_type_hints(record_type, include_extras=True)
    return pa.schema([(name, hints[name].__metadata__[0]) for name in record_type._fields])


def latency_ns(scheduled_ns, end_ns):
    """A request's latency, ns: ``end − scheduled`` (from the *scheduled* send time, so
    waiting in the generator counts). Ints or numpy int64 arrays (element-wise)."""
    return end_ns - scheduled_ns


def service_ns(sent_ns, end_ns):
    """A request's service time, ns: ``end − sent``. Ints or numpy int64 arrays."""
    return end_ns - sent_ns


def lateness_ns(scheduled_ns, sent_ns):
    """How late a request left the generator, ns: ``sent − scheduled``. Ints or numpy int64 arrays."""
    return sent_ns - scheduled_ns
