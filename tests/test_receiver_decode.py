"""OTLP decoding (pure): protobuf and JSON bodies into run-directory columns."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum
from receiver_helpers import CHILD_ID, ROOT_ID, TRACE_ID, kv, span, trace_request

from tailscope.tracing.ingest.otlp_decode import (
    MalformedPayload,
    count_logs_json,
    count_logs_protobuf,
    decode_metrics_json,
    decode_metrics_protobuf,
    decode_traces_json,
    decode_traces_protobuf,
)


def test_protobuf_spans_become_columns():
    root = span("POST /v1/infer/text")
    child = span("inference", span_id=CHILD_ID, parent=ROOT_ID, **{"batch__size": 8, "ratio": 0.5, "ok": True})
    child.links.add(trace_id=TRACE_ID, span_id=ROOT_ID)
    child.status.code = 2
    columns = decode_traces_protobuf(trace_request([root, child]))
    rows = columns.span_dict()
    assert rows["trace_id"] == [TRACE_ID.hex()] * 2
    assert rows["span_id"] == [ROOT_ID.hex(), CHILD_ID.hex()]
    assert rows["parent_span_id"] == [None, ROOT_ID.hex()]
    assert rows["service"] == ["svc", "svc"] and rows["pid"] == [4242, 4242]
    assert rows["kind"] == [2, 2] and rows["status_code"] == [0, 2]
    assert json.loads(rows["attributes"][1]) == {"batch.size": 8, "ratio": 0.5, "ok": True}
    assert rows["links"] == [None, json.dumps([{"trace_id": TRACE_ID.hex(), "span_id": ROOT_ID.hex()}])]


def test_any_value_nesting_and_bytes():
    s = span("x")
    s.attributes.append(KeyValue(key="list", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="a")]))))
    s.attributes.append(KeyValue(key="map", value=AnyValue(kvlist_value=KeyValueList(values=[kv("k", 2.5)]))))
    s.attributes.append(KeyValue(key="raw", value=AnyValue(bytes_value=b"\x01\xff")))
    s.attributes.append(KeyValue(key="empty", value=AnyValue()))
    attrs = json.loads(decode_traces_protobuf(trace_request([s])).attributes[0])
    assert attrs == {"list": [1, "a"], "map": {"k": 2.5}, "raw": "01ff", "empty": None}


def test_gc_pause_span_becomes_event():
    gc = span("gc.pause", **{"gc__generation": 2, "gc__collected": 1500, "gc__uncollectable": 0})
    columns = decode_traces_protobuf(trace_request([gc, span("root", span_id=CHILD_ID)]))
    assert columns.span_count == 1 and columns.received == 2
    kind, start, end, source, attrs = columns.event_rows[0]
    assert (kind, start, end, source) == ("gc_pause", gc.start_time_unix_nano, gc.end_time_unix_nano, "svc")
    assert json.loads(attrs) == {"generation": 2, "collected": 1500, "uncollectable": 0, "pid": 4242}


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05abc"])
def test_protobuf_garbage_is_malformed(body):
    with pytest.raises(MalformedPayload):
        decode_traces_protobuf(body)


def test_protobuf_bad_ids_and_out_of_range_values_are_malformed():
    with pytest.raises(MalformedPayload):
        decode_traces_protobuf(trace_request([span("x", span_id=b"\x01\x02")]))
    with pytest.raises(MalformedPayload):
        decode_traces_protobuf(trace_request([span("x", start_ns=2**64 - 1)]))
    bad_kind = span("x")
    bad_kind.kind = 1000
    with pytest.raises(MalformedPayload):
        decode_traces_protobuf(trace_request([bad_kind]))


def json_body(**span_overrides) -> bytes:
    """An OTLP/JSON trace body (hex ids, lowerCamelCase, int64 as strings)."""
    span_json = {
        "traceId": TRACE_ID.hex().upper(),
        "spanId": CHILD_ID.hex(),
        "parentSpanId": ROOT_ID.hex(),
        "name": "preprocess",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000001000000,
        "attributes": [
            {"key": "n", "value": {"intValue": "42"}},
            {"key": "s", "value": {"stringValue": "hi"}},
            {"key": "b", "value": {"bytesValue": "Af8="}},
            {"key": "arr", "value": {"arrayValue": {"values": [{"doubleValue": 1.5}, {"boolValue": True}]}}},
        ],
        "status": {"code": "STATUS_CODE_ERROR"},
        "links": [{"traceId": TRACE_ID.hex(), "spanId": ROOT_ID.hex()}],
        **span_overrides,
    }
    return json.dumps({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "json-svc"}},
                {"key": "process.pid", "value": {"intValue": "77"}},
            ]},
            "scopeSpans": [{"scope": {"name": "t"}, "spans": [span_json]}],
        }]
    }).encode()


def test_json_spans_become_columns():
    rows = decode_traces_json(json_body()).span_dict()
    assert rows["trace_id"] == [TRACE_ID.hex()]  # lowercased
    assert rows["parent_span_id"] == [ROOT_ID.hex()]
    assert rows["start_ns"] == [1700000000000000000] and rows["end_ns"] == [1700000000001000000]
    assert rows["service"] == ["json-svc"] and rows["pid"] == [77]
    assert rows["kind"] == [1] and rows["status_code"] == [2]
    assert json.loads(rows["attributes"][0]) == {"n": 42, "s": "hi", "b": "01ff", "arr": [1.5, True]}
    assert json.loads(rows["links"][0]) == [{"trace_id": TRACE_ID.hex(), "span_id": ROOT_ID.hex()}]


def test_json_kind_as_enum_name_and_root_without_parent():
    rows = decode_traces_json(json_body(kind="SPAN_KIND_SERVER", parentSpanId="")).span_dict()
    assert rows["kind"] == [2] and rows["parent_span_id"] == [None]


@pytest.mark.parametrize("body", [
    b"not json", b"[1,2]", b'{"resourceSpans": 5}', b'{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}',
    json_body(spanId="zz" * 8), json_body(traceId="00"), json_body(startTimeUnixNano="soon"),
    json_body(attributes=[{"key": "d", "value": {"doubleValue": "x"}}]), b"[" * 100_000,
])
def test_json_malformed(body):
    with pytest.raises(MalformedPayload):
        decode_traces_json(body)


def _metrics_request() -> bytes:
    gauge = Metric(name="queue.depth", gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=10, as_int=3)]))
    total = Metric(name="requests", sum=Sum(data_points=[
        NumberDataPoint(time_unix_nano=11, as_double=5.0, attributes=[kv("route", "/a")]),
        NumberDataPoint(time_unix_nano=11, as_double=7.0, attributes=[kv("route", "/b")]),
    ]))
    resource_metrics = ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[gauge, total])])
    return ExportMetricsServiceRequest(resource_metrics=[resource_metrics]).SerializeToString()


def test_metrics_gauge_and_sum_points():
    points = decode_metrics_protobuf(_metrics_request())
    assert list(zip(points.t_ns, points.series, points.value)) == [
        (10, "queue.depth", 3.0), (11, 'requests{route="/a"}', 5.0), (11, 'requests{route="/b"}', 7.0),
    ]
    body = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "q", "gauge": {"dataPoints": [{"timeUnixNano": "12", "asInt": "4"}]}},
        {"name": "h", "histogram": {"dataPoints": [{"count": "1"}]}},
    ]}]}]}).encode()
    points = decode_metrics_json(body)  # a histogram point is kept as its count (and sum, when it has one)
    assert list(zip(points.t_ns, points.series, points.value)) == [(12, "q", 4.0), (0, "h.count", 1.0)]


def test_logs_are_counted():
    logs = ResourceLogs(scope_logs=[ScopeLogs(log_records=[LogRecord(), LogRecord()])])
    assert count_logs_protobuf(ExportLogsServiceRequest(resource_logs=[logs, logs]).SerializeToString()) == 4
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{}, {}, {}]}]}]}).encode()
    assert count_logs_json(body) == 3

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "attributes",
                         "key", "value", "intValue", "arrayValue", "values", "links", "status", "kind",
                         "events", "name", "timeUnixNano"]),
        children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_protobuf_decoders_only_raise_malformed(body):
    for decode in (decode_traces_protobuf, decode_metrics_protobuf, count_logs_protobuf):
        try:
            decode(body)
        except MalformedPayload:
            pass


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_json_decoders_only_raise_malformed(value):
    body = json.dumps(value).encode()
    for decode in (decode_traces_json, decode_metrics_json, count_logs_json):
        try:
            decode(body)
        except MalformedPayload:
            pass
