"""Decoding OTLP export requests (protobuf and JSON) into run-directory columns.

Pure functions: bytes in, column lists out. The HTTP layer
(:mod:`tailscope.tracing.ingest.receiver`) decides what to do with them.

Guarantees:

* trace and span ids come out as lowercase hex strings (32 and 16 digits);
  an empty parent id becomes ``None`` (root span);
* times stay epoch nanoseconds (int), as OTLP sends them;
* attribute values (OTLP ``AnyValue``) become plain JSON values: strings,
  ints, floats, bools, lists, objects; bytes become lowercase hex strings;
* span events become a JSON list ``[{"name", "t_ns", "attributes"}]`` (None
  when a span has none), in the order the span carries them;
* spans named ``gc.pause`` become ``gc_pause`` events instead of spans;
* metric points become signal rows (:class:`MetricPoints`): gauges and sums as
  read, histograms (explicit-bucket and exponential) as a count and a sum series,
  so that runtime metrics such as ``jvm.gc.duration`` reach the GC detector;
* anything structurally wrong raises :class:`MalformedPayload`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

#: Span name the instrumentation kit uses for a garbage-collection pause.
GC_PAUSE_SPAN = "gc.pause"
#: Event kind a ``gc.pause`` span is stored as.
GC_PAUSE_EVENT = "gc_pause"

_TRACE_ID_BYTES = 16
_SPAN_ID_BYTES = 8
_INT64_MAX = 2**63 - 1
_INT8_MAX = 127

_SPAN_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_CODE_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


class MalformedPayload(ValueError):
    """The request body is not a valid OTLP export request."""


@dataclass
class SpanColumns:
    """Spans and GC-pause events of one request, column-wise (schema order)."""

    trace_id: list = field(default_factory=list)
    span_id: list = field(default_factory=list)
    parent_span_id: list = field(default_factory=list)
    name: list = field(default_factory=list)
    service: list = field(default_factory=list)
    kind: list = field(default_factory=list)
    start_ns: list = field(default_factory=list)
    end_ns: list = field(default_factory=list)
    status_code: list = field(default_factory=list)
    attributes: list = field(default_factory=list)
    links: list = field(default_factory=list)
    pid: list = field(default_factory=list)
    events: list = field(default_factory=list)
    #: Events columns (EVENTS_SCHEMA order): kind, start_ns, end_ns, source, attributes.
    event_rows: list = field(default_factory=list)

    @property
    def span_count(self) -> int:
        return len(self.trace_id)

    @property
    def received(self) -> int:
        """Spans in the request, including those turned into events."""
        return len(self.trace_id) + len(self.event_rows)

    def span_dict(self) -> dict[str, list]:
        """The span columns keyed by SPANS_SCHEMA column name."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "service": self.service,
            "kind": self.kind,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "status_code": self.status_code,
            "attributes": self.attributes,
            "links": self.links,
            "pid": self.pid,
            "events": self.events,
        }

    def add_gc_pause(self, start_ns, end_ns, service, pid, attrs: dict) -> None:
        """Record a ``gc.pause`` span as an event; ``gc.`` prefixes are dropped."""
        event_attrs = {(k[3:] if k.startswith("gc.") else k): v for k, v in attrs.items()}
        event_attrs["pid"] = pid
        self.event_rows.append(
            (GC_PAUSE_EVENT, start_ns, end_ns, service, json.dumps(event_attrs))
        )


