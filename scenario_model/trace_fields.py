"""Scenario fields of a replayed LLM trace (docs/scenario-format.md, "Replaying an LLM trace").

``arrival: {process: replay, file: trace.jsonl, format: mooncake | azure | burstgpt,
speed, loop, slice: {from, to}, max_rate, block_tokens}`` and the one request class
that sends its rows. Used by :mod:`.load_fields` and :mod:`.scenario`; every error
names the scenario file, line and field, and for the trace its own bad line::

    scen.yaml:9: arrival.file: trace.jsonl:17: input_length: expected an integer >= 1, got 0
"""

from __future__ import annotations

import dataclasses

from tailscope.loadgen.datafiles import DataFileError
from tailscope.loadgen.spec import ArrivalLog, ArrivalSpec, RequestClass, SpecError
from tailscope.loadgen.trace_files import MOONCAKE_BLOCK_TOKENS, TRACE_FORMATS, load_trace, slice_trace

#: Arrival fields only a replay has beyond a plain log's (``max_rate`` also spaces a plain log).
TRACE_FIELDS = frozenset({"slice", "max_rate", "block_tokens"})
SLICE_FIELDS = {"from", "to"}


def parse_trace(reader, data: dict, path: tuple, file: str, fmt: str) -> ArrivalLog:
    """An LLM trace (``format: mooncake | azure | burstgpt``), read now, cut to ``slice``."""
    if "unit" in data:
        raise reader.fail(path + ("unit",), f"not for a {fmt} trace (its format fixes the time unit)")
    if "block_tokens" in data and fmt != "mooncake":
        raise reader.fail(path + ("block_tokens",), "only for a mooncake trace (the tokens of one hash id)")
    block = reader.number(data, path, "block_tokens", MOONCAKE_BLOCK_TOKENS, integer=True)
    if not 1 <= block <= 1 << 20:
        raise reader.fail(path + ("block_tokens",), f"must be between 1 and {1 << 20} tokens, got {block}")
    try:
        offsets, requests = load_trace(file, fmt, block)
    except DataFileError as exc:
        raise reader.fail(path + ("file",), str(exc)) from None
    slice_s = None
    if data.get("slice") is not None:
        at = path + ("slice",)
        window = reader.mapping(data["slice"], at, SLICE_FIELDS)
        start = reader.duration(window, at, "from", 0.0) or 0.0
        end = reader.duration(window, at, "to", None)
        if end is not None and end <= start:
            raise reader.fail(at + ("to",), f"must be after `from` ({start:g} s), got {end:g} s")
        try:
            offsets, requests = slice_trace(offsets, requests, int(round(start * 1e9)),
                                            None if end is None else int(round(end * 1e9)))
        except ValueError as exc:
            until = "the end" if end is None else f"{end:g} s"
            raise reader.fail(at, f"{exc} ({start:g} s to {until} of a {offsets[-1] / 1e9:g}-s trace)") from None
        slice_s = (float(start), None if end is None else float(end))
    return reader.build(path, ArrivalLog, path=file, offsets_ns=offsets, format=fmt, requests=requests,
                        slice_s=slice_s)


def plain_log_fields(reader, data: dict, path: tuple) -> None:
    """Reject the trace-only fields on a plain arrival log (timestamps, gaps)."""
    for key in sorted((TRACE_FIELDS - {"max_rate"}) & set(data)):
        raise reader.fail(path + (key,), f"only for an LLM trace (format: {' | '.join(TRACE_FORMATS)})")


def trace_classes(reader, arrival: ArrivalSpec, classes: tuple[RequestClass, ...],
                  raw) -> tuple[RequestClass, ...]:
    """The classes of a replayed LLM trace: exactly one chat or completions class, which takes
    each request's prompt and output lengths from the trace (``LLMSpec.trace``)."""
    fmt = arrival.log.format
    if len(classes) != 1:
        raise reader.fail(("classes",), f"a {fmt} trace replay sends one request class (each trace row is "
                                        f"one request); got {len(classes)}")
    cls = classes[0]
    at = ("classes", 0)
    if cls.llm is None or not cls.llm.generates:
        raise reader.fail(at + ("api",), f"a {fmt} trace replay needs `api: openai-chat` or openai-completions")
    fields = raw[0] if isinstance(raw, list) and raw and isinstance(raw[0], dict) else {}
    for key in ("prompt_tokens", "dataset", "shared_prefix_tokens"):
        if key in fields:
            raise reader.fail(at + (key,), f"not with a {fmt} trace replay: each trace row gives its prompt")
    try:
        llm = dataclasses.replace(cls.llm, trace=arrival.log.requests)
    except SpecError as exc:
        raise reader.fail(at + (exc.field,), exc.message) from None
    return (dataclasses.replace(cls, llm=llm),)
