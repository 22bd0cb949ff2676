"""``python -m tailscope.tracing.ingest.receiver`` as the conductor runs it: a real child process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from receiver_helpers import CHILD_ID, post, receiver_stats, span, stored_events, stored_spans, trace_request


def start_receiver(run_dir: str, *extra: str) -> tuple[subprocess.Popen, int]:
    """Start the receiver on a free port; return the process and the port it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tailscope.tracing.ingest.receiver", "--run-dir", run_dir, "--port", "0",
         "--grpc-port", "0", *extra],
        stdout=subprocess.PIPE, text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("LISTENING "):
        process.kill()
        process.wait()
        pytest.fail(f"receiver did not report its port, printed {line!r}")
    return process, int(line.split()[1])


def stop_receiver(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_and_leaves_readable_files(tmp_path, stop_signal):
    process, port = start_receiver(str(tmp_path), "--max-body-bytes", "100000", "--queue-size", "8")
    try:
        spans = [span(f"s{i}", span_id=(i + 1).to_bytes(8, "big")) for i in range(200)]
        assert post(port, "/v1/traces", trace_request(spans))[0] == 200
        gc = span("gc.pause", span_id=CHILD_ID, **{"gc__generation": 0, "gc__collected": 3})
        assert post(port, "/v1/traces", trace_request([gc]))[0] == 200
        assert post(port, "/v1/traces", b"junk")[0] == 400
        process.send_signal(stop_signal)
        assert process.wait(timeout=10) == 0
    finally:
        stop_receiver(process)
    assert len(stored_spans(str(tmp_path))) == 200
    assert [e["kind"] for e in stored_events(str(tmp_path))] == ["gc_pause"]
    stats = receiver_stats(str(tmp_path))
    assert stats["spans_received"] == 201 and stats["spans_stored"] == 200 and stats["gc_events"] == 1
    assert stats["rejected"]["malformed"] == 1 and stats["port"] == port


def test_busy_port_exits_with_a_message(tmp_path):
    process, port = start_receiver(str(tmp_path / "first"))
    try:
        second = subprocess.run(
            [sys.executable, "-m", "tailscope.tracing.ingest.receiver", "--run-dir", str(tmp_path / "second"),
             "--port", str(port), "--grpc-port", "0"],
            capture_output=True, text=True, timeout=30,
        )
        assert second.returncode == 2
        assert "cannot listen" in second.stderr and second.stdout == ""
    finally:
        process.send_signal(signal.SIGTERM)
        stop_receiver(process)
