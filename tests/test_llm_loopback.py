"""OpenAI-API classes end to end: a real Locust runner (subprocess) sends
chat, completions and embeddings requests to a loopback OpenAI-style server
that streams several tokens per chunk and stamps when it sent each chunk.
The records must carry the server's usage (or the tokenizer's exact count),
per-chunk token counts, TTFT from the scheduled send, per-token ITL and TPOT
matching the server's own timings, finish reasons, and the server's error JSON.

Run as a script, this file is the driver subprocess (Locust imported first)."""

from __future__ import annotations

if __name__ == "__main__":  # the driver subprocess: Locust (gevent patching) before anything else
    from tailscope.loadgen.local_runner import run_load  # noqa: F401

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tailscope.analyzers.stats.llm_metrics import itl_samples_ns, tpot_ns
from tailscope.rundir import read_stream, schema

MS = 1_000_000
TTFT_S = 0.05  # the server's delay before the first content chunk
GAP_S = 0.015  # between content chunks
USAGE_DELAY_S = 0.02  # between the last content chunk and the usage chunk
PATTERN = (3, 1, 4, 1, 5, 2)  # tokens per chunk, in turn
VOCABULARY = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")


class _OpenAIHandler(BaseHTTPRequestHandler):
    """A small OpenAI-compatible server: one token per word, several words per chunk."""

    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        arrived = time.time_ns()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        trace = (self.headers.get("traceparent") or "-").split("-")[1]
        log = {"arrived_ns": arrived, "path": self.path, "body": body, "sends": [], "tokens": []}
        self.server.log[trace] = log
        if body.get("model") == "missing-model":
            return self._json(404, {"error": {"message": "The model `missing-model` does not exist.",
                                              "type": "NotFoundError", "param": None, "code": 404}})
        if self.path == "/v1/embeddings":
            log["prompt_tokens"] = len(body["input"].split())
            return self._json(200, {"object": "list", "data": [{"index": 0, "embedding": [0.5, 0.25]}],
                                    "usage": {"prompt_tokens": log["prompt_tokens"], "total_tokens": 0}})
        chat = self.path == "/v1/chat/completions"
        prompt = " ".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
        log["prompt_tokens"] = self.prompt_tokens = len(prompt.split())
        n = body["max_tokens"]
        assert body.get("ignore_eos") is True, body
        words = [VOCABULARY[(i * 7 + len(prompt)) % len(VOCABULARY)] for i in range(n)]
        if not body.get("stream"):
            time.sleep(TTFT_S)
            log["completion_tokens"] = n
            message = {"role": "assistant", "content": " ".join(words)}
            return self._json(200, {"object": "chat.completion", "choices": [
                {"index": 0, "message": message, "finish_reason": "length"}],
                "usage": {"prompt_tokens": log["prompt_tokens"], "completion_tokens": n}})
        options = body.get("stream_options") or {}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:
            self._event({"object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}, options, 0)
        time.sleep(TTFT_S)
        sent = i = 0
        while sent < n:
            if i:
                time.sleep(GAP_S)
            if body.get("model") == "fails-mid-stream" and i == 2:
                self._chunk(b'data: {"error": {"object": "error", "message": "engine died", '
                            b'"type": "InternalServerError", "param": null, "code": 500}}\n\n')
                break
            k = min(PATTERN[i % len(PATTERN)], n - sent)
            text = (" " if sent else "") + " ".join(words[sent:sent + k])
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            choice["finish_reason"] = None
            sent += k
            log["sends"].append(time.time_ns())
            log["tokens"].append(k)
            self._event({"object": "chunk", "choices": [choice]}, options, sent, nasty=i % 3 == 1)
            i += 1
        else:
            finish = {"index": 0, "delta": {}, "finish_reason": "length"} if chat else \
                {"index": 0, "text": "", "finish_reason": "length"}
            self._event({"object": "chunk", "choices": [finish]}, options, sent)
            time.sleep(USAGE_DELAY_S)
            if options.get("include_usage"):
                self._chunk(b"data: " + json.dumps({"object": "chunk", "choices": [], "usage": {
                    "prompt_tokens": log["prompt_tokens"], "completion_tokens": sent}}).encode() + b"\n\n")
        log["completion_tokens"] = sent
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, obj: dict, options: dict, completion: int, nasty: bool = False) -> None:
        if options.get("include_usage"):
            obj["usage"] = ({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion}
                            if options.get("continuous_usage_stats") else None)
        data = json.dumps(obj).encode()
        # some events with a comment before them and `data:` without its space
        self._chunk(b": keep-alive\n\ndata:" + data + b"\n\n" if nasty else b"data: " + data + b"\n\n")

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _OpenAIHandler)
        self.log: dict[str, dict] = {}