@dataclass
class MetricPoints:
    """Gauge, sum and histogram data points as signal rows: (t_ns, series, value), plus
    each metric's descriptor: ``descriptors[series metric name] = {"unit", "kind",
    "description"}`` (sums and histograms add ``"temporality": "cumulative"|"delta"``),
    kind "counter" for a cumulative monotonic sum (stored cumulative, like the samplers'
    counters) and "gauge" otherwise: a delta sum's points are the increments of each export
    interval, as sent.

    A histogram (explicit-bucket or exponential) becomes two series, ``<name>.count`` (unit
    ``1``: observations) and ``<name>.sum`` (the metric's unit: for ``jvm.gc.duration``, seconds
    of GC), each cumulative or delta as the histogram is (``.sum`` only when the point has a
    sum); its buckets are not stored (one series per bucket would dwarf everything else;
    count and sum per export interval give the mean)."""

    t_ns: list = field(default_factory=list)
    series: list = field(default_factory=list)
    value: list = field(default_factory=list)
    descriptors: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t_ns)

    def describe(self, name: str, unit: str, description: str, cumulative_monotonic: bool,
                 temporality: str | None = None) -> None:
        self.descriptors[name] = {"unit": unit or "", "kind": "counter" if cumulative_monotonic else "gauge",
                                  "description": description or ""}
        if temporality is not None:
            self.descriptors[name]["temporality"] = temporality

    def add(self, t_ns: int, series: str, value: float) -> None:
        self.t_ns.append(t_ns)
        self.series.append(series)
        self.value.append(value)

    def add_histogram(self, name: str, unit: str, description: str, cumulative: bool,
                      t_ns: int, attrs: dict, count: float, total: float | None) -> None:
        """One histogram point as ``<name>.count`` and (when it has a sum) ``<name>.sum``."""
        temporality = "cumulative" if cumulative else "delta"
        self.describe(f"{name}.count", "1", f"observations of {name}", cumulative, temporality)
        self.add(t_ns, series_name(f"{name}.count", attrs), float(count))
        if total is not None:
            self.describe(f"{name}.sum", unit, f"sum of {name}", cumulative, temporality)
            self.add(t_ns, series_name(f"{name}.sum", attrs), float(total))


#: OTLP AggregationTemporality CUMULATIVE (protobuf enum value and JSON name).
_CUMULATIVE = (2, "AGGREGATION_TEMPORALITY_CUMULATIVE")


# --------------------------------------------------------------------------- protobuf


def _any_value(value):
    """OTLP AnyValue (protobuf) → plain JSON value."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return None


def _attributes(key_values) -> dict:
    return {kv.key: _any_value(kv.value) for kv in key_values}


#: Resource attributes that carry the exporting process's PID, in the order they are tried:
#: the OpenTelemetry semantic convention, then vLLM's own (vllm/tracing: its spans' resource has
#: ``vllm.process_id`` and no ``process.pid``).
PID_RESOURCE_ATTRIBUTES = ("process.pid", "vllm.process_id")


def _resource_identity(attrs: dict) -> tuple[str | None, int | None]:
    """(service.name, PID) from resource attributes: the PID from the first of
    :data:`PID_RESOURCE_ATTRIBUTES` present; None unless an int (or a string of digits)."""
    service = attrs.get("service.name")
    pid = next((attrs[key] for key in PID_RESOURCE_ATTRIBUTES if attrs.get(key) is not None), None)
    if isinstance(pid, str) and pid.isdigit():
        pid = int(pid)
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid <= _INT64_MAX:
        pid = None
    return (str(service) if service is not None else None), pid


def _check_ids(trace_id: bytes, span_id: bytes, parent: bytes) -> None:
    if len(trace_id) != _TRACE_ID_BYTES or len(span_id) != _SPAN_ID_BYTES:
        raise MalformedPayload(
            f"span ids must be {_TRACE_ID_BYTES}+{_SPAN_ID_BYTES} bytes, "
            f"got {len(trace_id)}+{len(span_id)}"
        )
    if parent and len(parent) != _SPAN_ID_BYTES:
        raise MalformedPayload(f"parent span id must be {_SPAN_ID_BYTES} bytes, got {len(parent)}")


def _check_span_fields(start_ns: int, end_ns: int, kind: int, status_code: int) -> None:
    """Reject values the span columns (int64 times, int8 kind/status) cannot hold."""
    if not (0 <= start_ns <= _INT64_MAX and 0 <= end_ns <= _INT64_MAX):
        raise MalformedPayload("span times must fit in int64 epoch nanoseconds")
    if not (0 <= kind <= _INT8_MAX and 0 <= status_code <= _INT8_MAX):
        raise MalformedPayload(f"span kind {kind} or status code {status_code} out of range")


def _span_events(events) -> str:
    """Protobuf span events → the ``events`` column's JSON text."""
    for event in events:
        if event.time_unix_nano > _INT64_MAX:
            raise MalformedPayload("span event time must fit in int64 epoch ns")
    return json.dumps(
        [
            {"name": event.name, "t_ns": event.time_unix_nano, "attributes": _attributes(event.attributes)}
            for event in events
        ]
    )


