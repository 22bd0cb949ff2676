"""Tool-call streams of the real vLLM (CPU build, the tiny random Llama of tests/real_servers).

vLLM answers a named ``tool_choice`` with guided decoding: the function's arguments are streamed
as ``tool_calls`` deltas (the first with ``id``, ``type`` and ``function.name``, the rest with
pieces of ``arguments`` by ``index``). It needs ``--enable-auto-tool-choice`` and a tool parser;
``pythonic`` needs no special token, which the tiny model's 2,048-word BPE vocabulary lacks (the
hermes and reasoning parsers look for ``<tool_call>`` and ``<think>`` tokens: not testable with
this model, nor images, nor rerank/score, which need a multimodal or a classification model).

Checked: the raw stream, fed to the reply parser whole and in arbitrary splits, assembles one call
of the named function whose arguments are the concatenated pieces; the load generator's records
(``openai-chat`` class with ``tools`` and ``tool_choice``) count the call, put every output token
on the tool call (no answer, no reasoning tokens), take the token counts from ``usage``, and
complete the call with the stream's last content chunk.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.request

import pytest
from cli_helpers import free_port

from real_servers.venvs import InstallFailed
from real_servers.vllm_server import SERVED_MODEL, VllmServer, tiny_model, vllm_venv
from tailscope.loadgen.openai_stream import OpenAIReply
from tailscope.rundir import read_stream, schema

pytestmark = pytest.mark.real_server

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def vllm_tools(tmp_path_factory):
    try:
        venv = vllm_venv()
        model_dir = tiny_model(venv)
    except InstallFailed as exc:
        pytest.skip(str(exc))
    tmp = tmp_path_factory.mktemp("vllm-tools")
    server = VllmServer(venv.python, model_dir, free_port(), free_port(), str(tmp / "vllm.log"),
                        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "pythonic"))
    try:
        server.start()
        print(f"\nvLLM {SERVED_MODEL} with tool calls: ready in {server.ready_s:.1f} s")
        yield server
    finally:
        server.stop()


def _raw_stream(server: VllmServer) -> bytes:
    body = {"model": SERVED_MODEL, "messages": [{"role": "user", "content": "the weather in paris"}],
            "max_tokens": 48, "stream": True, "stream_options": {"include_usage": True}, "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    request = urllib.request.Request(f"{server.url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def test_vllm_named_tool_call_stream_is_assembled_by_index(vllm_tools):
    raw = _raw_stream(vllm_tools)
    pieces = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                for call in (choice.get("delta") or {}).get("tool_calls") or []:
                    pieces.append(call.get("function", {}).get("arguments") or "")
    rng = random.Random(7)
    for trial in range(20):
        cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 40)))) if trial else []
        reply = OpenAIReply("text/event-stream")
        for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(raw)])):
            reply.feed(raw[a:b], i)
        reply.finish(len(cuts) + 1)
        assert [c.name for c in reply.tool_calls] == ["get_weather"], raw[:2000]
        assert reply.tool_calls[0].id and reply.tool_calls[0].arguments == "".join(pieces)
        assert reply.token_count_source == "usage" and sum(reply.tokens) == reply.output_tokens
        assert reply.tool_call_tokens == reply.output_tokens and reply.answer_tokens == 0
        assert reply.reasoning_tokens == 0 and reply.tool_call_ns == reply.last_token_ns


def test_vllm_tool_class_records(vllm_tools, tmp_path):
    from test_llm_loopback import _run

    class Target:
        server_address = ("127.0.0.1", vllm_tools.port)

    classes = [{"name": "agent", "api": "openai-chat", "model": SERVED_MODEL, "prompt_tokens": 12,
                "output_tokens": 32, "ignore_eos": False, "tools": TOOLS, "tool_choice": "get_weather"}]
    started = time.monotonic()
    _run(tmp_path, Target, classes, rate=2, duration_s=4)
    print(f"4 s of tool-call load: {time.monotonic() - started:.1f} s")
    rows = read_stream(os.path.join(tmp_path, schema.REQUESTS), schema.REQUESTS_SCHEMA).table.to_pylist()
    chunks: dict[str, int] = {}
    for row in read_stream(os.path.join(tmp_path, schema.CHUNKS), schema.CHUNKS_SCHEMA).table.to_pylist():
        chunks[row["trace_id"]] = chunks.get(row["trace_id"], 0) + row["tokens"]
    assert len(rows) == 8 and not [r for r in rows if r["error_kind"]], rows
    for row in rows:
        assert row["tool_calls"] == 1 and row["token_count_source"] == "usage"
        assert row["answer_tokens"] == 0 and row["reasoning_tokens"] == 0 and row["first_answer_ns"] is None
        assert chunks[row["trace_id"]] == row["output_tokens"] >= 1
        assert row["tool_call_ns"] == row["last_token_ns"] and row["first_byte_ns"] <= row["tool_call_ns"]
