"""The OpenAI reply parser on recorded bodies (tests/fixtures/llm), each an SSE
or JSON edge case, fed whole, byte by byte and in arbitrary read splits: the
token counts, finish reason, usage and errors must not depend on the splits,
and each content chunk's time must be the read that completed its event."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.loadgen.llm_tokens import TokenCounter
from tailscope.loadgen.openai_stream import ERROR_BODY_BYTES, OpenAIReply, apportion, chunk_text

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "llm")
with open(os.path.join(FIXTURES, "expected.json"), encoding="utf-8") as _fh:
    EXPECTED = {k: v for k, v in json.load(_fh).items() if not k.startswith("_")}


def _body(name: str) -> bytes:
    with open(os.path.join(FIXTURES, name), "rb") as fh:
        return fh.read()


def _parse(name: str, cuts: list[int]) -> tuple[OpenAIReply, int]:
    """Feed fixture ``name`` in reads cut at ``cuts`` (read i at t = i); finish at t = reads."""
    expected = EXPECTED[name]
    body = _body(name)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(body))), len(body)]
    reply = OpenAIReply(expected["content_type"], generates=expected.get("generates", True))
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        reply.feed(body[a:b], i)
    reads = len(bounds) - 1
    reply.finish(reads)
    return reply, reads


def _check(reply: OpenAIReply, expected: dict) -> None:
    assert reply.tokens == expected["tokens"]
    assert len(reply.times) == len(expected["tokens"])
    assert reply.output_tokens == expected["output_tokens"]
    assert reply.prompt_tokens == expected["prompt_tokens"]
    assert reply.token_count_source == expected["source"]
    assert reply.finish_reason == expected["finish_reason"]
    assert reply.done == expected["done"]
    assert reply.error_message == expected["error"]
    if expected["error"] is not None:
        assert reply.error_body is not None and len(reply.error_body) <= ERROR_BODY_BYTES
        assert expected["error"][:40] in reply.error_text()
    if "malformed" in expected:
        assert reply.malformed == expected["malformed"]
    assert reply.times == sorted(reply.times)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_body_read_whole(name):
    reply, _ = _parse(name, [])
    _check(reply, EXPECTED[name])
    assert reply.bytes == len(_body(name))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_body_read_byte_by_byte(name):
    body = _body(name)
    reply, _ = _parse(name, list(range(1, len(body))))
    _check(reply, EXPECTED[name])


def _completion_offsets(name: str) -> list[int]:
    """Byte offset that completes each content chunk (one byte per read; the body's
    length for a chunk completed only at the end of the body)."""
    body = _body(name)
    reply, _ = _parse(name, list(range(1, len(body))))
    return list(reply.times)  # read i holds byte i; finish is at len(body)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_recorded_bodies_in_arbitrary_read_splits(data):
    name = data.draw(st.sampled_from(sorted(EXPECTED)))
    body = _body(name)
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=max(1, len(body) - 1)), max_size=40))
    reply, reads = _parse(name, cuts)
    _check(reply, EXPECTED[name])
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(body))), len(body)]
    for offset, t in zip(_completion_offsets(name), reply.times):
        expected_read = next((i for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if a <= offset < b), reads)
        assert t == expected_read, (name, offset, bounds)


def test_the_usage_chunk_and_done_do_not_move_the_last_token_time():
    body = _body("vllm_chat_usage.sse")
    events = body.split(b"\n\n")
    reply = OpenAIReply("text/event-stream")
    for t, event in enumerate(events):  # one event per read at t = 0, 1, 2, ...
        reply.feed(event + b"\n\n" if event else b"", t * 1000)
    reply.finish(99_000)
    # events: 0 role, 1-4 content, 5 finish-only, 6 usage, 7 [DONE]
    assert reply.times == [1000, 2000, 3000, 4000]
    assert reply.first_token_ns == 1000 and reply.last_token_ns == 4000
    assert reply.max_gap_ns == 1000 and reply.usage["completion_tokens"] == 10


def test_a_cr_at_the_end_of_a_read_waits_for_its_lf():
    reply = OpenAIReply("text/event-stream")
    reply.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\r', 1)
    reply.feed(b"\n\r", 2)  # the event's LF, then a CR that may start the blank line's CRLF
    reply.feed(b"\n", 3)  # ... it does: one blank line, one event, at t=3
    reply.feed(b'data: {"choices":[{"delta":{"content":"b"}}]}\r\r', 4)  # CR-only lines
    reply.feed(b"data: [DONE]\r\r", 5)
    reply.finish(6)
    assert reply.times == [3, 5] and reply.done and reply.tokens == [1, 1]


def test_events_without_blank_lines_between_them_are_still_counted():
    reply = OpenAIReply("text/event-stream")
    reply.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\ndata: {"choices":[{"delta":{"content":"b c"}}]}\n'
               b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}\ndata: [DONE]\n', 1)
    reply.finish(2)
    assert reply.tokens == [1, 2] and reply.output_tokens == 3 and reply.done and reply.malformed == 0


def test_tokenizer_counts_chunks_when_no_usage():
    class _Spaces:  # a stand-in tokenizer: one token per character that is not a space
        def encode(self, text, add_special_tokens=False):
            return type("E", (), {"ids": [c for c in text if c != " "]})()

    counter = TokenCounter(_Spaces())
    reply = OpenAIReply("text/event-stream", counter=counter)
    reply.feed(_body("interrupted_no_usage.sse"), 1)
    reply.finish(2)
    # "Once", " upon a", " time": 4, 5, 4 non-space characters
    assert reply.token_count_source == "tokenizer" and reply.output_tokens == 13
    assert reply.tokens == [4, 5, 4]


def test_json_body_detected_without_content_type_and_sse_by_its_first_bytes():
    reply = OpenAIReply(None)
    for i, b in enumerate(_body("chat_nonstream.json")):
        reply.feed(bytes([b]), i)
    reply.finish(10_000)
    assert reply.framing == "json" and reply.tokens == [8] and reply.times == [10_000]
    sse = OpenAIReply("text/plain")  # a server that mislabels its stream
    sse.feed(b"da", 1)
    sse.feed(b'ta: {"choices":[{"text":"x"}]}\n\n', 2)
    sse.finish(3)
    assert sse.framing == "sse" and sse.times == [2]


def test_error_status_body_is_kept_bounded():
    reply = OpenAIReply("application/json")
    body = b'{"detail": "' + b"x" * 1000 + b'"}'
    reply.feed(body, 1)
    reply.finish(2)
    assert reply.error_message is None  # not an OpenAI error object ...
    text = reply.error_text(status=500)  # ... but a failed request keeps the body's first bytes
    assert text == body[:ERROR_BODY_BYTES].decode() and reply.error_text(status=200) is None


def test_chunk_text_reads_every_kind_of_content():
    assert chunk_text([{"delta": {"tool_calls": [{"function": {"arguments": "{\"a\""}}]}}]) == ('{"a"', None)
    assert chunk_text([{"text": "a"}, {"text": "b", "finish_reason": "length"}]) == ("ab", "length")
    assert chunk_text([]) == ("", None) and chunk_text(None) == ("", None)


@pytest.mark.parametrize("total,weights,expected", [
    (10, [9, 16, 5, 14], [2, 4, 1, 3]),
    (3, [1, 1, 1], [1, 1, 1]),
    (5, [100, 1, 1], [3, 1, 1]),  # every chunk keeps at least one token
    (2, [1, 1, 1], [1, 1, 0]),  # fewer tokens than chunks
    (4, [0, 0], [2, 2]),
    (0, [3], [0]),
    (7, [], []),
])
def test_apportion_keeps_the_total(total, weights, expected):
    out = apportion(total, weights)
    assert out == expected and sum(out) == (total if weights else 0)