def decode_traces_protobuf(body: bytes) -> SpanColumns:
    """Decode an ``ExportTraceServiceRequest`` (protobuf) into span columns."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise MalformedPayload(f"not an ExportTraceServiceRequest: {exc}") from exc
    out = SpanColumns()
    dumps = json.dumps
    for resource_spans in request.resource_spans:
        service, pid = _resource_identity(_attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
                _check_ids(trace_id, span_id, parent)
                _check_span_fields(
                    span.start_time_unix_nano, span.end_time_unix_nano, span.kind, span.status.code
                )
                attrs = _attributes(span.attributes)
                if span.name == GC_PAUSE_SPAN:
                    out.add_gc_pause(
                        span.start_time_unix_nano, span.end_time_unix_nano, service, pid, attrs
                    )
                    continue
                out.trace_id.append(trace_id.hex())
                out.span_id.append(span_id.hex())
                out.parent_span_id.append(parent.hex() if parent else None)
                out.name.append(span.name)
                out.service.append(service)
                out.kind.append(span.kind)
                out.start_ns.append(span.start_time_unix_nano)
                out.end_ns.append(span.end_time_unix_nano)
                out.status_code.append(span.status.code)
                out.attributes.append(dumps(attrs))
                out.links.append(
                    dumps(
                        [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                            for link in span.links
                        ]
                    )
                    if span.links
                    else None
                )
                out.pid.append(pid)
                out.events.append(_span_events(span.events) if span.events else None)
    return out


def _number_point_value(point) -> float | None:
    which = point.WhichOneof("value")
    if which == "as_double":
        return point.as_double
    if which == "as_int":
        return float(point.as_int)
    return None


def series_name(metric_name: str, attrs: dict) -> str:
    """Signal series name of a data point: the metric name, plus ``{k="v",...}``
    (sorted keys) when the point has attributes, so that distinct points of one
    metric do not collide."""
    if not attrs:
        return metric_name
    labels = ",".join(f'{k}="{attrs[k]}"' for k in sorted(attrs))
    return f"{metric_name}{{{labels}}}"


_HISTOGRAMS = ("histogram", "exponential_histogram")


def decode_metrics_protobuf(body: bytes) -> MetricPoints:
    """Decode an ``ExportMetricsServiceRequest``; keep gauge, sum and histogram data points
    (summaries are skipped)."""
    request = ExportMetricsServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise MalformedPayload(f"not an ExportMetricsServiceRequest: {exc}") from exc
    out = MetricPoints()
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                which = metric.WhichOneof("data")
                if which in _HISTOGRAMS:
                    data = getattr(metric, which)
                    cumulative = data.aggregation_temporality in _CUMULATIVE
                    for point in data.data_points:
                        if point.time_unix_nano > _INT64_MAX:
                            raise MalformedPayload("data point time must fit in int64 epoch ns")
                        out.add_histogram(metric.name, metric.unit, metric.description, cumulative,
                                          point.time_unix_nano, _attributes(point.attributes), point.count,
                                          point.sum if point.HasField("sum") else None)
                    continue
                if which not in ("gauge", "sum"):
                    continue
                out.describe(metric.name, metric.unit, metric.description, which == "sum"
                             and metric.sum.is_monotonic and metric.sum.aggregation_temporality in _CUMULATIVE,
                             None if which == "gauge" else
                             "cumulative" if metric.sum.aggregation_temporality in _CUMULATIVE else "delta")
                for point in getattr(metric, which).data_points:
                    value = _number_point_value(point)
                    if value is None:
                        continue
                    if point.time_unix_nano > _INT64_MAX:
                        raise MalformedPayload("data point time must fit in int64 epoch ns")
                    out.add(point.time_unix_nano, series_name(metric.name, _attributes(point.attributes)), value)
    return out


def count_logs_protobuf(body: bytes) -> int:
    """Number of log records in an ``ExportLogsServiceRequest``."""
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise MalformedPayload(f"not an ExportLogsServiceRequest: {exc}") from exc
    return sum(
        len(scope_logs.log_records)
        for resource_logs in request.resource_logs
        for scope_logs in resource_logs.scope_logs
    )


# --------------------------------------------------------------------------- JSON


def _json_object(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedPayload(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedPayload("OTLP JSON body must be an object")
    return data


def _json_list(obj: dict, key: str) -> list:
    value = obj.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPayload(f"{key} must be a list")
    return value


def _json_int(value, what: str) -> int:
    """OTLP JSON encodes 64-bit integers as decimal strings (numbers accepted too)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise MalformedPayload(f"{what} must be an integer or a decimal string")
    try:
        return int(value)
    except ValueError as exc:
        raise MalformedPayload(f"{what} is not an integer: {value!r}") from exc


