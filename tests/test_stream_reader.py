"""The shared stream reader and kernel receive stamps, against real loopback servers.

- ``arrival_stamps``: a real TCP socket's ``recvmsg`` carries the kernel's
  receive stamp, and a read made late is timed when its data arrived.
- The reader in a busy event loop: a greenlet hogs the loop while a chunk
  arrives; the chunk is still recorded at its arrival (the server writes its
  send time into it), not when the loop got back to it.
- Through a real Locust runner: streams that end normally, are cut by the
  server mid-body (``reset``) or stall past the client timeout (``timeout``)
  run side by side; each is recorded as what happened to it and the reader
  keeps serving the others.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_loadgen_runner import run_plan

from tailscope.loadgen import arrival_stamps
from tailscope.loadgen.clock import RunClock

MS = 1_000_000
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _wait_for_stamping(client, peer) -> None:
    """Linux turns receive stamping on for the host with deferred work the first time a socket
    asks: until then packets carry no stamp (the reader times them with the clock). Wait for it."""
    for _ in range(40):
        peer.sendall(b"w")
        time.sleep(0.05)
        if client.recvmsg(4096, arrival_stamps.STAMP_SPACE)[1]:
            return


@pytest.fixture
def stamping_on():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    arrival_stamps.enable(client)
    _wait_for_stamping(client, peer)
    for sock in (client, peer, server):
        sock.close()


def test_a_late_read_is_timed_by_the_kernel_at_its_arrival():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        assert arrival_stamps.enable(client)
        _wait_for_stamping(client, peer)
        sent_ns = time.time_ns()
        peer.sendall(b"token")
        time.sleep(0.08)  # the reader is late by 80 ms
        data, ancillary, _, _ = client.recvmsg(4096, arrival_stamps.STAMP_SPACE)
        clock = RunClock()
        now_ns = clock.now_ns()
        assert data == b"token" and ancillary
        arrived_ns = arrival_stamps.arrival_ns(ancillary, arrival_stamps.wall_offset_ns(clock))
        assert sent_ns - 1 * MS <= arrived_ns < sent_ns + 10 * MS  # not now_ns, 80 ms later
        assert now_ns - arrived_ns >= 70 * MS
        assert arrival_stamps.arrival_ns([], 0) is None  # no stamp
    finally:
        for sock in (client, peer, server):
            sock.close()


class _PacedHandler(BaseHTTPRequestHandler):
    """SSE over chunked transfer. /ok: 5 events 30 ms apart; /cut: 2 events, then the
    connection is closed mid-body; /stall: 1 event, then silence for 3 s; /stamp: one event
    at 150 ms whose data is the server's send time (epoch ns), then [DONE]."""

    protocol_version = "HTTP/1.1"
    stamps: list[int] = []  # /stamp's send times (epoch ns)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        kind = self.path.strip("/")
        if kind == "stamp":
            time.sleep(0.15)
            stamp = time.time_ns()
            self.stamps.append(stamp)
            self._event(str(stamp))
        else:
            for i in range({"ok": 5, "cut": 2, "stall": 1}[kind]):
                time.sleep(0.03)
                self._event(f'{{"token": {i}}}')
            if kind == "cut":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if kind == "stall":
                time.sleep(3.0)
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, data: str) -> None:
        piece = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def paced_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PacedHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


#: Reads /stamp through a StreamReader while another greenlet blocks the loop from 100 ms to
#: 260 ms after the send (the chunk is written at about 150 ms); prints the recorded chunk time
#: and the server's send stamp from the chunk.
_BUSY_LOOP_CLIENT = """
import json, sys, time
import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL
from tailscope.loadgen.clock import RunClock
from tailscope.loadgen.exchange import read_stream
from tailscope.loadgen.stream_reader import StreamReader
from tailscope.loadgen.streams import ChunkTimer

url = URL(sys.argv[1] + "/stamp")
clock = RunClock()
reader = StreamReader(clock)
client = HTTPClient.from_url(url, concurrency=2)

def hog():
    gevent.sleep(0.1)
    time.sleep(0.16)  # blocks the whole event loop

def fetch():
    response = client.post(url.request_uri, body=b"{}")
    timer = ChunkTimer(response.get("content-type"))
    read_stream(response, timer, clock, reader)
    return timer

hogger, fetcher = gevent.spawn(hog), gevent.spawn(fetch)
gevent.joinall([hogger, fetcher], raise_error=True)
timer = fetcher.value
print(json.dumps({"times": timer.times, "returned_ns": clock.now_ns()}))
"""


def test_a_chunk_read_after_the_loop_was_busy_keeps_its_arrival_time(paced_server, stamping_on):
    _PacedHandler.stamps.clear()
    proc = subprocess.run([sys.executable, "-c", _BUSY_LOOP_CLIENT, paced_server], capture_output=True,
                          text=True, timeout=30, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (stamp,) = _PacedHandler.stamps
    assert len(out["times"]) == 1  # the stamp event ([DONE] is not a chunk)
    # the loop was blocked from about 100 ms to 260 ms after the send; the chunk was written at
    # about 150 ms, so a clock read after the recv would be about 110 ms after the stamp
    assert out["returned_ns"] - stamp >= 90 * MS
    assert -1 * MS < out["times"][0] - stamp < 20 * MS, (out["times"][0] - stamp) / MS


def test_streams_that_end_are_cut_or_stall_are_each_recorded_as_such(paced_server, tmp_path):
    classes = [{"name": name, "path": f"/{name}", "stream": True} for name in ("ok", "cut", "stall")]
    plan = {"target": paced_server, "duration_s": 1.0, "arrival": {"process": "constant", "rate": 9},
            "classes": classes, "seed": 4, "timeout_s": 1.0}
    result, _, rec = run_plan(tmp_path, plan)
    assert result["completed"] == 9 and len(rec["cls"]) == 9
    kinds = {}
    for cls, kind, chunks in zip(rec["cls"], rec["error_kind"], rec["chunks"]):
        kinds.setdefault(cls, set()).add((kind, chunks))
    assert kinds["ok"] == {(None, 5)}
    assert {kind for kind, _ in kinds["cut"]} == {"reset"}
    assert {kind for kind, _ in kinds["stall"]} == {"timeout"}


def test_the_reader_is_available_in_a_monkey_patched_process():
    """Locust monkey-patches with gevent, which removes ``select.epoll``: the reader must still
    find the OS's own, or every run would silently fall back to one greenlet per stream."""
    code = ("import gevent.monkey; gevent.monkey.patch_all()\n"
            "import select\n"
            "from tailscope.loadgen.stream_reader import StreamReader\n"
            "print(hasattr(select, 'epoll'), StreamReader.available())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.stdout.split() == ["False", "True"], proc.stderr[-2000:]
