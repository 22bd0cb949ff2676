"""The LLM reference server as a real process on a loopback port, over real HTTP, with real OTLP export.

Each server is ``python -m tailscope.targets.llm`` started with its own knobs;
streams are read line by line with http.client and every SSE event is stamped
on arrival. Spans go to the harness's own OTLP receiver (in this process,
writing a run directory) and are read back from ``spans.arrow``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from receiver_helpers import running_receiver, stored_spans

STARTUP_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 30
MODEL = "tailscope-llm"
SPAN_KIND_SERVER = 2


class LlmServer:
    """``python -m tailscope.targets.llm --port 0 ARGS``, stopped by PID in :meth:`close`."""

    def __init__(self, args: list[str], otlp_url: str | None = None) -> None:
        env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="200", PYTHONUNBUFFERED="1")
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
        tracing = ["--otlp-traces-endpoint", otlp_url] if otlp_url else ["--no-tracing"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tailscope.targets.llm", "--host", "127.0.0.1", "--port", "0", *tracing, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        try:
            self.port = self._read_port()
        except BaseException:
            self.close()
            raise

    def _read_port(self) -> int:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                raise TimeoutError("the LLM server printed no LISTENING line")
        line = self.process.stdout.readline()
        if not line.startswith("LISTENING "):
            self.process.kill()
            raise RuntimeError(f"unexpected first line {line!r}; stderr: {self.process.stderr.read()}")
        return int(line.split()[1])

    def request(self, method: str, path: str, document: Any = None, headers: dict[str, str] | None = None,
                raw: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            body = raw if raw is not None else (None if document is None else json.dumps(document).encode())
            connection.request(method, path, body=body, headers={"content-type": "application/json", **(headers or {})})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def post_json(self, path: str, document: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        status, _, body = self.request("POST", path, document, headers)
        return status, json.loads(body)

    def stream(self, path: str, document: Any, headers: dict[str, str] | None = None) -> Stream:
        """POST a streaming request and read its SSE events to the end, each stamped on arrival."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        stream = Stream(sent_ns=time.time_ns())
        try:
            connection.request("POST", path, body=json.dumps(document).encode(),
                               headers={"content-type": "application/json", **(headers or {})})
            response = connection.getresponse()
            stream.status = response.status
            stream.headers = {k.lower(): v for k, v in response.getheaders()}
            while True:
                line = response.readline()
                if not line:
                    break
                stream.lines.append((time.time_ns(), line.decode("utf-8")))
        finally:
            connection.close()
        return stream

    def metrics(self) -> dict[str, float]:
        """``{name{labels}: value}`` of every vllm: sample on /metrics."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        samples = {}
        for line in body.decode().splitlines():
            if line.startswith("vllm:"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples

    def metric(self, name: str, **labels: str) -> float:
        wanted = {"engine": "0", "model_name": MODEL, **labels}
        for key, value in self.metrics().items():
            base, _, label_text = key.partition("{")
            if base == name and dict(re.findall(r'(\w+)="([^"]*)"', label_text)) == wanted:
                return value
        raise KeyError(name)

    def timings(self, request_id: str) -> dict[str, Any]:
        status, _, body = self.request("GET", f"/debug/requests?request_id={request_id}")
        assert status == 200
        (record,) = json.loads(body)["requests"]
        return record

    def terminate_and_wait(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@dataclass
class Stream:
    """A read SSE response: raw lines with their arrival times (epoch ns)."""

    sent_ns: int
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def events(self) -> list[tuple[int, str]]:
        """``(arrival ns, payload)`` of each ``data: `` line."""
        return [(t, line[len("data: "):].rstrip("\n")) for t, line in self.lines if line.startswith("data: ")]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(payload) for _, payload in self.events if payload != "[DONE]"]

    def token_counts(self) -> list[int]:
        """Tokens (words) of each chunk that carries text."""
        counts = []
        for chunk in self.chunks:
            for choice in chunk.get("choices", []):
                text = choice.get("text") if "text" in choice else choice.get("delta", {}).get("content")
                if text:
                    counts.append(len(text.split()))
        return counts

    def first_token_ns(self) -> int:
        for (t, payload) in self.events:
            if payload != "[DONE]":
                for choice in json.loads(payload).get("choices", []):
                    if choice.get("text") or choice.get("delta", {}).get("content"):
                        return t
        raise AssertionError("no token was streamed")


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def chat(words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "system", "content": "answer"},
                                         {"role": "user", "content": " ".join(["word"] * (words - 1))}],
            "max_tokens": max_tokens, **extra}


def assert_sse_framing(stream: Stream) -> None:
    """Every line is ``data: ...`` or blank; each event is followed by a blank line; the last is [DONE]."""
    lines = [line for _, line in stream.lines]
    assert lines and all(line.startswith("data: ") or line == "\n" for line in lines), lines
    assert all(lines[i + 1] == "\n" for i, line in enumerate(lines) if line.startswith("data: "))
    assert stream.events[-1][1] == "[DONE]"
    assert stream.headers["content-type"].startswith("text/event-stream")


# --------------------------------------------------------------------------- one server, many requests


@pytest.fixture(scope="module")
def server():
    """A server with a high EOS probability (requests without ignore_eos end early); stopped with SIGTERM."""
    process = LlmServer(["--eos-probability", "0.3", "--max-num-seqs", "8"])
    try:
        yield process
        assert process.terminate_and_wait() == 0
    finally:
        process.close()


def test_chat_stream_is_sse_with_a_role_chunk_tokens_finish_reason_usage_and_done(server):
    stream = server.stream("/v1/chat/completions", chat(6, 20, stream=True, ignore_eos=True,
                                                               stream_options={"include_usage": True}),
                                  {"X-Request-Id": "chat-framing"})
    assert stream.status == 200
    assert_sse_framing(stream)
    chunks = stream.chunks
    assert stream.headers["x-request-id"] == "chat-framing"
    assert {c["id"] for c in chunks} == {"chatcmpl-chat-framing"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    *content, usage = chunks
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 6, "completion_tokens": 20,
                                                         "total_tokens": 26}
    assert all(c["usage"] is None for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["length"]
    assert sum(stream.token_counts()) == 20


def test_completions_stream_and_json_responses_count_the_tokens_they_carry(server):
    stream = server.stream("/v1/completions", {"model": MODEL, "prompt": "one two three four", "max_tokens": 12,
                                                      "stream": True, "ignore_eos": True})
    assert_sse_framing(stream)
    assert all(c["object"] == "text_completion" and "usage" not in c for c in stream.chunks)  # no usage asked
    assert sum(stream.token_counts()) == 12
    for endpoint, body in [("/v1/completions", {"prompt": "one two three", "max_tokens": 30}),
                           ("/v1/chat/completions", chat(3, 30))]:
        status, document = server.post_json(endpoint, body)  # without ignore_eos: may stop early
        assert status == 200
        choice = document["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"]
        assert document["usage"]["prompt_tokens"] == 3
        assert document["usage"]["completion_tokens"] == len(text.split())
        expected = "length" if len(text.split()) == 30 else "stop"
        assert choice["finish_reason"] == expected


def test_without_ignore_eos_some_streams_end_early_and_usage_still_matches(server):
    def one(i: int) -> Stream:
        return server.stream("/v1/completions", {"prompt": f"early stop {i}", "max_tokens": 40, "stream": True,
                                                        "stream_options": {"include_usage": True}})

    with ThreadPoolExecutor(max_workers=4) as pool:
        streams = list(pool.map(one, range(8)))
    reasons = []
    for stream in streams:
        *content, usage = stream.chunks
        reasons.append(content[-1]["choices"][0]["finish_reason"])
        assert usage["usage"]["completion_tokens"] == sum(stream.token_counts())
    assert "stop" in reasons  # eos_probability 0.3: 8 streams of 40 tokens all reaching the limit is ~1e-48


def test_errors_are_openai_error_json(server):
    cases = [
        ("/v1/chat/completions", None, b"{not json", 400),
        ("/v1/chat/completions", chat(3, 5, model="gpt-17"), None, 404),
        ("/v1/completions", {"prompt": "a b", "max_tokens": 5000}, None, 400),
        ("/v1/completions", {"prompt": "a", "stream_options": {"include_usage": True}}, None, 400),
        ("/v1/nowhere", {}, None, 404),
    ]
    for path, document, raw, expected in cases:
        status, headers, body = server.request("POST", path, document, raw=raw)
        assert status == expected, (path, body)
        error = json.loads(body)["error"]
        assert set(error) >= {"message", "type", "code"} and error["code"] == expected and error["message"]
        assert headers["content-type"] == "application/json"


def test_models_health_and_embeddings(server):
    status, _, body = server.request("GET", "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == [MODEL]
    assert server.request("GET", "/health")[0] == 200
    status, document = server.post_json("/v1/embeddings", {"model": MODEL, "input": ["a b c", "d e"]})
    assert status == 200 and document["usage"]["prompt_tokens"] == 5
    vectors = [item["embedding"] for item in document["data"]]
    assert len(vectors) == 2 and all(abs(sum(v * v for v in vector) - 1.0) < 1e-3 for vector in vectors)


def test_llm_request_spans_continue_the_traceparent_and_time_the_request_in_seconds(tmp_path):
    sent = {}
    with running_receiver(str(tmp_path), port=0, grpc_port=None) as receiver:
        traced = LlmServer(["--max-num-seqs", "4"], f"http://127.0.0.1:{receiver.port}")
        try:
            def one(i: int) -> None:
                header, trace_id, parent_id = traceparent()
                request_id = f"traced-{i}"
                stream = traced.stream("/v1/chat/completions",
                                       chat(4 + i, 8 + i, stream=True, ignore_eos=True,
                                            stream_options={"include_usage": True}),
                                       {"traceparent": header, "X-Request-Id": request_id})
                sent[trace_id] = (parent_id, request_id, stream)

            with ThreadPoolExecutor(max_workers=6) as pool:  # some of them wait for a running slot
                list(pool.map(one, range(6)))
            records = {rid: traced.timings(f"chatcmpl-{rid}") for _, rid, _ in sent.values()}
            assert traced.terminate_and_wait() == 0  # exports the queued spans before exiting
        finally:
            traced.close()
    by_trace = {s["trace_id"]: s for s in stored_spans(str(tmp_path)) if s["name"] == "llm_request"}
    assert set(by_trace) == set(sent)
    for trace_id, (parent_id, request_id, stream) in sent.items():
        span = by_trace[trace_id]
        attributes = json.loads(span["attributes"])
        record = records[request_id]
        assert span["parent_span_id"] == parent_id and span["kind"] == SPAN_KIND_SERVER
        assert span["service"] == "tailscope-llm"
        assert attributes["gen_ai.request.id"] == f"chatcmpl-{request_id}"
        usage = stream.chunks[-1]["usage"]
        assert attributes["gen_ai.usage.prompt_tokens"] == usage["prompt_tokens"]
        assert attributes["gen_ai.usage.completion_tokens"] == usage["completion_tokens"] == sum(stream.token_counts())
        assert attributes["gen_ai.request.max_tokens"] == usage["completion_tokens"]
        assert attributes["gen_ai.response.finish_reasons"] == '["length"]'
        queue = attributes["gen_ai.latency.time_in_queue"]
        prefill = attributes["gen_ai.latency.time_in_model_prefill"]
        decode = attributes["gen_ai.latency.time_in_model_decode"]
        ttft = attributes["gen_ai.latency.time_to_first_token"]
        e2e = attributes["gen_ai.latency.e2e"]
        assert attributes["gen_ai.latency.time_in_model_inference"] == pytest.approx(prefill + decode, abs=1e-6)
        # the span runs from arrival to finish; its intervals are seconds that add up
        assert (span["end_ns"] - span["start_ns"]) / 1e9 == pytest.approx(e2e, abs=1e-6)
        assert 0 <= e2e - (queue + prefill + decode) < 0.25
        assert 0 <= ttft - (queue + prefill) < 0.25
        assert ttft < e2e < 30
        # the server's own times sit inside what the client saw, and are the span's
        assert record["trace_id"] == trace_id and record["attributes"] == attributes
        assert stream.sent_ns <= record["arrival_ns"] == span["start_ns"]
        assert record["first_token_ns"] <= stream.first_token_ns()
        assert ttft <= (stream.first_token_ns() - stream.sent_ns) / 1e9


# --------------------------------------------------------------------------- chunking, preemption, bounds


def test_several_tokens_per_chunk_and_chunked_prefill_under_the_step_budget():
    server = LlmServer(["--tokens-per-chunk", "4", "--enable-chunked-prefill", "--max-num-batched-tokens", "16",
                        "--max-num-seqs", "4"])
    try:
        stream = server.stream("/v1/completions", {"prompt": " ".join(f"w{i}" for i in range(100)),
                                                   "max_tokens": 22, "stream": True, "ignore_eos": True,
                                                   "stream_options": {"include_usage": True}})
        assert_sse_framing(stream)
        counts = stream.token_counts()
        assert sum(counts) == 22 == stream.chunks[-1]["usage"]["completion_tokens"]
        assert all(count >= 4 for count in counts[:-1]) and max(counts) > 1
        # no engine step computed more than the 16-token budget, and the 100-token prompt took several
        assert server.metric("vllm:iteration_tokens_total_bucket", le="16.0") == \
            server.metric("vllm:iteration_tokens_total_count")
        assert server.metric("vllm:prompt_tokens_total") == 100
        assert server.metric("vllm:iteration_tokens_total_sum") == 100 + 22 - 1
        assert server.terminate_and_wait() == 0
    finally:
        server.close()


def test_an_exhausted_kv_cache_preempts_and_every_request_still_completes():
    server = LlmServer(["--num-kv-blocks", "16", "--block-size", "4", "--max-model-len", "64",
                        "--max-num-batched-tokens", "64", "--max-num-seqs", "8"])
    try:
        def one(i: int) -> tuple[Stream, str]:
            request_id = f"kv-{i}"
            stream = server.stream("/v1/completions",
                                   {"prompt": " ".join(["kv"] * 10), "max_tokens": 40, "ignore_eos": True,
                                    "stream": True, "stream_options": {"include_usage": True}},
                                   {"X-Request-Id": request_id})
            return stream, f"cmpl-{request_id}-0"

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(one, range(8)))
        for stream, _ in results:
            assert stream.status == 200 and stream.chunks[-1]["usage"]["completion_tokens"] == 40
            assert sum(stream.token_counts()) == 40
        preemptions = server.metric("vllm:num_preemptions_total")
        assert preemptions > 0
        records = [server.timings(request_id) for _, request_id in results]
        assert sum(r["num_preemptions"] for r in records) == preemptions
        assert server.metric("vllm:kv_cache_usage_perc") == 0.0  # every block came back
        assert server.metric("vllm:prompt_tokens_total") == 80  # recompute does not count the prompt again
        assert server.terminate_and_wait() == 0
    finally:
        server.close()


def test_max_num_seqs_bounds_the_running_batch_and_a_burst_waits_or_is_refused():
    server = LlmServer(["--max-num-seqs", "2", "--max-waiting", "4", "--step-extra-delay-ms", "5"])
    try:
        observed: list[tuple[float, float]] = []
        stop = threading.Event()

        def scrape() -> None:
            while not stop.is_set():
                observed.append((server.metric("vllm:num_requests_running"),
                                 server.metric("vllm:num_requests_waiting")))
                time.sleep(0.02)

        def one(i: int) -> tuple[int, Any]:
            status, _, body = server.request("POST", "/v1/completions",
                                             {"prompt": f"burst {i}", "max_tokens": 20, "ignore_eos": True})
            return status, json.loads(body)

        scraper = threading.Thread(target=scrape)
        scraper.start()
        try:
            with ThreadPoolExecutor(max_workers=10) as pool:
                answers = list(pool.map(one, range(10)))
        finally:
            stop.set()
            scraper.join()
        statuses = [status for status, _ in answers]
        assert set(statuses) == {200, 429} and statuses.count(200) >= 4
        for status, document in answers:
            if status == 429:
                assert document["error"]["code"] == 429 and document["error"]["type"] == "RateLimitError"
            else:
                assert document["usage"]["completion_tokens"] == 20
        assert max(running for running, _ in observed) <= 2
        assert max(waiting for _, waiting in observed) > 0
        assert server.metric("vllm:request_queue_time_seconds_count") == statuses.count(200)
        assert server.terminate_and_wait() == 0
    finally:
        server.close()


def test_a_client_that_disconnects_aborts_its_request_and_frees_its_blocks():
    server = LlmServer(["--step-extra-delay-ms", "5"])
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        connection.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "a long one", "max_tokens": 1500, "ignore_eos": True, "stream": True}).encode(),
            headers={"content-type": "application/json", "X-Request-Id": "gone"})
        response = connection.getresponse()
        events = 0
        while events < 3:
            events += response.readline().startswith(b"data: ")
        response.close()
        connection.close()
        deadline = time.monotonic() + 20
        while server.metric("vllm:request_success_total", finished_reason="abort") < 1:
            assert time.monotonic() < deadline, "the request was not aborted"
            time.sleep(0.05)
        record = server.timings("cmpl-gone-0")
        assert record["finish_reason"] == "abort"
        assert 3 <= record["attributes"]["gen_ai.usage.completion_tokens"] < 1500
        assert record["attributes"]["gen_ai.response.finish_reasons"] == '["abort"]'
        assert server.metric("vllm:num_requests_running") == 0 and server.metric("vllm:kv_cache_usage_perc") == 0
        status, document = server.post_json("/v1/embeddings", {"input": "still serving", "encoding_format": "base64"})
        assert status == 200 and len(base64.b64decode(document["data"][0]["embedding"])) == 4 * 64
        assert server.terminate_and_wait() == 0
    finally:
        server.close()
