"""The streaming benchmark's smallest step as a test: benchmarks/llm_streaming.py runs its
stamping SSE server and both generators (tailscope's OpenAI streaming path in concurrency
mode, and a bare Locust FastHttpUser) against it for a short window. Every chunk tailscope
recorded in chunks.arrow must join a send stamp of the server's, both generators must read
the streams at the rate the server sends them, and the figures the benchmark reports must
be there. Speed itself is the benchmark's to print, not this test's to assert."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAMS = 50
TOKENS_PER_S = 25.0


def test_smallest_step_of_the_streaming_benchmark():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "llm_streaming.py"), "--streams", str(STREAMS),
         "--seconds", "2", "--warmup", "0.5", "--rounds", "1", "--min-tokens", "10", "--max-tokens", "30",
         "--tokens-per-s", str(TOKENS_PER_S), "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    (row,) = summary["rows"]
    assert row["streams"] == STREAMS
    offered = STREAMS * TOKENS_PER_S  # chunks/s the server sends
    for name in ("tailscope", "bare Locust"):
        figures = row[name]
        assert figures["errors"] == 0 and figures["unmatched"] == 0, (name, figures)
        # the window's chunks arrived at about the rate they were sent (a loaded machine may slow both)
        assert 0.4 * offered < figures["chunks_per_s"] < 1.3 * offered, (name, figures)
        assert figures["chunks_per_cpu_s"] > figures["chunks_per_s"]  # one core is not used up at 1,250 chunks/s
        assert 0 < figures["p99_lag_ms"] < 1000, (name, figures)
    assert row["ratio_per_cpu_s"] > 0
    assert "streams" in proc.stdout and "ratio (per core)" in proc.stdout
