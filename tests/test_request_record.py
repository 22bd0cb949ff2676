"""The request record type is the run format's one description of requests.arrow, latency is
defined once, and every path a record takes to the Arrow writer writes the same bytes."""

from __future__ import annotations

import ast
import inspect
import os
import re
import typing

import pyarrow as pa
import pytest

from tailscope.loadgen.distributed import MergedRecords, WorkerOutbox
from tailscope.loadgen.record_keeper import RecordKeeper
from tailscope.loadgen.recorder import Recorder
from tailscope.rundir import Appender, read_stream, schema
from tailscope.rundir.request_record import (
    HTTP_FIELDS,
    KIND_FIELDS,
    RequestRecord,
    arrow_schema,
    http_record,
    latency_ns,
    lateness_ns,
    service_ns,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_700_000_000 * 10**9
MS = 10**6


def _doc_columns() -> list[tuple[str, str]]:
    """(column, type without '?') of docs/run-format.md's requests.arrow table, in order."""
    text = open(os.path.join(ROOT, "docs", "run-format.md"), encoding="utf-8").read()
    section = text.split("## requests.arrow", 1)[1].split("\n## ", 1)[0]
    columns = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-z_]+)`", cells[0]):
            columns.append((name, cells[1].rstrip("?")))
    return columns


def test_the_record_type_is_the_requests_schema_field_by_field_in_order_with_types():
    hints = typing.get_type_hints(RequestRecord, include_extras=True)
    assert RequestRecord._fields == tuple(schema.REQUESTS_SCHEMA.names)
    for field, name in zip(schema.REQUESTS_SCHEMA, RequestRecord._fields):
        python_type, arrow_type = typing.get_args(hints[name])[0], hints[name].__metadata__[0]
        assert field.type == arrow_type, name
        base = {t for t in typing.get_args(python_type) or (python_type,) if t is not type(None)}
        assert base == ({str} if pa.types.is_string(arrow_type) else {int}), name
    assert arrow_schema(RequestRecord).equals(schema.REQUESTS_SCHEMA)
    assert schema.SCHEMAS[schema.REQUESTS] is schema.REQUESTS_SCHEMA
    assert KIND_FIELDS == RequestRecord._fields[23:31]
    # The documentation's table is the same columns, in the same order, of the same types.
    assert _doc_columns() == [(f.name, str(f.type)) for f in schema.REQUESTS_SCHEMA]


def test_the_three_durations_on_ints_and_arrays():
    import numpy as np

    assert latency_ns(T0, T0 + 7 * MS) == 7 * MS
    assert service_ns(T0 + 2 * MS, T0 + 7 * MS) == 5 * MS
    assert lateness_ns(T0, T0 + 2 * MS) == 2 * MS
    scheduled, end = np.array([T0, T0 + 1], dtype=np.int64), np.array([T0 + 5, T0 + 9], dtype=np.int64)
    assert latency_ns(scheduled, end).tolist() == [5, 8]


def test_the_fast_http_record_equals_the_keyword_record():
    fields = dict(scheduled_ns=T0, sent_ns=T0 + 5, end_ns=T0 + 9 * MS, first_byte_ns=T0 + 8 * MS, cls="a",
                  status=200, bytes_out=10, bytes_in=20, trace_id="ab" * 16, error_kind=None, error=None,
                  chunks=3, max_gap_ns=MS, worker=2)
    record = http_record(**fields)
    assert type(record) is RequestRecord and record == RequestRecord(**fields)
    assert record.prompt_tokens is None and record.document_tokens is None and len(record) == len(HTTP_FIELDS) + 21
    failed = dict(fields, status=503, error_kind="http", error="HTTP 503")
    assert http_record(**failed, error_body="busy") == RequestRecord(**failed, error_body="busy")
    assert HTTP_FIELDS == tuple(inspect.signature(http_record).parameters)[:14]


def _subtractions(path: str) -> list[str]:
    """``end... - scheduled...`` subtractions (names or attributes) written out in a module."""
    def name(node) -> str:
        return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""

    tree = ast.parse(open(path, encoding="utf-8").read())
    return [f"{path}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and name(node.left).startswith("end") and name(node.right).startswith("scheduled")]


def test_latency_is_computed_only_by_the_one_named_function():
    """The generator (live stats, windows, retention, merge, Locust events) and the analyzers'
    request arrays call request_record.latency_ns; none writes ``end - scheduled`` itself."""
    found = []
    for folder in ("loadgen", os.path.join("analyzers", "inputs")):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                found += _subtractions(os.path.join(ROOT, folder, name))
    assert found == []
    # and the check can see one (it is not vacuous)
    assert _subtractions(os.path.join(ROOT, "benchmarks", "loadgen_co.py"))


def _records() -> list[RequestRecord]:
    """A mix of plain, streamed, failed, dropped and OpenAI-API records (every column used)."""
    out = []
    for i in range(60):
        t = T0 + i * 3 * MS
        if i % 11 == 5:
            out.append(RequestRecord(t, None, t + MS, None, "b", 0, 0, 0, None, "dropped", "cap full"))
        elif i % 7 == 3:
            out.append(RequestRecord(t, t + MS, t + 9 * MS, t + 8 * MS, "a", 503, 10, 30, f"{i:032x}", "http",
                                     "HTTP 503", error_body='{"detail": "busy"}'))
        elif i % 3 == 0:
            out.append(RequestRecord(t, t, t + 40 * MS, t + 5 * MS, "chat", 200, 400, 900, f"{i:032x}", None, None,
                                     12, 9 * MS, 0, 120, 12, "usage", "stop", t + 39 * MS, None, 7, 2, 3,
                                     4, 8, t + 5 * MS, t + 9 * MS, t + 10 * MS, t + 39 * MS, 0, None,
                                     1, 4096, None, None))
        else:
            out.append(RequestRecord(t, t + i, t + (5 + i % 4) * MS, t + 4 * MS, "a", 200, 10, 20,
                                     f"{i:032x}", None, None))
    return out


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("worker", [0, 2])
def test_every_path_to_the_writer_writes_the_same_bytes(tmp_path, worker):
    """Recorder → Appender (one process) and Recorder → worker column buffer → records
    message → master merge → Appender (columns end to end) give byte-identical files."""
    direct = Appender(tmp_path / "direct.arrow", schema.REQUESTS_SCHEMA)
    recorder = Recorder(direct, worker=worker)
    for record in _records():
        recorder.record(record)  # records built with worker 0: the recorder writes its own index
    direct.close()

    merged_sink = Appender(tmp_path / "merged.arrow", schema.REQUESTS_SCHEMA)
    merged = MergedRecords(merged_sink)
    outbox = WorkerOutbox(worker, max_rows=17)
    worker_recorder = Recorder(outbox.requests, worker=worker)
    for record in _records():
        worker_recorder.record(record)
    for message in outbox.messages():
        merged.add_batch(message)
    merged_sink.close()

    assert _bytes(tmp_path / "direct.arrow") == _bytes(tmp_path / "merged.arrow")
    table = read_stream(tmp_path / "direct.arrow", schema.REQUESTS_SCHEMA).table
    assert table.schema.equals(schema.REQUESTS_SCHEMA) and table.num_rows == 60
    assert set(table.column("worker").to_pylist()) == {worker}
    assert [RequestRecord(**row)._replace(worker=0) for row in table.to_pylist()] == _records()
    assert (recorder.completed, recorder.dropped) == (merged.completed, 60 - merged.completed)


def test_the_record_keeper_writes_the_same_bytes_from_a_recorder_and_from_the_merge(tmp_path):
    """The conductor's sink takes records one by one (it counts each): Recorder → RecordKeeper
    and worker → messages → MergedRecords → RecordKeeper write identical requests.arrow files."""
    def keeper(name: str) -> RecordKeeper:
        run_dir = tmp_path / name
        run_dir.mkdir()
        return RecordKeeper(Appender(run_dir / schema.REQUESTS, schema.REQUESTS_SCHEMA),
                            Appender(run_dir / schema.WINDOWS, schema.WINDOWS_SCHEMA), str(run_dir))

    direct = keeper("direct")
    recorder = Recorder(direct, worker=1)
    for record in _records():
        recorder.record(record)
    merged_keeper = keeper("merged")
    merged = MergedRecords(merged_keeper)
    outbox = WorkerOutbox(1, max_rows=25)
    worker_recorder = Recorder(outbox.requests, worker=1)
    for record in _records():
        worker_recorder.record(record)
    for message in outbox.messages():
        merged.add_batch(message)
    for sink in (direct, merged_keeper):
        sink.close()
        sink.requests.close()
    assert direct.kept == merged_keeper.kept == 60
    assert _bytes(tmp_path / "direct" / schema.REQUESTS) == _bytes(tmp_path / "merged" / schema.REQUESTS)