@pytest.fixture
def openai_server():
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _tokenizer(path) -> str | None:
    try:
        import tokenizers
    except ImportError:
        return None
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(VOCABULARY)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path))
    return str(path)


def _classes(tmp_path) -> list[dict]:
    dataset = tmp_path / "convs.jsonl"
    dataset.write_text("\n".join(json.dumps(c) for c in [
        {"messages": [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"},
                      {"role": "user", "content": "second question"}]},
        {"conversations": [{"from": "human", "value": "other conversation"}]}]) + "\n")
    chat = {"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "uniform", "min": 5, "max": 50},
            "output_tokens": {"dist": "uniform", "min": 8, "max": 20}, "shared_prefix_tokens": 4}
    classes = [
        {"name": "chat", "weight": 3, **chat},
        {"name": "chat_cont", "weight": 2, **chat,
         "extra_body": {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}},
        {"name": "emb", "api": "openai-embeddings", "model": "e", "prompt_tokens": 12},
        {"name": "bad", "api": "openai-chat", "model": "missing-model", "prompt_tokens": 3, "output_tokens": 3},
        {"name": "broken", "api": "openai-chat", "model": "fails-mid-stream", "output_tokens": 20},
        {"name": "replay", "api": "openai-chat", "model": "m", "dataset": str(dataset), "output_tokens": 6},
        {"name": "nonstream", "api": "openai-chat", "model": "m", "stream": False, "output_tokens": 5,
         "prompt_tokens": 7},
    ]
    tokenizer = _tokenizer(tmp_path / "tokenizer.json")
    if tokenizer is not None:  # no usage from the server: the tokenizer counts
        classes.append({"name": "cmp_tok", "api": "openai-completions", "model": "m", "tokenizer": tokenizer,
                        "prompt_tokens": 9, "output_tokens": 10, "extra_body": {"stream_options": None}})
    return classes


