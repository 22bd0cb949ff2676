"""The run directory: appends read back, a truncated last batch is tolerated."""

import json
import os

import pyarrow as pa
import pytest

from tailscope.rundir import Appender, RunDirError, RunWriter, load_run, read_stream, schema


def _request_row(i):
    return (1_000 + i, 1_001 + i, 2_000 + i, None, "c", 200, 10, 20, f"{i:032x}", None, None, 0, None, 0)


def test_batches_read_back(tmp_path):
    path = tmp_path / schema.REQUESTS
    app = Appender(path, schema.REQUESTS_SCHEMA)
    for batch in range(3):
        for i in range(100):
            app.append(*_request_row(batch * 100 + i))
        app.flush()
    app.close()
    read = read_stream(path, schema.REQUESTS_SCHEMA)
    assert read.table.num_rows == 300 and not read.truncated
    assert read.table.column("trace_id")[299].as_py() == f"{299:032x}"


def test_truncated_last_batch_reads_every_complete_batch(tmp_path):
    path = tmp_path / schema.REQUESTS
    app = Appender(path, schema.REQUESTS_SCHEMA)
    sizes = []
    for batch in range(4):
        for i in range(50):
            app.append(*_request_row(batch * 50 + i))
        app.flush()
        sizes.append(os.path.getsize(path))
    # Simulate a writer killed in the middle of writing the 4th batch.
    with open(path, "r+b") as fh:
        fh.truncate(sizes[2] + (sizes[3] - sizes[2]) // 2)
    read = read_stream(path, schema.REQUESTS_SCHEMA)
    assert read.truncated
    assert read.table.num_rows == 150


def test_missing_file_is_empty_table(tmp_path):
    read = read_stream(tmp_path / "nope.arrow", schema.SPANS_SCHEMA)
    assert read.missing and read.table.num_rows == 0
    assert read.table.schema == schema.SPANS_SCHEMA


def test_run_writer_and_loader(tmp_path):
    w = RunWriter(str(tmp_path / "run"), {"name": "x", "scenario": {}})
    w.requests.append(*_request_row(1))
    w.add_event("fault", 1, 2, "test", {"k": 1})
    # a second writer's events file is part of the same logical table
    extra = Appender(tmp_path / "run" / schema.writer_file(schema.EVENTS, "receiver"), schema.EVENTS_SCHEMA)
    extra.append("gc_pause", 5, 6, "target", "{}")
    extra.close()
    w.close()
    run = load_run(tmp_path / "run")
    assert run.manifest["status"] == "complete" and run.complete
    assert run.requests.num_rows == 1
    assert sorted(run.events.column("kind").to_pylist()) == ["fault", "gc_pause"]


def test_running_manifest_means_incomplete(tmp_path):
    w = RunWriter(str(tmp_path / "run"), {"name": "x"})
    w.requests.append(*_request_row(1))
    w.requests.flush()
    run = load_run(tmp_path / "run")  # the writer never closed: like kill -9
    assert not run.complete and run.requests.num_rows == 1
    w.close()


def test_newer_major_format_is_rejected(tmp_path):
    os.makedirs(tmp_path / "run")
    (tmp_path / "run" / schema.MANIFEST).write_text(json.dumps({"format_version": "99.0"}))
    with pytest.raises(RunDirError, match="newer"):
        load_run(tmp_path / "run")


def test_not_a_run_dir(tmp_path):
    with pytest.raises(RunDirError, match="not a tailscope run"):
        load_run(tmp_path)


def test_older_run_missing_a_column_reads_with_nulls(tmp_path):
    old_schema = pa.schema([f for f in schema.REQUESTS_SCHEMA if f.name != "worker"])
    path = tmp_path / schema.REQUESTS
    app = Appender(path, old_schema)
    app.append(*_request_row(1)[:-1])
    app.close()
    table = read_stream(path, schema.REQUESTS_SCHEMA).table
    assert table.schema == schema.REQUESTS_SCHEMA and table.column("worker")[0].as_py() is None
