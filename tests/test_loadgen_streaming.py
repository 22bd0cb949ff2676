"""Streamed responses end to end: a real Locust runner (subprocess) reads
server-sent events, JSON lines and plain chunked bodies from a loopback
server that paces its tokens; the records, chunks.arrow and the analysis
(TTFT, ITL, tokens/s, SLOs, goodput) are checked against the pacing. Also
the in-flight cap's drop policy and the generator's self-check output."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from test_loadgen_runner import run_plan, serve  # noqa: F401  (fixture)

from tailscope.analyzers.analysis import analyze_run
from tailscope.loadgen.streams import ChunkTimer, framing_of
from tailscope.rundir import read_stream, schema, write_json_atomic

MS = 1_000_000
TOKENS = 8
TTFT_S = 0.06
GAP_S = 0.02


class _StreamHandler(BaseHTTPRequestHandler):
    """/sse: headers at once, the first event after TTFT_S, then one every GAP_S,
    then ``data: [DONE]``; /ndjson: the same as JSON lines; /chunked: 4 plain chunks."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.path.strip("/")
        media = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}.get(kind, "text/plain")
        self.send_response(200)
        self.send_header("Content-Type", media)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        count = 4 if kind == "chunked" else TOKENS
        time.sleep(TTFT_S)
        for i in range(count):
            if i:
                time.sleep(GAP_S)
            if kind == "sse":
                piece = f": keep-alive\n\ndata: {{\"token\": {i}}}\n\n".encode()
            elif kind == "ndjson":
                piece = json.dumps({"token": i}).encode() + b"\n"
            else:
                piece = b"x" * 100
            self._chunk(piece)
        if kind == "sse":
            self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def stream_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StreamHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_chunk_framing_by_content_type():
    sse = ChunkTimer("text/event-stream; charset=utf-8")
    sse.feed(b": ping\n\ndata: a\n\ndata: b\r\n", 1)
    sse.feed(b"\r\ndata: [DONE]\n\n", 2)
    sse.finish(3)
    assert sse.times == [1, 2] and framing_of(None) == "reads"
    lines = ChunkTimer("application/x-ndjson")
    lines.feed(b'{"a": 1}\n{"a"', 5)
    lines.feed(b': 2}', 6)
    lines.finish(7)
    assert lines.times == [5, 7]
    reads = ChunkTimer("text/plain")
    for t in (10, 13, 20):
        reads.feed(b"xy", t)
    assert reads.times == [10, 13, 20] and reads.max_gap_ns == 7 and reads.bytes == 6


def test_streamed_tokens_are_timed_recorded_and_analysed(stream_server, tmp_path):
    classes = [{"name": "chat", "path": "/sse", "stream": True, "weight": 2},
               {"name": "lines", "path": "/ndjson", "stream": True},
               {"name": "raw", "path": "/chunked", "stream": True}]
    plan = {"target": stream_server, "duration_s": 1.0, "arrival": {"process": "constant", "rate": 12},
            "classes": classes, "seed": 3, "timeout_s": 5.0}
    result, _, rec = run_plan(tmp_path, plan)
    assert result["completed"] == 12 and not any(rec["error_kind"])
    for i, cls in enumerate(rec["cls"]):
        expected = 4 if cls == "raw" else TOKENS
        assert rec["chunks"][i] == expected, (cls, rec["chunks"][i])
        ttft = rec["first_byte_ns"][i] - rec["sent_ns"][i]
        assert TTFT_S * 1e9 <= ttft < TTFT_S * 1e9 + 60 * MS  # the first token, not the headers
        assert GAP_S * 1e9 * 0.9 <= rec["max_gap_ns"][i] < GAP_S * 1e9 + 60 * MS
    chunks = read_stream(tmp_path / schema.CHUNKS, schema.CHUNKS_SCHEMA).table
    assert len(chunks) == sum(rec["chunks"])
    by_trace: dict[str, list] = {}
    for trace, index, t in zip(*(chunks.column(c).to_pylist() for c in ("trace_id", "index", "t_ns"))):
        by_trace.setdefault(trace, []).append((index, t))
    assert set(by_trace) == set(rec["trace_id"])
    for items in by_trace.values():
        assert [i for i, _ in items] == list(range(len(items)))
        assert all(b[1] > a[1] for a, b in zip(items, items[1:]))

    write_json_atomic(tmp_path / schema.MANIFEST, {
        "format_version": "1.1", "status": "complete", "start_ns": result["start_ns"],
        "end_ns": result["end_ns"], "arrival": {"loop": "open", "process": "constant", "rate": 12},
        "scenario": {"slo": ["chat: ttft p99 < 500ms", "itl p50 < 100ms", "lines: itl p99 < 5ms",
                             "goodput >= 50%"]}})
    analysis = analyze_run(str(tmp_path))
    streaming = analysis["streaming"]
    assert set(streaming["classes"]) == {"chat", "lines", "raw"}
    chat = streaming["classes"]["chat"]
    assert chat["requests"] == sum(c == "chat" for c in rec["cls"]) and chat["chunks_per_request"] == TOKENS
    assert TTFT_S * 1e3 <= chat["ttft_ms"]["p50"]["value_ms"] < TTFT_S * 1e3 + 60
    assert GAP_S * 1e3 * 0.9 <= chat["itl_ms"]["p50"]["value_ms"] < GAP_S * 1e3 + 15
    assert chat["itl_ms"]["p50"]["n"] == chat["requests"] * (TOKENS - 1)
    assert 1 / (GAP_S + 0.015) < chat["decode_tokens_per_s_p50"] <= 1 / (GAP_S * 0.9)
    assert streaming["requests"] == 12 and streaming["ttft_ms"]["p50"]["n"] == 12
    verdict = {row["slo"]: row for row in analysis["verdict"]["slos"]}
    # a handful of chat requests cannot claim a P99: it holds as observed, and is not a pass
    chat_ttft = verdict["chat: ttft p99 < 500ms"]
    assert chat_ttft["status"] == "unclaimed" and chat_ttft["observed"] < 500 and not chat_ttft["passed"]
    assert verdict["itl p50 < 100ms"]["passed"]
    assert not verdict["lines: itl p99 < 5ms"]["passed"]  # 20 ms gaps
    goodput = analysis["summary"]["goodput"]
    # every "lines" request misses its ITL objective; every other request meets all of its own
    lines = sum(c == "lines" for c in rec["cls"])
    assert goodput["good"] == 12 - lines and goodput["by_class"]["lines"]["share"] == 0.0
    assert goodput["by_class"]["chat"]["share"] == 1.0
    assert verdict["goodput >= 50%"]["passed"] == (goodput["share"] >= 0.5)


