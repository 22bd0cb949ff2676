"""Bad input everywhere: every parser rejects with its own error type, naming what and where,
or reads correctly — never another exception (hypothesis property tests), and the CLI turns
each into exit 2 with one line."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
import yaml
from cli_helpers import run_tailscope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailscope.loadgen.datafiles import DataFileError, load_arrival_log, load_bodies, load_sizes
from tailscope.rundir import RunDirError, RunWriter, load_run, read_stream, schema
from tailscope.scenario_model.scenario import ScenarioError, parse_scenario
from tailscope.tracing.ingest.importers import FileImport, SpanImportError, read_jaeger, read_otlp_json_lines
from tailscope.tracing.ingest.otlp_decode import (
    MalformedPayload,
    decode_metrics_json,
    decode_metrics_protobuf,
    decode_traces_json,
    decode_traces_protobuf,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
GOOD_SCENARIO = {
    "name": "p", "target": "http://127.0.0.1:9", "duration": "5s", "timeout": "1s",
    "arrival": {"process": "poisson", "rate": 5},
    "classes": [{"name": "a", "path": "/x", "payload": {"kind": "json_text", "size": 10}}],
    "retention": {"full_records_around_spikes": "10s", "sample_rate": 0.1, "disk_budget": "1GB"},
}
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["10s", "-1", "2GB", "1e400", "poisson", "/x", ""]))
yaml_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def _mutated_scenario(draw_path, value):
    data = json.loads(json.dumps(GOOD_SCENARIO))
    node = data
    for key in draw_path[:-1]:
        node = node[key] if isinstance(node, dict) else node[0]
    if isinstance(node, dict):
        node[draw_path[-1]] = value
    return data


FIELD_PATHS = [("duration",), ("timeout",), ("arrival", "rate"), ("arrival", "process"), ("classes",),
               ("classes", "x", "path"), ("retention", "sample_rate"), ("retention", "disk_budget"),
               ("retention", "full_records_around_spikes"), ("retention",), ("retention", "window"),
               ("max_requests",), ("target",), ("slo",), ("signals",), ("unknown_key",)]


@PROPERTY
@given(path=st.sampled_from(FIELD_PATHS), value=yaml_values)
def test_scenario_parser_raises_only_scenario_errors_with_a_location(path, value):
    text = yaml.safe_dump(_mutated_scenario(path, value), sort_keys=False)
    try:
        parse_scenario(text, "fuzz.yaml")
    except ScenarioError as exc:
        assert str(exc).startswith("fuzz.yaml:") and exc.line >= 1


@PROPERTY
@given(text=st.text(max_size=300))
def test_scenario_parser_on_arbitrary_text(text):
    try:
        parse_scenario(text, "fuzz.yaml")
    except ScenarioError as exc:
        assert str(exc).startswith("fuzz.yaml:")


@PROPERTY
@given(body=st.binary(max_size=400))
def test_otlp_protobuf_decoders_raise_only_malformed_payload(body):
    for decode in (decode_traces_protobuf, decode_metrics_protobuf):
        try:
            decode(body)
        except MalformedPayload:
            pass


json_docs = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=34),
                                   st.floats(allow_nan=False)),
                         lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(st.sampled_from(
                                                     ["resourceSpans", "scopeSpans", "spans", "traceId", "spanId",
                                                      "name", "startTimeUnixNano", "endTimeUnixNano", "attributes",
                                                      "resource", "key", "value", "kind", "status", "links",
                                                      "resourceMetrics", "scopeMetrics", "metrics", "gauge",
                                                      "dataPoints", "asDouble", "timeUnixNano", "events"]),
                                                     inner, max_size=4)), max_leaves=20)


@PROPERTY
@given(doc=json_docs)
def test_otlp_json_decoders_raise_only_malformed_payload(doc):
    body = json.dumps(doc).encode()
    for decode in (decode_traces_json, decode_metrics_json):
        try:
            decode(body)
        except MalformedPayload:
            pass


@PROPERTY
@given(doc=json_docs)
def test_span_importers_raise_only_span_import_errors(doc):
    text = json.dumps(doc)
    for reader in (read_otlp_json_lines, read_jaeger):
        try:
            list(reader(text, "spans.json", FileImport(file="spans.json", format="x")))
        except SpanImportError as exc:
            assert "spans.json" in str(exc)


@PROPERTY
@given(content=st.binary(max_size=200))
def test_data_files_raise_only_data_file_errors(tmp_path, content):
    path = tmp_path / "data.txt"
    path.write_bytes(content)
    for load in (load_arrival_log, load_sizes, load_bodies):
        try:
            load(str(path))
        except DataFileError as exc:
            assert str(path) in str(exc)


def _small_run(path) -> str:
    writer = RunWriter(str(path), {"name": "bits", "scenario": {}})
    for i in range(300):
        writer.requests.append(10**18 + i * 10**6, 10**18 + i * 10**6, 10**18 + i * 10**6 + 5 * 10**6, None, "a",
                               200, 1, 2, f"{i:032x}", None, None, 0, None, 0)
        if i % 100 == 99:
            writer.requests.flush()
    writer.close()
    return str(path)


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory):
    return _small_run(tmp_path_factory.mktemp("pristine") / "run")


@PROPERTY
@given(cut=st.integers(0, 100_000), flips=st.lists(st.tuples(st.integers(0, 100_000), st.integers(0, 7)),
                                                   max_size=4))
def test_run_reader_on_truncated_or_flipped_streams_gives_a_table_or_run_dir_error(tmp_path, pristine_run,
                                                                                    cut, flips):
    run = tmp_path / "run"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(pristine_run, run)
    path = run / "requests.arrow"
    data = bytearray(path.read_bytes())
    data = data[: cut % (len(data) + 1)]
    for offset, bit in flips:
        if data:
            data[offset % len(data)] ^= 1 << bit
    path.write_bytes(bytes(data))
    try:
        read = read_stream(path, schema.REQUESTS_SCHEMA)
        assert read.table.schema.equals(schema.REQUESTS_SCHEMA)
        assert read.table.num_rows <= 300
        read.table.validate(full=True)
        loaded = load_run(run)
    except RunDirError as exc:
        assert str(run) in str(exc)
        return
    assert len(loaded.requests) == read.table.num_rows


@PROPERTY
@given(manifest=json_docs)
def test_a_manifest_of_any_shape_loads_or_raises_run_dir_error(tmp_path, pristine_run, manifest):
    run = tmp_path / "run"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(pristine_run, run)
    (run / "manifest.json").write_text(json.dumps(manifest))
    try:
        load_run(run)
    except RunDirError as exc:
        assert "manifest" in str(exc) or "format" in str(exc)


def test_a_newer_run_format_is_rejected_with_an_upgrade_message(tmp_path, pristine_run):
    run = tmp_path / "new"
    shutil.copytree(pristine_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "format_version": "9.0"}))
    with pytest.raises(RunDirError, match="newer than this tailscope reads.*upgrade"):
        load_run(run)


def test_an_older_run_without_new_columns_reads_them_as_nulls(tmp_path):
    old = pa.schema([f for f in schema.REQUESTS_SCHEMA if f.name not in ("chunks", "max_gap_ns", "worker")])
    run = tmp_path / "old"
    os.makedirs(run)
    (run / "manifest.json").write_text(json.dumps({"format_version": "1.0", "status": "complete",
                                                   "start_ns": 10**18, "end_ns": 10**18 + 10**9}))
    with pa.OSFile(str(run / "requests.arrow"), "wb") as sink, pa.ipc.new_stream(sink, old) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist([{"scheduled_ns": 10**18, "sent_ns": 10**18,
                                                        "end_ns": 10**18 + 10**6, "cls": "a", "status": 200,
                                                        "trace_id": "0" * 32}], schema=old))
    loaded = load_run(run)
    assert loaded.requests.column("worker").null_count == 1 and len(loaded.windows) == 0


@pytest.mark.parametrize("damage", ["manifest_list", "manifest_types", "bad_json", "column_type", "no_manifest"])
def test_report_turns_a_damaged_run_into_exit_2_with_one_line(tmp_path, pristine_run, damage, capsys):
    run = tmp_path / damage
    shutil.copytree(pristine_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    if damage == "manifest_list":
        (run / "manifest.json").write_text("[1, 2]")
    elif damage == "manifest_types":
        (run / "manifest.json").write_text(json.dumps({**manifest, "start_ns": "yesterday"}))
    elif damage == "bad_json":
        (run / "receiver.json").write_text("{not json")
    elif damage == "column_type":
        wrong = pa.schema([("scheduled_ns", pa.string())])
        with pa.OSFile(str(run / "requests.arrow"), "wb") as sink, pa.ipc.new_stream(sink, wrong) as w:
            w.write_batch(pa.RecordBatch.from_pylist([{"scheduled_ns": "soon"}], schema=wrong))
    else:
        os.unlink(run / "manifest.json")
    from tailscope.cli.main import main  # the report command never imports Locust

    assert main(["report", str(run)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tailscope: error: ") and str(run) in lines[0]
    assert not (run / "report.html").exists()


def test_run_rejects_a_bad_retention_section_before_any_load(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**GOOD_SCENARIO, "retention": {"sample_rate": 0.1, "disk_budget": "lots"}}))
    result = run_tailscope("run", str(path), "--out", str(tmp_path / "runs"), timeout=120)
    assert result.returncode == 2 and "retention.disk_budget: expected a size" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_histogram_lists_that_disagree_are_a_run_dir_error(tmp_path, pristine_run):
    run = tmp_path / "w"
    shutil.copytree(pristine_run, run)
    row = {name: 0 for name in schema.WINDOWS_SCHEMA.names}
    row.update(start_ns=10**18, end_ns=10**18 + 10**9, cls="a", latency_bucket=[1, 2], latency_count=[1],
               service_bucket=[], service_count=[], lateness_bucket=[], lateness_count=[])
    with pa.OSFile(str(run / "windows.arrow"), "wb") as sink, pa.ipc.new_stream(sink, schema.WINDOWS_SCHEMA) as w:
        w.write_batch(pa.RecordBatch.from_pylist([row], schema=schema.WINDOWS_SCHEMA))
    (run / "retention.json").write_text(json.dumps({"sample_rate": 0.1, "keep": []}))
    from tailscope.analyzers.analysis import analyze_run

    with pytest.raises(RunDirError, match="windows.arrow: latency histogram"):
        analyze_run(run)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 100_000), flips=st.lists(st.tuples(st.integers(0, 100_000), st.integers(0, 7)),
                                                   min_size=1, max_size=3))
def test_analysis_of_a_damaged_run_gives_an_analysis_or_run_dir_error(tmp_path, pristine_run, cut, flips):
    from tailscope.analyzers.analysis import analyze_run

    run = tmp_path / "run"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(pristine_run, run)
    path = run / "windows.arrow" if cut % 2 else run / "requests.arrow"
    data = bytearray(path.read_bytes())
    data = data[: max(1, cut % (len(data) + 1))]
    for offset, bit in flips:
        data[offset % len(data)] ^= 1 << bit
    path.write_bytes(bytes(data))
    try:
        analysis = analyze_run(run)
    except RunDirError as exc:
        assert str(run) in str(exc)
        return
    assert analysis["summary"]["requests"] <= 300