def _run(tmp_path, server: _Server, classes: list[dict], rate: float, duration_s: float) -> dict:
    config = {"run_dir": str(tmp_path), "target": f"http://127.0.0.1:{server.server_address[1]}",
              "classes": classes, "rate": rate, "duration_s": duration_s}
    proc = subprocess.run([sys.executable, __file__, json.dumps(config)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_openai_classes_record_tokens_ttft_itl_and_errors(openai_server, tmp_path):
    classes = _classes(tmp_path)
    result = _run(tmp_path, openai_server, classes, rate=25, duration_s=2.4)
    requests = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA).table.to_pylist()
    chunks = read_stream(tmp_path / schema.CHUNKS, schema.CHUNKS_SCHEMA).table.to_pylist()
    assert result["completed"] == len(requests) == 60
    by_class: dict[str, list[dict]] = {}
    for row in requests:
        by_class.setdefault(row["cls"], []).append(row)
    assert set(by_class) == {c["name"] for c in classes}, {k: len(v) for k, v in by_class.items()}
    chunk_rows: dict[str, list[dict]] = {}
    for row in chunks:
        chunk_rows.setdefault(row["trace_id"], []).append(row)
    log = openai_server.log
    ttft_errors, itl_errors, tpot_errors, usage_gaps = [], [], [], []

    for name in ("chat", "chat_cont") + (("cmp_tok",) if "cmp_tok" in by_class else ()):
        for row in by_class[name]:
            server = log[row["trace_id"]]
            assert row["error_kind"] is None and row["status"] == 200, row
            assert row["output_tokens"] == server["completion_tokens"] == server["body"]["max_tokens"]
            assert row["prompt_tokens"] == server["prompt_tokens"]
            assert row["token_count_source"] == ("tokenizer" if name == "cmp_tok" else "usage")
            assert row["finish_reason"] == "length" and row["error_body"] is None
            rows = sorted(chunk_rows[row["trace_id"]], key=lambda r: r["index"])
            tokens = [r["tokens"] for r in rows]
            times = [r["t_ns"] for r in rows]
            assert row["chunks"] == len(rows) == len(server["tokens"])  # the role, finish and usage chunks are not
            assert sum(tokens) == row["output_tokens"]
            if name != "chat":  # per-chunk counts exact from continuous usage, or from the tokenizer
                assert tokens == server["tokens"]
            # TTFT from the scheduled send: the server's delay plus the trip; the role chunk does not count
            assert row["first_byte_ns"] == times[0]
            ttft = row["first_byte_ns"] - row["scheduled_ns"]
            assert TTFT_S * 1e9 <= ttft < TTFT_S * 1e9 + 500 * MS
            ttft_errors.append(ttft - (server["sends"][0] - server["arrived_ns"]))
            # the usage chunk and [DONE] came USAGE_DELAY_S later and did not move the last token
            assert row["last_token_ns"] == times[-1] < row["end_ns"]
            usage_gaps.append(row["end_ns"] - times[-1])
            # per-token ITL and TPOT against the server's own send times
            client = itl_samples_ns(times, server["tokens"])
            truth = itl_samples_ns(server["sends"], server["tokens"])
            assert len(client) == row["output_tokens"] - server["tokens"][0]
            itl_errors += (client - truth).tolist()
            tpot = tpot_ns(row["first_byte_ns"], row["last_token_ns"], row["output_tokens"])
            tpot_errors.append(tpot - tpot_ns(server["sends"][0], server["sends"][-1], server["completion_tokens"]))
    assert float(np.median(usage_gaps)) >= 0.7 * USAGE_DELAY_S * 1e9
    assert abs(float(np.median(ttft_errors))) < 10 * MS
    assert float(np.median(np.abs(itl_errors))) < 3 * MS, np.percentile(np.abs(itl_errors), [50, 90, 100])
    assert float(np.median(np.abs(tpot_errors))) < 2 * MS

    for row in by_class["emb"]:
        assert row["error_kind"] is None and row["chunks"] == 0 and row["output_tokens"] is None
        assert row["prompt_tokens"] == 12 == log[row["trace_id"]]["prompt_tokens"]
        assert row["token_count_source"] == "usage" and row["trace_id"] not in chunk_rows
    for row in by_class["nonstream"]:
        assert row["error_kind"] is None and row["chunks"] == 0 and row["trace_id"] not in chunk_rows
        assert row["output_tokens"] == 5 and row["prompt_tokens"] == log[row["trace_id"]]["prompt_tokens"] >= 7
        assert row["finish_reason"] == "stop" or row["finish_reason"] == "length"
        assert log[row["trace_id"]]["body"]["stream"] is False
    for row in by_class["bad"]:
        assert row["error_kind"] == "http" and row["status"] == 404 and row["error"] == "HTTP 404"
        assert "does not exist" in row["error_body"] and json.loads(row["error_body"])["error"]["code"] == 404
    for row in by_class["broken"]:
        assert row["error_kind"] == "other" and row["error"] == "server error: engine died"
        assert json.loads(row["error_body"])["error"]["message"] == "engine died"
        assert row["output_tokens"] == 2 and row["token_count_source"] == "chunks"  # no usage: one per chunk
        assert [r["tokens"] for r in chunk_rows[row["trace_id"]]] == [1, 1]
    # dataset replay: the turns in order, each with its conversation's history
    replay = sorted(by_class["replay"], key=lambda r: r["scheduled_ns"])
    sent = [log[r["trace_id"]]["body"]["messages"] for r in replay]
    expected = [[{"role": "user", "content": "first question"}],
                [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"},
                 {"role": "user", "content": "second question"}],
                [{"role": "user", "content": "other conversation"}]]
    assert sent == [expected[i % 3] for i in range(len(sent))] and len(sent) >= 2
    assert all(log[r["trace_id"]]["body"]["max_tokens"] == 6 for r in replay)


def _driver(config: dict) -> dict:
    """The subprocess: build the plan from plain class fields, run it, write the run's streams."""
    import dataclasses

    from tailscope.loadgen.llm_fields import openai_class_fields
    from tailscope.loadgen.local_runner import run_load
    from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, RequestClass
    from tailscope.rundir import Appender

    classes = []
    for fields in config["classes"]:
        fields = dict(fields)
        name, weight = fields.pop("name"), fields.pop("weight", 1)
        classes.append(RequestClass(name=name, path="", weight=weight, **openai_class_fields(fields)))
    plan = LoadPlan(target=config["target"], duration_s=config["duration_s"], seed=11, timeout_s=10.0,
                    arrival=ArrivalSpec(process="constant", rate=config["rate"]), classes=tuple(classes))
    run_dir = config["run_dir"]
    sink = Appender(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA)
    chunks = Appender(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA)
    try:
        result = run_load(plan, sink, chunks=chunks, flush=(sink, chunks))
    finally:
        sink.close()
        chunks.close()
    return dataclasses.asdict(result)


if __name__ == "__main__":
    print(json.dumps(_driver(json.loads(sys.argv[1]))), flush=True)
