"""Hand-rolled protobuf encoding of OTLP ``ExportTraceServiceRequest`` bodies.

The lean tracing engine (:mod:`tailscope.tracing.kit.lean`) encodes each finished
span with :meth:`SpanEncoder.span` and joins batches of them with
:func:`export_request`, writing the protobuf wire format of
``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`` directly
(field tags precomputed, per-name and per-attribute encodings cached), about
ten times cheaper than building ``opentelemetry-proto`` messages. Any OTLP
receiver decodes the result with the official messages (tests prove the round
trip field by field).

What is encoded, as the OTel SDK's exporter does: trace/span/parent ids,
``trace_state``, name, kind, start/end epoch ns (fixed64), attributes (str,
bool, int64, double, bytes, homogeneous sequences of those as ``ArrayValue``,
mappings as ``KeyValueList``), events (name, epoch ns, attributes), links
(trace/span id, trace_state, attributes, flags), status (code, message) and
``flags`` (``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE``, plus ``IS_REMOTE`` when the
parent is remote). Attribute values of any other type, and sequences mixing
types, are dropped and counted in ``dropped_attributes_count``, as the SDK
drops them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.trace.span import DEFAULT_TRACE_STATE

# Wire types.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

#: SpanFlags (opentelemetry/proto/trace/v1/trace.proto).
FLAG_HAS_IS_REMOTE = 0x100
FLAG_IS_REMOTE = 0x200

_MAX_CACHED_ATTRIBUTES = 8192
_MAX_CACHED_NAMES = 4096
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_TIMES = struct.Struct("<BQBQ").pack  # start (field 7) and end (field 8), both fixed64
_TAG_START, _TAG_END = (7 << 3) | _I64, (8 << 3) | _I64


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of ``value`` (>= 0; negative int64 values are passed as ``value + 2**64``)."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes([n]) for n in range(0x80)]


def tag(field: int, wire_type: int) -> bytes:
    """The key of field ``field`` with wire type ``wire_type``."""
    return varint((field << 3) | wire_type)


def length_delimited(field: int, payload: bytes) -> bytes:
    """Field ``field`` holding ``payload`` (a string, bytes or an embedded message)."""
    return tag(field, _LEN) + varint(len(payload)) + payload


# Span fields.
_SPAN_TRACE_ID = tag(1, _LEN) + varint(16)
_SPAN_SPAN_ID = tag(2, _LEN) + varint(8)
_SPAN_PARENT_ID = tag(4, _LEN) + varint(8)
_SPAN_FLAGS = tag(16, _I32)
_STATUS_UNSET = length_delimited(15, b"")
_FLAGS_LOCAL_PARENT = _SPAN_FLAGS + struct.pack("<I", FLAG_HAS_IS_REMOTE)
_FLAGS_REMOTE_PARENT = _SPAN_FLAGS + struct.pack("<I", FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE)
# Link fields.
_LINK_TRACE_ID = tag(1, _LEN) + varint(16)
_LINK_SPAN_ID = tag(2, _LEN) + varint(8)
_LINK_FLAGS = tag(6, _I32)
_LINK_FLAGS_LOCAL = _LINK_FLAGS + struct.pack("<I", FLAG_HAS_IS_REMOTE)
_LINK_FLAGS_REMOTE = _LINK_FLAGS + struct.pack("<I", FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE)
#: A Link with ids and flags only: 2 + 16 + 2 + 8 + 5 bytes.
_PLAIN_LINK_HEAD = tag(13, _LEN) + varint(33) + _LINK_TRACE_ID


# --------------------------------------------------------------------------- attribute values


def _any_value(value: Any) -> bytes | None:
    """The AnyValue message of an attribute value; None when the type is not allowed."""
    kind = type(value)
    if kind is str:
        return length_delimited(1, value.encode("utf-8"))
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        if not _INT64_MIN <= value <= _INT64_MAX:
            return None
        return b"\x18" + varint(value if value >= 0 else value + 2**64)
    if kind is float:
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, (bytes, bytearray)):
        return length_delimited(7, bytes(value))
    if isinstance(value, str):
        return length_delimited(1, str(value).encode("utf-8"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return _any_value(int(value))
    if isinstance(value, float):
        return _any_value(float(value))
    if isinstance(value, Mapping):
        return length_delimited(6, b"".join(_key_values(value)[0]))
    if isinstance(value, Sequence):
        return _array_value(value)
    return None


def _array_value(values: Sequence[Any]) -> bytes | None:
    """ArrayValue of a homogeneous sequence of str/bool/int/float (None items allowed); None when mixed."""
    kinds = {type(item) for item in values if item is not None}
    if len(kinds) > 1 or not kinds <= {str, bool, int, float}:
        return None
    encoded = []
    for item in values:
        any_value = b"" if item is None else _any_value(item)
        if any_value is None:
            return None
        encoded.append(length_delimited(1, any_value))
    return length_delimited(5, b"".join(encoded))


def _key_value(key: str, value: Any) -> bytes | None:
    """One KeyValue message (without its enclosing field key), or None when the value is dropped."""
    if type(key) is not str or not key:
        return None
    any_value = _any_value(value)
    if any_value is None:
        return None
    return length_delimited(1, key.encode("utf-8")) + length_delimited(2, any_value)


def _key_values(attributes: Mapping[str, Any], field: int = 1) -> tuple[list[bytes], int]:
    """Encoded KeyValue messages (each as a repeated field ``field`` entry) and the number of dropped ones."""
    out = []
    dropped = 0
    for key, value in attributes.items():
        encoded = _key_value(key, value)
        if encoded is None:
            dropped += 1
        else:
            out.append(length_delimited(field, encoded))
    return out, dropped


def encode_attributes(attributes: Mapping[str, Any] | None, field: int) -> bytes:
    """``attributes`` as repeated KeyValue field ``field`` (resource attributes; invalid values skipped)."""
    return b"".join(_key_values(attributes, field)[0]) if attributes else b""


# --------------------------------------------------------------------------- the encoder


class SpanEncoder:
    """Encodes finished lean spans; keeps bounded caches of repeated names and span attributes.

    Span attributes whose value is a str or an int are cached as their whole
    encoded field, keyed by ``(key, value)`` (one cache per type, so ``1`` and
    ``True`` never meet); a cache that reaches its bound is cleared. Safe to
    call from several threads at once: it keeps no per-call state, and its
    caches only ever map a key to that key's one encoding.
    """

    def __init__(self) -> None:
        # keyed by (name, id(kind)): SpanKind members are singletons, and an Enum's own
        # __hash__ is a Python-level call on every lookup
        self._names: dict[tuple[str, int], bytes] = {}
        self._str_attributes: dict[tuple[str, str], bytes] = {}
        self._int_attributes: dict[tuple[str, int], bytes] = {}

    def _name_and_kind(self, name: str, kind: Any) -> bytes:
        """Fields ``name`` and ``kind`` (``kind`` an API SpanKind: OTLP's value is one more)."""
        if len(self._names) >= _MAX_CACHED_NAMES:
            self._names.clear()
        encoded = self._names[(name, id(kind))] = (
            length_delimited(5, name.encode("utf-8")) + tag(6, _VARINT) + varint(kind.value + 1)
        )
        return encoded

    def _attribute_miss(self, item: tuple[str, Any]) -> bytes:
        """Encode ``key=value`` as a span attribute field (9), caching str and int values; b"" when dropped."""
        key, value = item
        key_value = _key_value(key, value)
        if key_value is None:
            return b""
        encoded = length_delimited(9, key_value)
        kind = type(value)
        cache = self._str_attributes if kind is str else self._int_attributes if kind is int else None
        if cache is not None:
            if len(cache) >= _MAX_CACHED_ATTRIBUTES:
                cache.clear()
            cache[item] = encoded
        return encoded

    def _span_attributes(self, attributes: Mapping[str, Any]) -> bytes:
        """Fields 9 (attributes) and, when some were dropped, 10 (dropped_attributes_count)."""
        strs, ints = self._str_attributes, self._int_attributes
        out = []
        for item in attributes.items():
            kind = type(item[1])
            encoded = strs.get(item) if kind is str else ints.get(item) if kind is int else None
            out.append(encoded or self._attribute_miss(item))
        joined = b"".join(out)
        if b"" in out:  # dropped values encode to b"" (a kept one never does)
            joined += b"\x50" + varint(out.count(b""))
        return joined

    def _attribute_fields(self, attributes: Mapping[str, Any], field: int) -> bytes:
        """Repeated KeyValue field ``field`` of event or link attributes, then the dropped count (``field + 1``)."""
        encoded, dropped = _key_values(attributes, field)
        if dropped:
            encoded.append(tag(field + 1, _VARINT) + varint(dropped))
        return b"".join(encoded)

    def _event(self, event: tuple[str, int, Mapping[str, Any] | None]) -> bytes:
        name, time_ns, attributes = event
        body = b"\x09" + _FIXED64(time_ns) + length_delimited(2, name.encode("utf-8"))
        if attributes:
            body += self._attribute_fields(attributes, 3)
        return length_delimited(11, body)

    def _link(self, link: tuple[Any, Mapping[str, Any] | None]) -> bytes:
        """One Link message (field 13) of a lean span's ``(SpanContext, attributes)`` pair."""
        context, attributes = link
        trace_id, span_id, is_remote, _, trace_state, _ = context
        flags = _LINK_FLAGS_REMOTE if is_remote else _LINK_FLAGS_LOCAL
        if not attributes and (trace_state is DEFAULT_TRACE_STATE or not trace_state):
            return b"".join((_PLAIN_LINK_HEAD, trace_id.to_bytes(16, "big"), _LINK_SPAN_ID, span_id.to_bytes(8, "big"),
                             flags))
        parts = [_LINK_TRACE_ID, trace_id.to_bytes(16, "big"), _LINK_SPAN_ID, span_id.to_bytes(8, "big")]
        if trace_state:
            parts.append(length_delimited(3, trace_state.to_header().encode("ascii")))
        if attributes:
            parts.append(self._attribute_fields(attributes, 4))
        parts.append(flags)
        return length_delimited(13, b"".join(parts))

    def _rare_fields(self, span: Any) -> bytes:
        """Events, links and status (field order 11, 13, 15)."""
        parts = []
        if span.events:
            parts.extend(map(self._event, span.events))
        if span.links:
            parts.extend(map(self._link, span.links))
        if span.status_code:
            status = tag(3, _VARINT) + varint(span.status_code)
            if span.status_message:
                status = length_delimited(2, span.status_message.encode("utf-8")) + status
            parts.append(length_delimited(15, status))
        else:
            parts.append(_STATUS_UNSET)
        return b"".join(parts)

    def span(self, span: Any) -> bytes:
        """One Span message as a ScopeSpans ``spans`` entry (field 2). ``span`` is a finished lean span."""
        parent_id = span.parent_id
        trace_state = span.trace_state
        attributes = span.attributes
        body = b"".join((
            _SPAN_TRACE_ID, span.trace_id.to_bytes(16, "big"), _SPAN_SPAN_ID, span.span_id.to_bytes(8, "big"),
            length_delimited(3, trace_state.to_header().encode("ascii")) if trace_state is not None and trace_state
            else b"",
            _SPAN_PARENT_ID + parent_id.to_bytes(8, "big") if parent_id else b"",
            self._names.get((span.name, id(span.kind))) or self._name_and_kind(span.name, span.kind),
            _TIMES(_TAG_START, span.start_ns, _TAG_END, span.end_ns),
            self._span_attributes(attributes) if attributes else b"",
            self._rare_fields(span) if span.events or span.links or span.status_code else _STATUS_UNSET,
            _FLAGS_REMOTE_PARENT if span.parent_remote else _FLAGS_LOCAL_PARENT,
        ))
        size = len(body)
        return b"\x12" + (_SMALL[size] if size < 0x80 else varint(size)) + body


def scope_message(name: str, version: str | None) -> bytes:
    """The InstrumentationScope message of a tracer."""
    encoded = length_delimited(1, name.encode("utf-8"))
    if version:
        encoded += length_delimited(2, version.encode("utf-8"))
    return encoded


def resource_message(attributes: Mapping[str, Any]) -> bytes:
    """The Resource message of ``attributes``."""
    return encode_attributes(attributes, 1)


def export_request(resource: bytes, scope_spans: Iterable[tuple[bytes, Sequence[bytes]]]) -> bytes:
    """A serialized ExportTraceServiceRequest of already encoded spans under one resource.

    ``resource`` is a :func:`resource_message`; ``scope_spans`` pairs an
    encoded InstrumentationScope (:func:`scope_message`) with the
    :meth:`SpanEncoder.span` encodings of its spans (scopes without spans are
    left out).
    """
    encoded_scopes = [length_delimited(2, length_delimited(1, scope) + b"".join(spans))
                      for scope, spans in scope_spans if spans]
    return length_delimited(1, length_delimited(1, resource) + b"".join(encoded_scopes))
