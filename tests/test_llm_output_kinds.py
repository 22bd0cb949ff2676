"""Reasoning streams and tool calls (issue 29 items 4 and 5), from the stream parser to the report.

- vLLM-shaped bodies (tests/fixtures/llm: ``vllm_reasoning_details.sse``,
  ``vllm_tool_calls.sse``) fed in arbitrary read splits: per-kind token counts
  equal usage, the tool calls are assembled by index, and every kind's first
  and last time is the read that completed that chunk;
- the scenario fields (``reasoning_effort``, ``tools``, ``tool_choice``) and
  their errors;
- the real load generator against the LLM reference server: the records'
  reasoning and tool-call columns equal the server's own counts, and the
  first-answer time and per-kind TPOT agree with the server's timings (median
  error within 1 ms); the analysis, the report and ``compare`` carry them.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_llm_loopback import MS, _run
from test_llm_reference_client import _Server

from tailscope.loadgen.exchange import ArrivedWithHead
from tailscope.loadgen.llm_fields import openai_class_fields
from tailscope.loadgen.llm_requests import LLMRequestMaker
from tailscope.loadgen.openai_stream import OpenAIReply
from tailscope.loadgen.spec import SpecError
from tailscope.rundir import read_stream, schema

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "llm")
with open(os.path.join(FIXTURES, "expected.json"), encoding="utf-8") as _fh:
    EXPECTED = {k: v for k, v in json.load(_fh).items() if isinstance(v, dict) and "kinds" in v}


def _body(name: str) -> bytes:
    with open(os.path.join(FIXTURES, name), "rb") as fh:
        return fh.read()


def _feed(body: bytes, cuts: list[int]) -> tuple[OpenAIReply, list[int]]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(body))), len(body)]
    reply = OpenAIReply("text/event-stream")
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        reply.feed(body[a:b], i)
    reply.finish(len(bounds) - 1)
    return reply, bounds


def _event_ends(body: bytes) -> list[tuple[int, str]]:
    """(offset of the blank line ending each content event, its kind letter), from the body itself."""
    out, start = [], 0
    while True:
        end = body.find(b"\n\n", start)
        if end < 0:
            return out
        payload = body[start + 6:end]
        start = end + 2
        if payload == b"[DONE]":
            continue
        choices = json.loads(payload)["choices"]
        delta = choices[0]["delta"] if choices else {}
        args = "".join(c.get("function", {}).get("arguments", "") for c in delta.get("tool_calls") or [])
        kind = "A" if delta.get("content") else "T" if args else "R" if delta.get("reasoning_content") else None
        if kind:
            out.append((end + 1, kind))  # the second LF completes the event


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_reasoning_and_tool_streams_in_arbitrary_read_splits(data):
    name = data.draw(st.sampled_from(sorted(EXPECTED)))
    expected, body = EXPECTED[name], _body(name)
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(body) - 1), max_size=60))
    reply, bounds = _feed(body, cuts)
    assert reply.tokens == expected["tokens"] and sum(reply.tokens) == reply.output_tokens == expected["output_tokens"]
    assert reply.reasoning_tokens == expected["reasoning_tokens"]
    assert reply.answer_tokens == expected["answer_tokens"]
    kinds = expected["kinds"]
    tool_tokens = sum(t for t, k in zip(reply.tokens, kinds) if k == "T")
    assert reply.reasoning_tokens + reply.answer_tokens + reply.tool_call_tokens == reply.output_tokens
    assert reply.tool_call_tokens == tool_tokens
    assert [{"index": c.index, "id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls] \
        == expected["tool_calls"]
    assert all(c.arguments_valid for c in reply.tool_calls)

    def read_of(offset: int) -> int:
        return next(i for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if a <= offset < b)

    ends = _event_ends(body)
    assert "".join(k for _, k in ends) == kinds
    times = {k: [read_of(offset) for offset, kind in ends if kind == k] for k in "RAT"}
    assert reply.times == [read_of(offset) for offset, _ in ends]
    assert (reply.first_reasoning_ns, reply.last_reasoning_ns) == (times["R"][0], times["R"][-1])
    assert (reply.first_answer_ns, reply.last_answer_ns) == ((times["A"][0], times["A"][-1]) if times["A"]
                                                             else (None, None))
    assert reply.tool_call_ns == (times["T"][-1] if times["T"] else None)
    columns = dict(zip(("reasoning_tokens", "answer_tokens", "first_reasoning_ns", "last_reasoning_ns",
                        "first_answer_ns", "last_answer_ns", "tool_calls", "tool_call_ns"), reply.kinds()))
    assert columns["tool_calls"] == len(expected["tool_calls"])
    names = schema.REQUESTS_SCHEMA.names
    assert names[names.index("reasoning_tokens"):][:8] == list(columns)


def test_hidden_reasoning_and_a_non_streamed_tool_call():
    """A server that counts reasoning it does not stream (usage only), and a whole JSON reply with a tool call."""
    usage = {"prompt_tokens": 5, "completion_tokens": 30, "completion_tokens_details": {"reasoning_tokens": 20}}
    body = (b'data: {"choices":[{"index":0,"delta":{"content":"The answer is 4."}}]}\n\n'
            b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b'}\n\ndata: [DONE]\n\n')
    reply, _ = _feed(body, [])
    assert (reply.reasoning_tokens, reply.answer_tokens, reply.tool_call_tokens) == (20, 10, 0)
    assert reply.first_reasoning_ns is None and reply.first_answer_ns == 0 and reply.tokens == [30]
    whole = json.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "think",
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()
    reply = OpenAIReply("application/json")
    reply.feed(whole, 7)
    reply.finish(8)
    assert reply.tool_call_ns == 8 and len(reply.tool_calls) == 1 and reply.tool_calls[0].arguments == '{"a": 1}'
    assert reply.first_reasoning_ns == 8 and reply.output_tokens == 9 and reply.finish_reason == "tool_calls"


def test_body_bytes_read_with_the_head_are_never_stamped_after_a_later_read():
    """A tool-call stream (vLLM's, recorded): its first event came in the response head's read (stamped in
    user space, here 10.7 ms late: the greenlet waited for a loaded loop), the rest in a later
    read with the kernel's receive stamp. TCP delivers in order, so the first arrived no later than
    the rest: its stamp is the earlier of the two, and the call is complete no earlier than the
    first byte (a loaded CI host once recorded tool_call_ns 10.7 ms before first_byte_ns)."""
    body = _body("vllm_tool_calls.sse")
    split = body.find(b"\n\n") + 2  # the first whole event rode with the head
    head_ns, kernel_ns = 1_796_561_637_307_344_120, 1_796_561_637_296_622_127
    reply = OpenAIReply("text/event-stream")
    front = ArrivedWithHead(reply, body[:split], head_ns)
    front.feed(body[split:], kernel_ns)
    front.finish(kernel_ns + MS)
    assert reply.times and reply.times == sorted(reply.times) and reply.times[0] == kernel_ns
    assert reply.first_token_ns <= reply.tool_call_ns == reply.last_token_ns == kernel_ns
    alone = OpenAIReply("text/event-stream")  # the whole body came with the head: stamped at its read
    whole = ArrivedWithHead(alone, body, head_ns)
    whole.finish(head_ns + MS)
    assert set(alone.times) == {head_ns} and alone.tool_call_ns == head_ns
    assert [c.arguments for c in alone.tool_calls] == [c.arguments for c in reply.tool_calls]
    assert alone.tokens == reply.tokens


def _fail(path, message):
    return SpecError(".".join(str(p) for p in path), message)


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search"}}]


def test_scenario_fields_go_into_the_body_and_bad_values_name_the_field():
    fields = {"api": "openai-chat", "model": "m", "reasoning_effort": "high", "tools": TOOLS, "tool_choice": "search",
              "extra_body": {"temperature": 0}}
    spec = openai_class_fields(fields, _fail, at=("classes", 0))["llm"]
    assert spec.describe()["tools"] == ["lookup", "search"] and spec.describe()["reasoning_effort"] == "high"
    body = json.loads(LLMRequestMaker("agent", spec, np.random.default_rng(1)).make()[0])
    assert body["reasoning_effort"] == "high" and body["tools"] == TOOLS
    assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}} and body["temperature"] == 0
    for bad, field, words in [
        ({"reasoning_effort": "max"}, "classes.0.reasoning_effort", "low, medium, high"),
        ({"tools": []}, "classes.0.tools", "non-empty list"),
        ({"tools": [{"type": "function", "function": {}}]}, "classes.0.tools.0.function.name", "name"),
        ({"tools": [{"type": "code"}]}, "classes.0.tools.0.type", "function tool"),
        ({"tools": TOOLS, "tool_choice": "other"}, "classes.0.tool_choice", "lookup, search"),
        ({"tool_choice": "auto"}, "classes.0.tool_choice", "only with `tools`"),
    ]:
        with pytest.raises(SpecError) as caught:
            openai_class_fields({"api": "openai-chat", "model": "m", **bad}, _fail, at=("classes", 0))
        assert caught.value.field == field and words in caught.value.message, (bad, caught.value)
    with pytest.raises(SpecError) as caught:
        openai_class_fields({"api": "openai-completions", "model": "m", "tools": TOOLS}, _fail, at=("classes", 1))
    assert caught.value.field == "classes.1.tools" and "openai-chat" in caught.value.message


STEP_MS = 3


@pytest.fixture
def kinds_server():
    server = _Server(["--tokens-per-chunk", "1", "--step-extra-delay-ms", str(STEP_MS), "--max-num-seqs", "32"])
    try:
        yield server
    finally:
        server.close()


def test_reference_server_reasoning_and_tool_calls_end_to_end(kinds_server, tmp_path):
    model = "tailscope-llm"
    classes = [
        {"name": "think", "api": "openai-chat", "model": model, "prompt_tokens": 12, "reasoning_effort": "medium",
         "output_tokens": {"dist": "uniform", "min": 16, "max": 40}},
        {"name": "agent", "api": "openai-chat", "model": model, "prompt_tokens": 20, "reasoning_effort": "low",
         "output_tokens": 24, "tools": TOOLS, "tool_choice": "auto"},
        {"name": "agent_whole", "api": "openai-chat", "model": model, "prompt_tokens": 8, "stream": False,
         "output_tokens": 12, "tools": TOOLS, "tool_choice": "search"},
    ]
    _run(tmp_path, kinds_server, classes, rate=10, duration_s=3.0)
    server = kinds_server.timings()
    rows = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA).table.to_pylist()
    assert len(rows) == 30 and not [r for r in rows if r["error_kind"]]
    answer_error, reasoning_tpot_error, answer_tpot_error = [], [], []
    for row in rows:
        truth = server["chatcmpl-" + row["trace_id"]]
        n = truth["attributes"]["gen_ai.usage.completion_tokens"]
        reasoning = truth["reasoning_tokens"]
        assert row["output_tokens"] == n and row["reasoning_tokens"] == reasoning
        assert reasoning == {"think": n // 2, "agent": n // 4, "agent_whole": 0}[row["cls"]]
        if row["cls"] == "think":
            assert row["answer_tokens"] == n - reasoning and row["tool_calls"] == 0 and row["tool_call_ns"] is None
            answer_tpot_error.append((row["last_answer_ns"] - row["first_answer_ns"]) / (n - reasoning - 1)
                                     - (truth["last_token_ns"] - truth["answer_token_ns"]) / (n - reasoning - 1))
        else:
            assert row["answer_tokens"] == 0 and row["tool_calls"] == 1 and row["finish_reason"] == "tool_calls"
            assert row["first_answer_ns"] is None
            if row["cls"] == "agent_whole":
                # a whole reply: complete when its body was read
                assert row["first_byte_ns"] <= row["tool_call_ns"] <= row["end_ns"]
                continue
            # the call is complete with its last piece, the stream's last content chunk, which the
            # client reads after the server made the last token (by how much is the machine's load)
            assert row["tool_call_ns"] == row["last_token_ns"] and row["tool_call_ns"] >= truth["last_token_ns"]
        # the first reasoning token is TTFT; the first answer (or tool) token follows the reasoning
        assert row["first_reasoning_ns"] == row["first_byte_ns"]
        answer_ns = row["first_answer_ns"] if row["cls"] == "think" else row["last_reasoning_ns"]
        if row["cls"] == "think":
            answer_error.append(answer_ns - truth["answer_token_ns"])
        reasoning_tpot_error.append((row["last_reasoning_ns"] - row["first_reasoning_ns"]) / (reasoning - 1)
                                    - (truth["answer_token_ns"] - truth["first_token_ns"]) / reasoning)
    medians = {name: float(np.median(values)) / MS for name, values in
               (("first answer", answer_error), ("reasoning TPOT", reasoning_tpot_error),
                ("answer TPOT", answer_tpot_error))}
    print("client - server medians (ms):", {k: round(v, 3) for k, v in medians.items()})
    assert 0 <= medians["first answer"] < 1.0, medians
    assert abs(medians["reasoning TPOT"]) < 1.0 and abs(medians["answer TPOT"]) < 1.0, medians


SCENARIO = """\
name: llm-kinds
duration: 4s
seed: 5
timeout: 30s
arrival: {{process: poisson, rate: 12}}
classes:
  - name: think
    weight: 2
    api: openai-chat
    model: tailscope-llm
    prompt_tokens: 20
    output_tokens: 24
    reasoning_effort: {effort}
  - name: agent
    api: openai-chat
    model: tailscope-llm
    prompt_tokens: 30
    output_tokens: 16
    reasoning_effort: low
    tools:
      - {{type: function, function: {{name: lookup, parameters: {{type: object}}}}}}
    tool_choice: lookup
  - name: look
    api: openai-chat
    model: tailscope-llm
    prompt_tokens: 10
    output_tokens: 8
    images: {{count: {{dist: uniform, min: 1, max: 2}}, width: {{dist: uniform, min: 64, max: 320}}, height: 128}}
  - name: rank
    api: rerank
    model: tailscope-llm
    prompt_tokens: 6
    documents: {{dist: uniform, min: 2, max: 6}}
    document_tokens: {{dist: uniform, min: 10, max: 40}}
    top_n: 3
  - name: pairs
    api: score
    model: tailscope-llm
    prompt_tokens: 4
    documents: 3
    document_tokens: 12
"""


def _cli_run(tmp, server: _Server, name: str, effort: str) -> str:
    from cli_helpers import free_port, run_tailscope
    scenario = tmp / f"{name}.yaml"
    scenario.write_text(SCENARIO.format(effort=effort))
    done = run_tailscope("run", str(scenario), "--target", f"http://127.0.0.1:{server.server_address[1]}", "--out",
                         str(tmp / name), "--receiver-port", str(free_port()), "--receiver-grpc-port", "-1",
                         timeout=240)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    return next(str(p) for p in (tmp / name).iterdir() if p.is_dir())


def test_analysis_report_and_compare_carry_reasoning_and_tool_calls(kinds_server, tmp_path):
    """Two real `tailscope run`s: think with reasoning_effort low, then high (the answer waits for
    three times the reasoning), beside tool calls and image requests. The analysis has llm.reasoning,
    llm.tool_calls and llm.images (schema-valid), the report's block and headline answer with them,
    and compare finds the later first answer."""
    import jsonschema
    from cli_helpers import load_analysis

    from tailscope.analyzers.comparison.baseline import compare_runs
    from tailscope.reports.data import build_report_data

    low, high = _cli_run(tmp_path, kinds_server, "low", "low"), _cli_run(tmp_path, kinds_server, "high", "high")
    analysis = load_analysis(high)
    with open(os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")) as fh:
        jsonschema.validate(analysis, json.load(fh))
    llm = analysis["llm"]
    rows = read_stream(os.path.join(high, schema.REQUESTS), schema.REQUESTS_SCHEMA).table.to_pylist()
    reasoned = [r for r in rows if r["error_kind"] is None and r["reasoning_tokens"]]
    assert llm["reasoning"]["requests"] == len(reasoned) == llm["completed"] - sum(
        llm["classes"][name]["completed"] for name in ("look", "rank", "pairs"))
    assert llm["reasoning"]["reasoning_tokens"]["sum"] == sum(r["reasoning_tokens"] for r in reasoned)
    think = llm["classes"]["think"]["reasoning"]
    assert think["reasoning_tokens"]["p50"] == 18 and think["answer_tokens"]["p50"] == 6  # high: 0.75 x 24
    assert think["ttfa_ms"]["p50"]["value_ms"] > think["ttfr_ms"]["p50"]["value_ms"]
    tools = llm["classes"]["agent"]["tool_calls"]
    assert tools["calls"]["p50"] == 1 and tools["requests"] == llm["classes"]["agent"]["completed"]
    assert "tool_calls" not in llm["classes"]["think"]
    assert tools["time_to_tool_call_ms"]["p50"]["value_ms"] >= llm["classes"]["agent"]["ttft_ms"]["p50"]["value_ms"]
    data = build_report_data(analysis)
    kinds = data["llm"]["kinds"]
    assert [r["metric"] for r in kinds["rows"]] == ["time to first reasoning token", "time to first answer token",
                                                    "TPOT, reasoning", "TPOT, answer", "time to complete tool call",
                                                    "TTFT with images", "rerank/score end-to-end",
                                                    "rerank/score per document"]
    ranked = [r for r in rows if r["cls"] in ("rank", "pairs") and r["error_kind"] is None]
    ranking = llm["ranking"]
    assert ranking["requests"] == len(ranked) > 0 and "ranking" not in llm["classes"]["think"]
    assert ranking["documents"]["sum"] == sum(r["documents"] for r in ranked)
    assert ranking["document_tokens"]["sum"] == sum(r["document_tokens"] for r in ranked)
    for row in ranked:  # the server's usage: every query + document pair (a cross-encoder's prompts)
        query = 6 if row["cls"] == "rank" else 4
        assert row["token_count_source"] == "usage" and row["output_tokens"] is None
        assert row["prompt_tokens"] == row["documents"] * query + row["document_tokens"]
        assert (row["documents"] == 3 and row["document_tokens"] == 36) if row["cls"] == "pairs" else \
            (2 <= row["documents"] <= 6 and 10 * row["documents"] <= row["document_tokens"] <= 40 * row["documents"])
    looked = [r for r in rows if r["cls"] == "look" and r["error_kind"] is None]
    images = llm["images"]
    assert images["requests"] == len(looked) == llm["classes"]["look"]["completed"] > 0
    assert images["pixels"]["sum"] == sum(r["image_pixels"] for r in looked)
    assert images["request_bytes"]["sum"] == sum(r["bytes_out"] for r in looked)
    for row in looked:  # the server counted ceil(w/28) x ceil(h/28) tokens per image beside the 10 words
        assert 1 <= row["images"] <= 2 and 64 * 128 * row["images"] <= row["image_pixels"] <= 320 * 128 * row["images"]
        assert row["bytes_out"] > 4 * row["image_pixels"]  # 3 bytes a pixel, base64: 4/3 of that
        assert 10 + row["image_pixels"] / 28 ** 2 <= row["prompt_tokens"] <= 10 + row["images"] * 12 * 5
    labels = [h["label"] for h in data["llm_headline"]]
    assert any(label.startswith("time to first answer token P99") for label in labels)
    assert any(label.startswith("time to complete tool call P99") for label in labels)
    with open(os.path.join(high, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert 'id="llm-kinds"' in html and "time to complete tool call" in html
    with open(os.path.join(high, "summary.md"), encoding="utf-8") as fh:
        summary = fh.read()
    row = kinds["rows"][1]
    assert f"| {row['metric']} | {row['p50']} | {row['p99']} | {row['p99_ci']} |" in summary
    comparison = compare_runs(high, low)
    by_metric = {(r["metric"], r["percentile"]): r for r in comparison["llm"]["rows"]}
    ttfa = by_metric[("ttfa_ms", "p50")]
    # 18 reasoning tokens before the answer instead of 6: the first answer comes later
    assert ttfa["current"] > ttfa["baseline"] * 1.5 and ttfa["change"] > 0, ttfa
    assert ("time_to_tool_call_ms", "p99") in by_metric
    # the same server on both sides decodes reasoning at the same pace: a row, not a regression
    reasoning_tpot = by_metric[("reasoning_tpot_ms", "p99")]
    assert reasoning_tpot["baseline"] > 0 and reasoning_tpot["current"] > 0 and not reasoning_tpot["regressed"]
    from tailscope.reports.compare_html import llm_change_rows
    from tailscope.reports.upgrade import comparison_of
    shown = {(r["metric"], r["percentile"]) for r in llm_change_rows(comparison_of(comparison).llm)}
    assert {("time to first answer token", "P99"), ("time to complete tool call", "P50"),
            ("TTFT with images", "P99"), ("rerank/score end-to-end", "P99")} <= shown
    names = {c["name"] for c in comparison["checks"]}
    assert {"LLM time to first answer token P99", "LLM reasoning TPOT P99", "LLM time to complete tool call P99",
            "LLM TTFT with images P99", "LLM rerank/score end-to-end P99"} <= names
    assert any(label.startswith("rerank/score P99") for label in labels)


def test_image_parts_are_valid_pngs_of_the_drawn_sizes_and_bad_fields_name_themselves():
    import base64
    import struct
    import zlib

    fields = {"api": "openai-chat", "model": "m", "prompt_tokens": 5,
              "images": {"count": 2, "width": {"dist": "uniform", "min": 16, "max": 40}, "height": 24}}
    spec = openai_class_fields(fields, _fail, at=("classes", 0))["llm"]
    assert spec.describe()["images"]["width"] == {"dist": "uniform", "min": 16, "max": 40}
    maker = LLMRequestMaker("look", spec, np.random.default_rng(3))
    seen = set()
    for _ in range(5):
        body, info = maker.make()
        content = json.loads(body)["messages"][-1]["content"]
        assert content[0]["type"] == "text" and len(content[0]["text"].split()) == 5
        pixels = 0
        for part in content[1:]:
            url = part["image_url"]["url"]
            assert part["type"] == "image_url" and url.startswith("data:image/png;base64,")
            png = base64.b64decode(url.split(",", 1)[1])
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
            width, height = struct.unpack(">II", png[16:24])
            assert 16 <= width <= 40 and height == 24
            length = struct.unpack(">I", png[33:37])[0]
            assert png[37:41] == b"IDAT" and zlib.crc32(png[37:41 + length]) == struct.unpack(">I", png[41 + length:45 + length])[0]
            rows = zlib.decompress(png[41:41 + length])
            assert len(rows) == height * (1 + 3 * width) and all(rows[i * (1 + 3 * width)] == 0 for i in range(height))
            seen.add(rows)
            pixels += width * height
        assert info.images == (2, pixels)
    assert len(seen) == 10  # every image differs
    for bad, field, words in [
        ({"images": {"count": 1, "width": 0, "height": 8}}, "classes.0.images.width", "1..8192"),
        ({"images": {"count": 1, "width": 8}}, "classes.0.images.height", "missing"),
        ({"images": {"width": 8, "height": 8, "depth": 3}}, "classes.0.images.depth", "unknown field"),
        ({"images": [1]}, "classes.0.images", "mapping"),
        ({"images": {"count": 65, "width": 8, "height": 8}}, "classes.0.images.count", "0..64"),
    ]:
        with pytest.raises(SpecError) as caught:
            openai_class_fields({"api": "openai-chat", "model": "m", **bad}, _fail, at=("classes", 0))
        assert caught.value.field == field and words in caught.value.message, (bad, caught.value)


def test_reference_server_rerank_and_score_answer_as_vllm(kinds_server):
    """The shapes vLLM answers: score data in input order with usage.prompt_tokens; rerank results by
    relevance, cut to top_n, with usage.total_tokens (every query + document pair's tokens)."""
    import urllib.request

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{kinds_server.server_address[1]}{path}",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    documents = ["alpha beta", "gamma delta epsilon", "zeta", "eta theta iota kappa"]
    score = post("/v1/score", {"model": "tailscope-llm", "text_1": "what is it", "text_2": documents})
    assert [d["index"] for d in score["data"]] == [0, 1, 2, 3] and all(0 <= d["score"] <= 1 for d in score["data"])
    assert score["usage"]["prompt_tokens"] == 4 * 3 + 10 == score["usage"]["total_tokens"]
    rerank = post("/v1/rerank", {"model": "tailscope-llm", "query": "what is it", "documents": documents, "top_n": 2})
    scores = {d["index"]: d["score"] for d in score["data"]}
    assert [r["index"] for r in rerank["results"]] == sorted(scores, key=lambda i: -scores[i])[:2]
    assert [r["relevance_score"] for r in rerank["results"]] == [scores[r["index"]] for r in rerank["results"]]
    assert rerank["results"][0]["document"]["text"] == documents[rerank["results"][0]["index"]]
    assert rerank["usage"] == {"total_tokens": 22}


@pytest.mark.parametrize("field, value, line, where, words", [
    ("tool_choice", "lookup", 10, "classes[0].tool_choice", "got 'lookup'"),
    ("images", "{width: 0, height: 8}", 9, "classes[0].images.width", "1..8192 pixels"),
    ("top_n", 3, 9, "classes[0].top_n", "only for api: rerank"),
])
def test_a_bad_new_field_names_the_scenario_file_line_and_field(tmp_path, field, value, line, where, words):
    from tailscope.scenario_model.scenario import ScenarioError, load_scenario

    extra = ("    tools: [{type: function, function: {name: get_weather}}]\n" if field == "tool_choice" else "")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntarget: http://127.0.0.1:1\nduration: 2s\narrival: {process: constant, rate: 1}\nclasses:\n"
                    "  - name: c\n    api: openai-chat\n    model: m\n" + extra + f"    {field}: {value}\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert str(caught.value).startswith(f"{path}:{line}: {where}: ") and words in str(caught.value), caught.value