def _json_enum(value, names: dict, what: str) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _json_int(value, what)


def _json_hex_id(value, n_bytes: int, what: str, required: bool) -> str | None:
    if value in (None, ""):
        if required:
            raise MalformedPayload(f"{what} is required")
        return None
    if not isinstance(value, str) or len(value) != 2 * n_bytes:
        raise MalformedPayload(f"{what} must be {2 * n_bytes} hex digits")
    try:
        bytes.fromhex(value)
    except ValueError as exc:
        raise MalformedPayload(f"{what} is not hex: {value!r}") from exc
    return value.lower()


def _json_any_value(value):
    """OTLP JSON AnyValue → plain JSON value."""
    if not isinstance(value, dict):
        raise MalformedPayload("attribute value must be an AnyValue object")
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return _json_int(value["intValue"], "intValue")
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_json_any_value(v) for v in _json_list(value["arrayValue"] or {}, "values")]
    if "kvlistValue" in value:
        return _json_attributes(_json_list(value["kvlistValue"] or {}, "values"))
    if "bytesValue" in value:
        try:
            return base64.b64decode(value["bytesValue"], validate=True).hex()
        except (ValueError, TypeError) as exc:
            raise MalformedPayload("bytesValue is not base64") from exc
    return None


def _json_attributes(key_values: list) -> dict:
    out = {}
    for kv in key_values:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise MalformedPayload("attribute must be an object with a string key")
        out[kv["key"]] = _json_any_value(kv.get("value", {}))
    return out


def _json_links(links: list) -> str | None:
    if not links:
        return None
    return json.dumps(
        [
            {
                "trace_id": _json_hex_id(link.get("traceId"), _TRACE_ID_BYTES, "link traceId", True),
                "span_id": _json_hex_id(link.get("spanId"), _SPAN_ID_BYTES, "link spanId", True),
            }
            for link in links
        ]
    )


def _json_span(out: SpanColumns, span: dict, service, pid) -> None:
    if not isinstance(span, dict):
        raise MalformedPayload("span must be an object")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise MalformedPayload("span name must be a string")
    trace_id = _json_hex_id(span.get("traceId"), _TRACE_ID_BYTES, "traceId", True)
    span_id = _json_hex_id(span.get("spanId"), _SPAN_ID_BYTES, "spanId", True)
    parent = _json_hex_id(span.get("parentSpanId"), _SPAN_ID_BYTES, "parentSpanId", False)
    start_ns = _json_int(span.get("startTimeUnixNano"), "startTimeUnixNano")
    end_ns = _json_int(span.get("endTimeUnixNano"), "endTimeUnixNano")
    status = span.get("status") or {}
    kind = _json_enum(span.get("kind", 0), _SPAN_KIND_NAMES, "kind")
    status_code = _json_enum(status.get("code", 0), _STATUS_CODE_NAMES, "status.code")
    _check_span_fields(start_ns, end_ns, kind, status_code)
    attrs = _json_attributes(_json_list(span, "attributes"))
    if name == GC_PAUSE_SPAN:
        out.add_gc_pause(start_ns, end_ns, service, pid, attrs)
        return
    out.trace_id.append(trace_id)
    out.span_id.append(span_id)
    out.parent_span_id.append(parent)
    out.name.append(name)
    out.service.append(service)
    out.kind.append(kind)
    out.start_ns.append(start_ns)
    out.end_ns.append(end_ns)
    out.status_code.append(status_code)
    out.attributes.append(json.dumps(attrs))
    out.links.append(_json_links(_json_list(span, "links")))
    out.pid.append(pid)
    out.events.append(_json_events(_json_list(span, "events")))


def _json_events(events: list) -> str | None:
    """OTLP JSON span events → the ``events`` column's JSON text (None when there are none)."""
    if not events:
        return None
    out = []
    for event in events:
        if not isinstance(event, dict):
            raise MalformedPayload("span event must be an object")
        name = event.get("name", "")
        if not isinstance(name, str):
            raise MalformedPayload("span event name must be a string")
        t_ns = _json_int(event.get("timeUnixNano"), "event timeUnixNano")
        if not 0 <= t_ns <= _INT64_MAX:
            raise MalformedPayload("span event time must fit in int64 epoch ns")
        out.append({"name": name, "t_ns": t_ns,
                    "attributes": _json_attributes(_json_list(event, "attributes"))})
    return json.dumps(out)


