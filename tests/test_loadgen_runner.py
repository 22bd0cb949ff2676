"""The load generator end to end: a real Locust runner (in a subprocess, because
Locust monkey-patches with gevent) against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tailscope.rundir import read_stream, schema

DRIVER = os.path.join(os.path.dirname(__file__), "loadgen_driver.py")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")
MS = 1_000_000


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # head and body in one write (no Nagle / delayed-ACK 40 ms stalls)
    server: RecordingServer

    def do_GET(self):
        self._serve()

    def do_POST(self):
        self._serve()

    def _serve(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.arrived(self.headers.get("traceparent"), len(body))
        try:
            if self.path.startswith("/reset"):
                self._reset_connection()
                return
            self.served_here = getattr(self, "served_here", 0) + 1
            if self.path.startswith("/one-per-connection") and self.served_here > 1:
                self.close_connection = True  # a keep-alive timeout racing the next request:
                return  # closed without an answer, as the request arrives
            time.sleep(self.server.hang_s if self.path.startswith("/hang") else self.server.service_s)
            status = 503 if self.path.startswith("/fail") else 200
            reply = b'{"ok": true}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
        finally:
            self.server.left()

    def handle_expect_100(self):
        answered = super().handle_expect_100()
        self.wfile.flush()  # the interim "100 Continue" must leave before the body is read
        return answered

    def _reset_connection(self):
        """Abort the connection with a TCP RST, no response."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def log_message(self, *args):
        pass