def test_drop_policy_records_drops_and_never_waits(serve, tmp_path):  # noqa: F811
    server = serve(service_s=0.2)
    plan = {"target": server.url, "duration_s": 1.0, "arrival": {"process": "constant", "rate": 20},
            "classes": [{"name": "get", "path": "/", "method": "GET"}], "seed": 5, "timeout_s": 5.0,
            "max_in_flight": 2, "in_flight_policy": "drop"}
    result, progress, rec = run_plan(tmp_path, plan)
    kinds = rec["error_kind"]
    dropped = [i for i, k in enumerate(kinds) if k == "dropped"]
    sent = [i for i, k in enumerate(kinds) if k is None]
    assert len(kinds) == 20 and len(dropped) + len(sent) == 20
    assert 8 <= len(dropped) <= 14 and result["dropped"] == len(dropped) == progress[-1]["dropped"]
    assert server.max_concurrency <= 2 and len(server.traceparents) == len(sent)
    assert all(rec["sent_ns"][i] is None and "in-flight cap of 2 full" in rec["error"][i] for i in dropped)
    # a drop is recorded when it was due: nothing waits for a slot
    assert all(rec["end_ns"][i] - rec["scheduled_ns"][i] < 20 * MS for i in dropped)
    lateness = np.array([rec["sent_ns"][i] - rec["scheduled_ns"][i] for i in sent])
    assert np.median(lateness) < 5 * MS

    write_json_atomic(tmp_path / schema.MANIFEST, {
        "format_version": "1.1", "status": "complete", "start_ns": result["start_ns"],
        "options": {"max_in_flight": 2, "in_flight_policy": "drop"},
        "arrival": {"loop": "open", "process": "constant", "rate": 20}})
    analysis = analyze_run(str(tmp_path))
    assert analysis["summary"]["dropped"] == len(dropped) == analysis["summary"]["errors_by_kind"]["dropped"]
    assert analysis["generator"]["in_flight_policy"] == "drop"
    warning = next(w for w in analysis["warnings"] if w["code"] == "dropped")
    assert f"{len(dropped)} requests were never sent" in warning["message"] and "cap of 2" in warning["message"]


def test_the_generator_records_its_cpu_and_run_queue_wait(serve, tmp_path):  # noqa: F811
    server = serve(service_s=0.001)
    plan = {"target": server.url, "duration_s": 2.5, "arrival": {"process": "poisson", "rate": 100},
            "classes": [{"name": "get", "path": "/", "method": "GET"}], "seed": 5, "timeout_s": 5.0}
    run_plan(tmp_path, plan)
    table = read_stream(tmp_path / "signals.generator.arrow", schema.SIGNALS_SCHEMA).table
    series = table.column("series").to_pylist()
    values = dict(zip(series, table.column("value").to_pylist()))
    assert series.count("generator.cpu_percent") >= 2
    assert 0 < values["generator.cpu_percent"] <= 100 * (os.cpu_count() or 1)
    if os.path.exists("/proc/self/schedstat"):
        assert values["generator.runqueue_wait_ms"] >= 0
    events = read_stream(tmp_path / schema.EVENTS, schema.EVENTS_SCHEMA).table
    assert set(events.column("kind").to_pylist()) <= {"generator_gc"}
    assert set(events.column("source").to_pylist()) <= {"generator"}
