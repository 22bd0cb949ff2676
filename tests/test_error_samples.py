"""Error samples: per class, up to 20 distinct errors with counts and the first 256 bytes of the body.

Fed through the real sinks: the recorder writes rows into the record keeper (one
process), or into workers' outboxes whose messages the master merges into the
keeper (a distributed run); ``error_samples.json`` is read back as the analysis reads it.
"""

from __future__ import annotations

import json
import os

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.inputs.error_samples import error_samples_section
from tailscope.loadgen.distributed import MergedRecords, WorkerOutbox
from tailscope.loadgen.error_samples import BODY_BYTES, MAX_SAMPLES_PER_CLASS, ErrorSamples
from tailscope.loadgen.record_keeper import RecordKeeper
from tailscope.loadgen.recorder import Recorder
from tailscope.rundir import schema
from tailscope.rundir.appender import Appender
from tailscope.rundir.request_record import RequestRecord

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def keeper(run_dir: str) -> RecordKeeper:
    os.makedirs(run_dir, exist_ok=True)
    return RecordKeeper(Appender(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA),
                        Appender(os.path.join(run_dir, schema.WINDOWS), schema.WINDOWS_SCHEMA), run_dir)


def record(recorder: Recorder, i: int, cls: str, status: int = 200, kind: str | None = None,
           error: str | None = None, body: str | None = None) -> None:
    t = T0 + i * MS
    recorder.record(RequestRecord(t, t, t + 5 * MS, t + 4 * MS, cls, status, 10, 10, f"{i:032x}", kind, error,
                                  error_body=body))


def test_twenty_distinct_errors_per_class_then_counts_only():
    samples = ErrorSamples()
    for i in range(25):
        samples.add("a", 500, "http", "HTTP 500", f"error {i}")
    for _ in range(3):
        samples.add("a", 500, "http", "HTTP 500", "error 0")
    samples.add("b", 0, "timeout", "no complete response within 2 s", None)
    data = samples.as_dict()["classes"]
    assert len(data["a"]["samples"]) == MAX_SAMPLES_PER_CLASS
    assert data["a"]["unsampled"] == 5 and data["a"]["errors"] == 28
    assert data["a"]["samples"][0] == {"status": 500, "error_kind": "http", "message": "HTTP 500",
                                       "body": "error 0", "count": 4, "first_ns": None}
    assert data["b"]["samples"][0]["message"] == "no complete response within 2 s"


def test_a_body_is_cut_at_256_bytes_without_splitting_a_character():
    samples = ErrorSamples()
    samples.add("a", 500, "http", "HTTP 500", "x" * 255 + "é" + "y" * 100)
    body = samples.as_dict()["classes"]["a"]["samples"][0]["body"]
    assert body == "x" * 255 and len(body.encode()) <= BODY_BYTES


def test_the_record_keeper_saves_the_samples_of_every_error(tmp_path):
    run_dir = str(tmp_path / "run")
    sink = keeper(run_dir)
    recorder = Recorder(sink)
    for i in range(300):
        if i % 10 == 0:
            record(recorder, i, "infer", 503, "http", "HTTP 503", body='{"detail": "queue full"}')
        elif i % 25 == 1:
            record(recorder, i, "infer", 0, "reset", "ConnectionResetError: [Errno 104] reset by peer")
        else:
            record(recorder, i, "infer")
    sink.close()
    section = error_samples_section(run_dir)
    infer = section.classes["infer"]
    assert section.available and infer.errors == 30 + 12 and infer.unsampled == 0
    assert [(s.status, s.count, s.body) for s in infer.samples] == [
        (503, 30, '{"detail": "queue full"}'), (0, 12, None)]  # most frequent first


def test_a_distributed_runs_workers_are_merged_on_the_master(tmp_path):
    run_dir = str(tmp_path / "run")
    sink = keeper(run_dir)
    merged = MergedRecords(sink)
    for worker in range(2):
        outbox = WorkerOutbox(worker)
        recorder = Recorder(outbox.requests, worker=worker)
        for i in range(worker, 100, 2):
            if i % 5 == 0:
                record(recorder, i, "infer", 500, "http", "HTTP 500", body=f"<h1>worker {worker}</h1>")
            else:
                record(recorder, i, "infer")
        for message in outbox.messages():
            merged.add_batch(message)
    sink.close()
    infer = error_samples_section(run_dir).classes["infer"]
    assert {s.body: s.count for s in infer.samples} == {"<h1>worker 0</h1>": 10, "<h1>worker 1</h1>": 10}
    with open(os.path.join(run_dir, schema.ERROR_SAMPLES), encoding="utf-8") as fh:
        assert json.load(fh)["max_per_class"] == MAX_SAMPLES_PER_CLASS


def test_a_run_without_samples_has_none(tmp_path):
    assert encode(error_samples_section(str(tmp_path))) == {"available": False, "max_per_class": None, "classes": {}}


def test_a_hand_edited_samples_file_reads_what_is_well_formed(tmp_path):
    """error_samples.json is the harness's file but a person may edit it: a status, first time or
    limit that is not an integer reads None, a text that is not text is made text, an entry without
    an integer count is left out — the section stays the shape its type states."""
    with open(tmp_path / schema.ERROR_SAMPLES, "w", encoding="utf-8") as fh:
        json.dump({"max_per_class": "20", "classes": {"infer": {"errors": 7, "unsampled": 1, "samples": [
            {"status": "503", "error_kind": "http", "message": 42, "body": None, "count": 5, "first_ns": "soon"},
            {"status": 500, "error_kind": "http", "message": "HTTP 500", "body": "x", "count": 2, "first_ns": 7},
            {"status": 500, "count": "many"}]}}}, fh)
    section = error_samples_section(str(tmp_path))
    assert section.available and section.max_per_class is None
    first, second = section.classes["infer"].samples
    assert (first.status, first.message, first.first_ns, first.count) == (None, "42", None, 5)
    assert (second.status, second.first_ns, second.count) == (500, 7, 2)
    assert json.loads(json.dumps(encode(section)))["classes"]["infer"]["unsampled"] == 1