class RecordingServer(ThreadingHTTPServer):
    """Records every request's traceparent and body size; can stall all
    requests once (``stall_s`` long, ``stall_after_s`` after the first request)
    and serves each request in ``service_s``; ``/fail`` answers 503, ``/hang``
    answers after ``hang_s``, ``/reset`` aborts the connection."""

    daemon_threads = True

    def __init__(self, service_s=0.0, stall_after_s=None, stall_s=0.0, hang_s=1.0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service_s = service_s
        self.hang_s = hang_s
        self.stall_after_s = stall_after_s
        self.stall_s = stall_s
        self.traceparents: list[str | None] = []
        self.body_sizes: list[int] = []
        self.stall_window_ns: tuple[int, int] | None = None
        self.max_concurrency = 0
        self._concurrency = 0
        self._first_ns: int | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def arrived(self, traceparent, body_size) -> None:
        now = time.time_ns()
        with self._lock:
            self.traceparents.append(traceparent)
            self.body_sizes.append(body_size)
            self._concurrency += 1
            self.max_concurrency = max(self.max_concurrency, self._concurrency)
            self._first_ns = self._first_ns or now
            if (self.stall_after_s is not None and self.stall_window_ns is None
                    and now - self._first_ns >= self.stall_after_s * 1e9):
                self.stall_window_ns = (now, now + int(self.stall_s * 1e9))
            window = self.stall_window_ns
        if window is not None and now < window[1]:
            time.sleep((window[1] - now) / 1e9)

    def left(self) -> None:
        with self._lock:
            self._concurrency -= 1


@pytest.fixture
def serve():
    """Start a RecordingServer with the given settings; stopped at the end."""
    started = []

    def start(**settings) -> RecordingServer:
        server = RecordingServer(**settings)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                  daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_plan(tmp_path, plan: dict, stop_after_s=None, timeout_s=60):
    """Run ``plan`` in a driver subprocess; return (result, progress, records columns)."""
    config = {"run_dir": str(tmp_path), "plan": plan, "stop_after_s": stop_after_s}
    proc = subprocess.run([sys.executable, DRIVER, json.dumps(config)], capture_output=True,
                          text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    read = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA)
    assert not read.missing and not read.truncated
    columns = {name: read.table.column(name).to_pylist() for name in read.table.column_names}
    return out["result"], out["progress"], columns


def _array(columns, name) -> np.ndarray:
    return np.array(columns[name], dtype=np.int64)


def _plan(target: str, **fields) -> dict:
    plan = {
        "target": target,
        "duration_s": 2.0,
        "arrival": {"process": "constant", "rate": 50},
        "classes": [{"name": "get", "path": "/", "method": "GET"}],
        "seed": 5,
        "timeout_s": 5.0,
    }
    plan.update(fields)
    return plan


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_constant_rate_records_traceparent_and_timing(serve, tmp_path):
    server = serve(service_s=0.002)
    classes = [
        {"name": "infer", "path": "/infer", "weight": 3,
         "payload": {"kind": "json_text", "size": {"dist": "uniform", "min": 50, "max": 500}}},
        {"name": "broken", "path": "/fail", "weight": 1},
    ]
    result, progress, rec = run_plan(tmp_path, _plan(server.url, classes=classes))

    # (b) 50 req/s for 2 s: 100 records, 20 ms apart, latency >= service time >= 0
    assert len(rec["scheduled_ns"]) == 100 == result["scheduled"] == result["completed"]
    scheduled, sent, end = (_array(rec, n) for n in ("scheduled_ns", "sent_ns", "end_ns"))
    first_byte = _array(rec, "first_byte_ns")
    assert np.all(np.diff(np.sort(scheduled)) == 20 * MS)
    assert scheduled.min() == result["start_ns"]
    assert np.all(sent >= scheduled)
    assert np.all((sent <= first_byte) & (first_byte <= end))
    assert np.all(end - scheduled >= end - sent) and np.all(end - sent >= 2 * MS)
    assert np.median(sent - scheduled) < 5 * MS  # an idle generator sends on time
    assert result["stop_reason"] == "duration"
    assert result["offered_rps"] == pytest.approx(50, rel=0.02)
    assert result["achieved_rps"] == pytest.approx(50, rel=0.15)

    # (a) every request carried a valid sampled traceparent with the record's trace id
    assert len(server.traceparents) == 100
    sent_ids = {TRACEPARENT.match(h).group(1) for h in server.traceparents}
    assert sent_ids == set(rec["trace_id"]) and len(sent_ids) == 100

    # the mix, bodies and HTTP errors
    classes_seen = np.array(rec["cls"])
    assert 55 <= np.sum(classes_seen == "infer") <= 95
    for cls, status, kind, bytes_out in zip(rec["cls"], rec["status"], rec["error_kind"],
                                            rec["bytes_out"]):
        assert (cls, status, kind) in {("infer", 200, None), ("broken", 503, "http")}
        assert (50 <= bytes_out <= 520) if cls == "infer" else bytes_out == 0
    assert sorted(server.body_sizes) == sorted(rec["bytes_out"])
    assert result["errors"] == np.sum(classes_seen == "broken")
    assert set(rec["worker"]) == {0} and set(rec["chunks"]) == {0}

    assert len(progress) >= 3
    assert progress[-1]["completed"] == 100 and progress[-1]["p99_ms"] >= progress[-1]["p50_ms"] > 0


def test_a_closed_keepalive_connection_is_retried_only_for_idempotent_requests(serve, tmp_path):
    """A server that closes each kept-alive connection when its second request
    arrives (no answer): a GET is sent again on a fresh connection and
    succeeds; a POST may have been processed, so it is recorded as ``reset``."""
    server = serve()
    classes = [{"name": "get", "path": "/one-per-connection", "method": "GET", "weight": 1},
               {"name": "post", "path": "/one-per-connection", "method": "POST", "weight": 1,
                "payload": {"kind": "fixed", "body": "{}"}}]
    result, _, rec = run_plan(tmp_path, _plan(server.url, classes=classes, duration_s=1.0,
                                              max_in_flight=1))
    outcome = {(c, k) for c, k in zip(rec["cls"], rec["error_kind"])}
    assert ("get", "reset") not in outcome and ("get", None) in outcome
    assert ("post", "reset") in outcome
    assert len(rec["cls"]) == 50 == result["scheduled"]
    retried = sum(1 for c, k in zip(rec["cls"], rec["error_kind"]) if k is None)
    assert len(server.traceparents) > retried  # closed-on attempts reached the server too


def test_expect_continue_goes_through_the_client_handshake(serve, tmp_path):
    """A class asking for ``Expect: 100-continue`` is sent with the client's own
    handshake (interim 100, then the body), not as prebuilt bytes."""
    server = serve()
    classes = [{"name": "upload", "path": "/", "method": "POST", "headers": {"Expect": "100-continue"},
                "payload": {"kind": "fixed", "body": "x" * 300}}]
    result, _, rec = run_plan(tmp_path, _plan(server.url, classes=classes, duration_s=0.5))
    assert set(rec["error_kind"]) == {None} and set(rec["status"]) == {200}
    assert server.body_sizes == [300] * 25 == [b for b in rec["bytes_out"]]


def test_a_server_stall_shows_in_latency_from_scheduled_time(serve, tmp_path):
    """(c) coordinated omission: requests scheduled during a 1 s stall are all
    recorded, each with latency from its scheduled time to the stall's end."""
    server = serve(stall_after_s=1.0, stall_s=1.0)
    result, _, rec = run_plan(tmp_path, _plan(server.url, duration_s=3.0))
    scheduled, sent, end = (_array(rec, n) for n in ("scheduled_ns", "sent_ns", "end_ns"))
    assert len(scheduled) == 150 and not any(rec["error_kind"])
    assert np.all(np.diff(np.sort(scheduled)) == 20 * MS)  # nothing hidden

    stall_start, stall_end = server.stall_window_ns
    in_stall = (scheduled >= stall_start) & (scheduled < stall_end - 40 * MS)
    assert 45 <= in_stall.sum() <= 51
    latency = end - scheduled
    # linear: latency = stall end - scheduled time (slope -1), up to ~1 s; the
    # server answers the ~50 released requests in a burst, hence the tolerance
    deviation = np.abs(latency[in_stall] - (stall_end - scheduled[in_stall]))
    assert np.median(deviation) < 25 * MS and np.all(deviation < 120 * MS)
    assert 0.9e9 <= latency.max() <= 1.1e9
    assert np.median(sent[in_stall] - scheduled[in_stall]) < 5 * MS  # open loop: sent on time
    assert np.median(latency[~in_stall & (scheduled < stall_start)]) < 20 * MS


def test_in_flight_cap_makes_requests_wait_and_counts_the_wait(serve, tmp_path):
    """(d) cap 2, 100 ms service, 40 req/s offered: requests queue in the
    generator, their lateness counts in latency, and none is dropped."""
    server = serve(service_s=0.1)
    result, _, rec = run_plan(tmp_path, _plan(server.url, duration_s=5.0, max_requests=20,
                                              max_in_flight=2,
                                              arrival={"process": "constant", "rate": 40}))
    scheduled, sent, end = (_array(rec, n) for n in ("scheduled_ns", "sent_ns", "end_ns"))
    order = np.argsort(scheduled)
    scheduled, sent, end = scheduled[order], sent[order], end[order]
    assert len(scheduled) == 20 and not any(rec["error_kind"])
    assert result["stop_reason"] == "max_requests" and result["sent"] == 20
    assert server.max_concurrency <= 2
    lateness = sent - scheduled
    # request i can start only after (i // 2) services of 100 ms: 50 ms - 25 ms = 25 ms more per pair
    expected = np.maximum(0, (np.arange(20) // 2) * 100 * MS - np.arange(20) * 25 * MS)
    assert np.all(lateness >= expected - 5 * MS)
    assert lateness[-1] >= 200 * MS
    assert np.all(end - scheduled >= lateness + 95 * MS)


def test_refused_connections_are_recorded_and_the_run_completes(tmp_path):
    """(e) nothing listens on the target port."""
    target = f"http://127.0.0.1:{free_port()}"
    result, _, rec = run_plan(tmp_path, _plan(target, duration_s=0.5,
                                              arrival={"process": "constant", "rate": 20}))
    assert len(rec["error_kind"]) == 10 and set(rec["error_kind"]) == {"refused"}
    assert set(rec["status"]) == {0} and all(rec["error"])
    assert result["errors"] == 10 and result["stop_reason"] == "duration"


def test_timeouts_and_resets_are_recorded_not_raised(serve, tmp_path):
    server = serve(hang_s=1.0)
    classes = [{"name": "hang", "path": "/hang", "method": "GET"},
               {"name": "reset", "path": "/reset", "method": "POST",
                "payload": {"kind": "random_bytes", "size": {"value": 100}}}]
    result, _, rec = run_plan(tmp_path, _plan(server.url, duration_s=0.5, timeout_s=0.3,
                                              classes=classes,
                                              arrival={"process": "constant", "rate": 20}))
    assert len(rec["cls"]) == 10 and result["errors"] == 10
    for i, cls in enumerate(rec["cls"]):
        assert rec["error_kind"][i] == {"hang": "timeout", "reset": "reset"}[cls], rec["error"][i]
        if cls == "hang":
            assert rec["end_ns"][i] - rec["sent_ns"][i] == 300 * MS and rec["status"][i] == 0
    assert {"hang", "reset"} <= set(rec["cls"])


def test_closed_loop_users_wait_for_each_reply(serve, tmp_path):
    server = serve(service_s=0.02)
    result, _, rec = run_plan(tmp_path, _plan(
        server.url, duration_s=1.0,
        arrival={"process": "closed", "users": 2, "think_time_s": 0.03}))
    assert rec["scheduled_ns"] == rec["sent_ns"]
    assert server.max_concurrency <= 2
    assert 20 <= len(rec["sent_ns"]) <= 45  # 2 users, one request per ~50 ms, 1 s
    assert result["stop_reason"] == "duration" and not any(rec["error_kind"])


def test_stop_flag_halts_promptly_and_records_requests_that_never_left(serve, tmp_path):
    """A stop while the in-flight cap is full: due requests are recorded as dropped."""
    server = serve(service_s=0.3)
    started = time.monotonic()
    result, _, rec = run_plan(tmp_path, _plan(server.url, duration_s=20.0, max_in_flight=1),
                              stop_after_s=1.0)
    assert time.monotonic() - started < 10
    assert result["stop_reason"] == "stopped"
    kinds = rec["error_kind"]
    dropped = [i for i, kind in enumerate(kinds) if kind == "dropped"]
    assert dropped and all(rec["sent_ns"][i] is None and rec["trace_id"][i] is None for i in dropped)
    answered = [i for i, kind in enumerate(kinds) if kind is None]
    assert len(answered) == result["completed"] == result["sent"] == len(server.traceparents)
    assert len(kinds) == result["scheduled"] and result["errors"] == len(dropped)
    assert max(rec["scheduled_ns"]) - result["start_ns"] < 2e9  # nothing scheduled after the stop


def test_many_closed_users_print_no_spawn_rate_warning_the_user_never_chose(serve, tmp_path):
    """tailscope spawns a closed loop's users at once (spawn rate = users, its own
    choice): Locust's "spawn rate is very high" advice is not the user's to act on."""
    server = serve(service_s=0.001)
    config = {"run_dir": str(tmp_path), "stop_after_s": None, "plan": _plan(
        server.url, duration_s=0.5, arrival={"process": "closed", "users": 150, "think_time_s": 0.1})}
    proc = subprocess.run([sys.executable, DRIVER, json.dumps(config)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["result"]["sent"] > 0
    assert "spawn rate is very high" not in proc.stderr, proc.stderr[-2000:]
