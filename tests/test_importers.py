"""Span importers: Collector file-exporter OTLP JSON lines (made by the SDK's own encoder) and Jaeger JSON."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from cli_helpers import load_analysis, run_tailscope
from otlp_json_helpers import record_requests, write_collector_file
from run_builders import TRITON_FIXTURE, requests_around, triton_requests, write_requests_run

from tailscope.rundir import load_run
from tailscope.tracing.ingest.importers import SpanImportError, import_spans


@pytest.fixture(scope="module")
def sdk_spans():
    return record_requests(6)


def _server_spans(spans):
    return [s for s in spans if s.name.startswith("POST")]


def test_collector_file_round_trip(tmp_path, sdk_spans):
    run_dir = write_requests_run(tmp_path / "run", requests_around(_server_spans(sdk_spans)))
    exported = tmp_path / "traces.jsonl"
    write_collector_file(exported, [sdk_spans[:10], sdk_spans[10:]])
    with open(exported, "a", encoding="utf-8") as fh:  # the file exporter interleaves other signals
        fh.write('{"resourceMetrics":[]}\n\n')
    results, written = import_spans(run_dir, [str(exported)])
    (result,) = results
    assert (result.format, result.spans, result.gc_events, result.duplicates, result.skipped_lines) == \
        ("otlp-json", 18, 1, 0, 1)
    assert sorted(os.path.basename(p) for p in written) == ["events.import.arrow", "spans.import.arrow"]
    assert not [f for f in os.listdir(run_dir) if f.endswith(".partial")]
    run = load_run(run_dir)
    rows = {r["span_id"]: r for r in run.spans.to_pylist()}
    for sdk in sdk_spans:
        if sdk.name == "gc.pause":
            continue
        row = rows[format(sdk.context.span_id, "016x")]
        assert row["trace_id"] == format(sdk.context.trace_id, "032x")
        assert row["parent_span_id"] == (format(sdk.parent.span_id, "016x") if sdk.parent else None)
        assert (row["name"], row["start_ns"], row["end_ns"]) == (sdk.name, sdk.start_time, sdk.end_time)
        assert json.loads(row["attributes"]) == dict(sdk.attributes)
        assert (row["service"], row["pid"], row["kind"]) == ("sdk-service", 4321, 2 if sdk.name.startswith("POST") else 1)
        if sdk.events:
            assert json.loads(row["events"]) == [{"name": "QUEUE_START", "t_ns": sdk.events[0].timestamp,
                                                  "attributes": {"depth": sdk.events[0].attributes["depth"]}}]
    (gc,) = [e for e in run.events.to_pylist() if e["kind"] == "gc_pause"]
    assert json.loads(gc["attributes"])["generation"] == 2


def test_importing_twice_adds_nothing_and_a_new_file_gets_a_new_writer(tmp_path, sdk_spans):
    run_dir = write_requests_run(tmp_path / "run", requests_around(_server_spans(sdk_spans)))
    first = tmp_path / "first.jsonl"
    write_collector_file(first, [sdk_spans[:9]])
    import_spans(run_dir, [str(first)])
    both = tmp_path / "both.jsonl.gz"
    with gzip.open(both, "wt", encoding="utf-8") as fh:
        from otlp_json_helpers import otlp_json
        fh.write(json.dumps(otlp_json(sdk_spans)) + "\n")
    (result,), written = import_spans(run_dir, [str(both)])
    assert (result.spans, result.duplicates) == (9, 9)
    assert os.path.basename(written[0]) == "spans.import-2.arrow"
    assert len(load_run(run_dir).spans) == 18
    (again,), written = import_spans(run_dir, [str(both)])
    assert (again.spans, again.gc_events, again.duplicates, written) == (0, 0, 19, [])


JAEGER = {
    "data": [{
        "traceID": "7d3c5f0f2a1b9e88",  # 64-bit id: left-padded to 128 bits
        "spans": [
            {"traceID": "7d3c5f0f2a1b9e88", "spanID": "00000000000000a1", "operationName": "POST /predict",
             "references": [], "startTime": 1_767_225_600_000_000, "duration": 12_000,
             "tags": [{"key": "span.kind", "type": "string", "value": "server"},
                      {"key": "http.status_code", "type": "int64", "value": 200}],
             "logs": [], "processID": "p1"},
            {"traceID": "7d3c5f0f2a1b9e88", "spanID": "00000000000000a2", "operationName": "model.forward",
             "references": [{"refType": "CHILD_OF", "traceID": "7d3c5f0f2a1b9e88", "spanID": "00000000000000a1"},
                            {"refType": "FOLLOWS_FROM", "traceID": "00000000000000000000000000000abc",
                             "spanID": "0000000000000def"}],
             "startTime": 1_767_225_600_002_000, "duration": 8_000,
             "tags": [{"key": "error", "type": "bool", "value": True}, {"key": "batch.size", "type": "int64", "value": 4}],
             "logs": [{"timestamp": 1_767_225_600_003_000,
                       "fields": [{"key": "event", "type": "string", "value": "QUEUE_START"},
                                  {"key": "depth", "type": "int64", "value": 3}]}],
             "processID": "p1"},
        ],
        "processes": {"p1": {"serviceName": "bento", "tags": [{"key": "process.pid", "type": "int64", "value": 99}]}},
    }]
}


def test_jaeger_export(tmp_path):
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(JAEGER, indent=2))
    run_dir = write_requests_run(tmp_path / "run", [])
    (result,), _ = import_spans(run_dir, [str(path)])
    assert (result.format, result.spans) == ("jaeger", 2)
    rows = {r["name"]: r for r in load_run(run_dir).spans.to_pylist()}
    root, child = rows["POST /predict"], rows["model.forward"]
    assert root["trace_id"] == "00000000000000007d3c5f0f2a1b9e88" and root["parent_span_id"] is None
    assert (root["kind"], root["status_code"], root["service"], root["pid"]) == (2, 0, "bento", 99)
    assert (root["start_ns"], root["end_ns"]) == (1_767_225_600_000_000_000, 1_767_225_600_012_000_000)
    assert json.loads(root["attributes"]) == {"http.status_code": 200}
    assert child["parent_span_id"] == "00000000000000a1" and child["status_code"] == 2
    assert json.loads(child["links"]) == [{"trace_id": "00000000000000000000000000000abc", "span_id": "0000000000000def"}]
    assert json.loads(child["events"]) == [{"name": "QUEUE_START", "t_ns": 1_767_225_600_003_000_000,
                                            "attributes": {"depth": 3}}]


def test_bad_otlp_line_names_file_and_line_and_writes_nothing(tmp_path, sdk_spans):
    run_dir = write_requests_run(tmp_path / "run", [])
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    write_collector_file(good, [sdk_spans[:4]])
    write_collector_file(bad, [sdk_spans[:4], sdk_spans[4:8]])
    lines = bad.read_text().splitlines()
    lines.insert(1, lines[1].replace('"traceId":"', '"traceId":"zz', 1))
    bad.write_text("\n".join(lines) + "\n")
    before = sorted(os.listdir(run_dir))
    with pytest.raises(SpanImportError) as info:
        import_spans(run_dir, [str(good), str(bad)])
    assert str(info.value).startswith(f"{bad}:2: ") and "traceId" in str(info.value)
    assert sorted(os.listdir(run_dir)) == before  # nothing half-written, no temporary files left


def test_bad_jaeger_span_names_its_line(tmp_path):
    broken = json.loads(json.dumps(JAEGER))
    broken["data"][0]["spans"][1]["startTime"] = "soon"
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(broken, indent=2))
    text = path.read_text()
    expected_line = text[:text.index('"00000000000000a2"')].count("\n") + 1
    with pytest.raises(SpanImportError) as info:
        import_spans(write_requests_run(tmp_path / "run", []), [str(path)])
    assert f":{expected_line}: data[0].spans[1]: startTime" in str(info.value)
    not_json = tmp_path / "cut.json"
    not_json.write_text(json.dumps(JAEGER, indent=2)[:300])
    with pytest.raises(SpanImportError, match=r"cut\.json:\d+: not valid JSON"):
        import_spans(str(tmp_path / "run"), [str(not_json)], "jaeger")


def test_cli_import_then_report_maps_triton_stages(tmp_path):
    run_dir = write_requests_run(tmp_path / "run", triton_requests(), scenario={"stages": {"preset": "triton"}})
    proc = run_tailscope("import-spans", run_dir, TRITON_FIXTURE, "--report", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "180 spans" in proc.stdout and "1 non-trace lines skipped" in proc.stdout
    stages = load_analysis(run_dir)["stages"]
    assert stages["joined_requests"] == 60 and stages["rules"]["preset"] == "triton"
    assert stages["unmapped_span_names"] == []
    assert set(stages["by_stage"]) == {"request_parse", "enqueue", "queue", "compute_input", "inference",
                                       "compute_output", "response_serialize", "http_send", "request_release", "server",
                                       "unaccounted", "outside_server"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    proc = run_tailscope("import-spans", run_dir, str(bad))
    assert proc.returncode == 2 and f"{bad}:1: neither OTLP JSON lines" in proc.stderr
    proc = run_tailscope("import-spans", run_dir, str(bad), "--format", "otlp-json")
    assert proc.returncode == 2 and f"{bad}:1: not a JSON object" in proc.stderr
    assert "nothing was imported" in proc.stderr