def _structure_error(exc: Exception) -> MalformedPayload:
    """The error to raise for a JSON body whose shape or values are wrong."""
    if isinstance(exc, MalformedPayload):
        return exc
    return MalformedPayload(f"unexpected OTLP JSON structure: {exc}")


def decode_traces_json(body: bytes) -> SpanColumns:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, lowerCamelCase keys)."""
    data = _json_object(body)
    out = SpanColumns()
    try:
        for resource_spans in _json_list(data, "resourceSpans"):
            resource = resource_spans.get("resource") or {}
            service, pid = _resource_identity(_json_attributes(_json_list(resource, "attributes")))
            for scope_spans in _json_list(resource_spans, "scopeSpans"):
                for span in _json_list(scope_spans, "spans"):
                    _json_span(out, span, service, pid)
    except (AttributeError, TypeError, ValueError) as exc:
        raise _structure_error(exc) from exc
    return out


def _json_histogram(out: MetricPoints, metric: dict, data_field: dict) -> None:
    name, unit, description = (str(metric.get(k, "")) for k in ("name", "unit", "description"))
    cumulative = data_field.get("aggregationTemporality") in _CUMULATIVE
    for point in _json_list(data_field, "dataPoints"):
        t_ns = _json_int(point.get("timeUnixNano"), "timeUnixNano")
        if not 0 <= t_ns <= _INT64_MAX:
            raise MalformedPayload("timeUnixNano must fit in int64 epoch ns")
        count = _json_int(point.get("count", 0), "count")  # uint64: a string in OTLP/JSON
        total = float(point["sum"]) if point.get("sum") is not None else None
        out.add_histogram(name, unit, description, cumulative, t_ns,
                          _json_attributes(_json_list(point, "attributes")), count, total)


def decode_metrics_json(body: bytes) -> MetricPoints:
    """Decode an OTLP/JSON ``ExportMetricsServiceRequest``; keep gauge, sum and histogram
    points (summaries are skipped)."""
    data = _json_object(body)
    out = MetricPoints()
    try:
        for resource_metrics in _json_list(data, "resourceMetrics"):
            for scope_metrics in _json_list(resource_metrics, "scopeMetrics"):
                for metric in _json_list(scope_metrics, "metrics"):
                    histogram = next((k for k in ("histogram", "exponentialHistogram") if k in metric), None)
                    if histogram is not None:
                        _json_histogram(out, metric, metric[histogram] or {})
                        continue
                    data_kind = "gauge" if "gauge" in metric else "sum" if "sum" in metric else None
                    if data_kind is None:
                        continue
                    data_field = metric[data_kind] or {}
                    out.describe(str(metric.get("name", "")), str(metric.get("unit", "")),
                                 str(metric.get("description", "")),
                                 data_kind == "sum" and data_field.get("isMonotonic") is True
                                 and data_field.get("aggregationTemporality") in _CUMULATIVE,
                                 None if data_kind == "gauge" else "cumulative"
                                 if data_field.get("aggregationTemporality") in _CUMULATIVE else "delta")
                    for point in _json_list(data_field, "dataPoints"):
                        if "asDouble" in point:
                            value = float(point["asDouble"])
                        elif "asInt" in point:
                            value = float(_json_int(point["asInt"], "asInt"))
                        else:
                            continue
                        attrs = _json_attributes(_json_list(point, "attributes"))
                        t_ns = _json_int(point.get("timeUnixNano"), "timeUnixNano")
                        if not 0 <= t_ns <= _INT64_MAX:
                            raise MalformedPayload("timeUnixNano must fit in int64 epoch ns")
                        out.t_ns.append(t_ns)
                        out.series.append(series_name(str(metric.get("name", "")), attrs))
                        out.value.append(value)
    except (AttributeError, TypeError, ValueError) as exc:
        raise _structure_error(exc) from exc
    return out


def count_logs_json(body: bytes) -> int:
    """Number of log records in an OTLP/JSON ``ExportLogsServiceRequest``."""
    data = _json_object(body)
    try:
        return sum(
            len(_json_list(scope_logs, "logRecords"))
            for resource_logs in _json_list(data, "resourceLogs")
            for scope_logs in _json_list(resource_logs, "scopeLogs")
        )
    except (AttributeError, TypeError) as exc:
        raise _structure_error(exc) from exc
