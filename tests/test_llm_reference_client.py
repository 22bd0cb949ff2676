"""The real load generator against the real LLM reference server
(``python -m tailscope.targets.llm``, several tokens per SSE chunk): token
counts equal the server's usage, and TTFT, per-token ITL and TPOT agree with
the server's own timings (``GET /debug/requests``, joined on ``X-Request-Id`` =
the trace id)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from test_llm_loopback import MS, _run

from tailscope.analyzers.stats.llm_metrics import itl_samples_ns, tpot_ns
from tailscope.rundir import read_stream, schema

STARTUP_TIMEOUT_S = 60
STEP_MS = 4  # the server's added time per engine step: one token per step
TOKENS_PER_CHUNK = 3


class _Server:
    def __init__(self, args: list[str]):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tailscope.targets.llm", "--host", "127.0.0.1", "--port", "0", "--no-tracing",
             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                self.process.kill()
                raise TimeoutError("the LLM server printed no LISTENING line")
        line = self.process.stdout.readline()
        if not line.startswith("LISTENING "):
            self.process.kill()
            raise RuntimeError(f"unexpected first line {line!r}: {self.process.stderr.read()[-2000:]}")
        self.server_address = ("127.0.0.1", int(line.split()[1]))

    def timings(self) -> dict[str, dict]:
        url = f"http://127.0.0.1:{self.server_address[1]}/debug/requests"
        with urllib.request.urlopen(url, timeout=30) as response:
            return {r["request_id"]: r for r in json.load(response)["requests"]}

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def llm_server():
    server = _Server(["--tokens-per-chunk", str(TOKENS_PER_CHUNK), "--step-extra-delay-ms", str(STEP_MS),
                      "--max-num-seqs", "32"])
    try:
        yield server
    finally:
        server.close()


def test_reference_server_usage_ttft_itl_and_tpot(llm_server, tmp_path):
    model = "tailscope-llm"
    classes = [
        {"name": "chat", "weight": 2, "api": "openai-chat", "model": model,
         "prompt_tokens": {"dist": "uniform", "min": 5, "max": 60}, "output_tokens": {"dist": "uniform", "min": 12,
                                                                                     "max": 40}},
        {"name": "completions", "api": "openai-completions", "model": model, "prompt_tokens": 20,
         "output_tokens": 16},
        {"name": "embeddings", "api": "openai-embeddings", "model": model, "prompt_tokens": 12},
        {"name": "whole", "api": "openai-chat", "model": model, "stream": False, "prompt_tokens": 9,
         "output_tokens": 8},
    ]
    _run(tmp_path, llm_server, classes, rate=8, duration_s=2.5)
    server = llm_server.timings()
    requests = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA).table.to_pylist()
    chunks: dict[str, list[dict]] = {}
    for row in read_stream(tmp_path / schema.CHUNKS, schema.CHUNKS_SCHEMA).table.to_pylist():
        chunks.setdefault(row["trace_id"], []).append(row)
    assert len(requests) == 20 and not [r for r in requests if r["error_kind"]]
    assert {r["cls"] for r in requests} == {c["name"] for c in classes}
    ttft_extra, itl_error, tpot_error, standard_tpot_error, multi = [], [], [], [], 0
    for row in requests:
        prefix = {"chat": "chatcmpl-", "whole": "chatcmpl-", "completions": "cmpl-", "embeddings": "embd-"}[row["cls"]]
        key = prefix + row["trace_id"] + ("-0" if row["cls"] in ("completions", "embeddings") else "")
        truth = server[key]
        usage = truth["attributes"]
        assert row["prompt_tokens"] == usage["gen_ai.usage.prompt_tokens"] and row["token_count_source"] == "usage"
        if row["cls"] == "embeddings":
            assert row["output_tokens"] is None and row["prompt_tokens"] == 12
            continue
        assert row["output_tokens"] == usage["gen_ai.usage.completion_tokens"] == usage["gen_ai.request.max_tokens"]
        assert row["finish_reason"] == "length"
        if row["cls"] == "whole":
            assert row["chunks"] == 0 and row["trace_id"] not in chunks
            continue
        rows = sorted(chunks[row["trace_id"]], key=lambda r: r["index"])
        times, tokens = [r["t_ns"] for r in rows], [r["tokens"] for r in rows]
        assert sum(tokens) == row["output_tokens"] and row["chunks"] == len(rows)
        multi += max(tokens) > 1
        n = row["output_tokens"]
        # TTFT: the first chunk leaves the server once its first TOKENS_PER_CHUNK tokens are made
        server_ttft = truth["first_token_ns"] - truth["arrival_ns"]
        client_ttft = row["first_byte_ns"] - row["scheduled_ns"]
        ttft_extra.append(client_ttft - server_ttft)
        # the last token: the client sees it when the server made it (plus the trip)
        assert -2 * MS <= row["last_token_ns"] - truth["last_token_ns"] < 50 * MS
        server_tpot = (truth["last_token_ns"] - truth["first_token_ns"]) / (n - 1)
        itl = itl_samples_ns(times, tokens)
        itl_error.append(itl.mean() - server_tpot)  # per-token ITL: the decode rate, whatever the chunking
        tpot_error.append(tpot_ns(row["first_byte_ns"], row["last_token_ns"], n) - server_tpot)
        standard_tpot_error.append((tpot_ns(row["first_byte_ns"], row["last_token_ns"], n) - server_tpot) / server_tpot)
    assert multi >= 10  # chunks carried several tokens
    assert 0 <= float(np.median(ttft_extra)) < (TOKENS_PER_CHUNK + 4) * STEP_MS * MS, np.median(ttft_extra) / MS
    assert abs(float(np.median(itl_error))) < 1.5 * MS, np.median(itl_error) / MS
    # TPOT = (latency - TTFT) / (output - 1) counts the first chunk's extra tokens as decode time it
    # did not see: biased low by about (first chunk's tokens - 1) / (output - 1) of the server's TPOT
    assert float(np.median(standard_tpot_error)) < 0
    print(f"TTFT client - server median {np.median(ttft_extra) / MS:.2f} ms; per-token ITL mean - server TPOT "
          f"median {np.median(itl_error) / MS:.3f} ms; TPOT - server TPOT median {np.median(tpot_error) / MS:.3f} ms "
          f"({100 * np.median(standard_tpot_error):.1f} %)")
