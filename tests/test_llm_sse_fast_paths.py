"""The OpenAI reply parser's fast paths (one whole event per read; a stream's
learned chunk shape read without ``json.loads``) must give exactly what a
full parse of every event gives: the same content chunks, texts (seen here
as token counts: the final usage makes each chunk's share its text length),
times, finish reason, usage and errors, whatever the texts hold (quotes,
backslashes, escapes, control characters, non-ASCII) and however the JSON is
written."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.loadgen import openai_stream
from tailscope.loadgen.openai_stream import SHAPE_LEARNS, OpenAIReply, chunk_text, shape_of

STYLES = (
    {"separators": (",", ":"), "ensure_ascii": False},  # pydantic / vLLM
    {"separators": (", ", ": "), "ensure_ascii": True},  # Python's json.dumps defaults
    {"separators": (",", ":"), "ensure_ascii": True},
)


def _chunk(kind: str, text: str, n: int, api: str) -> dict:
    """One chunk object of ``kind``, as vLLM writes them (``n``: tokens sent so far)."""
    head = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}
    if kind == "usage":
        return {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
    if kind == "error":
        return {"error": {"message": text or "boom", "type": "InternalServerError", "code": 500}}
    if api == "completions":
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if kind == "finish" else None}
    else:
        delta = {"role": "assistant", "content": ""} if kind == "role" else {} if kind == "finish" else {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": "length" if kind == "finish" else None}
    chunk = {**head, "choices": [choice]}
    if kind == "continuous":
        chunk["usage"] = {"prompt_tokens": 3, "completion_tokens": n}
    elif kind != "plain_no_usage":
        chunk["usage"] = None
    return chunk


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)
_EVENT = st.tuples(st.sampled_from(["content"] * 6 + ["continuous", "finish", "role", "plain_no_usage", "error"]),
                   _TEXT, st.integers(min_value=0, max_value=2))


def _events(kinds: list[tuple[str, str, int]], api: str, fixed_style: int | None) -> tuple[list[bytes], list[str]]:
    """SSE events (one per read) and the text each gives by a full parse ('' for none)."""
    events, texts, sent = [], [], 0
    for kind, text, style in kinds:
        gives = "" if kind == "error" else chunk_text(_chunk(kind, text, 0, api)["choices"])[0]
        sent += len(gives)
        raw = json.dumps(_chunk(kind, text, sent, api), **STYLES[fixed_style if fixed_style is not None else style])
        events.append(b"data: " + raw.encode() + b"\n\n")
        texts.append(gives)
    total = sum(len(t) for t in texts)
    events.append(b"data: " + json.dumps(_chunk("usage", "", total, api)).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    texts += ["", ""]
    return events, texts


def _read(events: list[bytes], learn: bool = True, reads: list[int] | None = None) -> OpenAIReply:
    """Feed ``events``, ``reads[i]`` of them in read i (default one per read) at t = i."""
    reply = OpenAIReply("text/event-stream")
    if not learn:
        reply._shape_learns = SHAPE_LEARNS  # a reference that parses every event in full
    start = 0
    for t, count in enumerate(reads or [1] * len(events)):
        reply.feed(b"".join(events[start:start + count]), t)
        start += count
    reply.finish(len(events))
    return reply


def _read_of_each(reads: list[int]) -> list[int]:
    return [t for t, count in enumerate(reads) for _ in range(count)]


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(_EVENT, max_size=25), api=st.sampled_from(["chat", "completions"]),
       fixed_style=st.one_of(st.none(), st.integers(min_value=0, max_value=2)), data=st.data())
def test_fast_paths_read_what_a_full_parse_reads(kinds, api, fixed_style, data):
    events, texts = _events(kinds, api, fixed_style)
    reads: list[int] = []
    while sum(reads) < len(events):  # several whole events in a read, as when the reader fell behind
        reads.append(min(data.draw(st.integers(min_value=1, max_value=4)), len(events) - sum(reads)))
    fast, full = _read(events, reads=reads), _read(events, learn=False)
    read_of = _read_of_each(reads)
    content = [(read_of[i], text) for i, text in enumerate(texts) if text]
    first_error = next((i for i, (kind, _, _) in enumerate(kinds) if kind == "error"), None)
    assert fast.times == [t for t, _ in content] and len(full.times) == len(content)
    assert fast.tokens == full.tokens == [len(text) for _, text in content]
    assert fast.output_tokens == full.output_tokens == sum(len(text) for _, text in content)
    assert fast.finish_reason == full.finish_reason
    assert fast.error_message == full.error_message and (fast.error_message is not None) == (first_error is not None)
    assert fast.events == full.events == len(events) and fast.malformed == full.malformed == 0 and fast.done


def test_a_vllm_stream_is_read_with_one_full_parse_per_shape(monkeypatch):
    events, texts = _events([("role", "", 0)] + [("content", f" tok{i}", 0) for i in range(100)] + [("finish", "", 0)],
                            "chat", 0)
    parses = []
    real_loads = json.loads
    monkeypatch.setattr(openai_stream.json, "loads", lambda raw: parses.append(raw) or real_loads(raw))
    reply = _read(events)
    assert reply.tokens == [len(f" tok{i}") for i in range(100)] and reply.finish_reason == "length"
    # the role chunk, the first content chunk (its shape learned), the finish chunk and the usage chunk
    assert len(parses) == 4


def test_after_a_shape_is_learned_escapes_and_raw_control_bytes_take_the_full_parse():
    prefix = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"'
    suffix = b'"},"finish_reason":null}],"usage":null}\n\n'
    reply = OpenAIReply("text/event-stream")
    reply.feed(prefix + b"plain" + suffix, 1)
    reply.feed(prefix + b'say \\"hi\\" \\u00e9' + suffix, 2)  # escapes: not the bytes themselves
    reply.feed(prefix + "é😀".encode() + suffix, 3)  # raw UTF-8 is verbatim
    reply.feed(prefix + b"bad\x01byte" + suffix, 4)  # a raw control byte is not JSON
    reply.feed(prefix + b"\xff" + suffix, 5)  # nor is invalid UTF-8
    reply.feed(prefix + b"" + suffix, 6)  # an empty text is no content
    reply.feed(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":17}}\n\n', 7)
    reply.finish(8)
    assert reply.times == [1, 2, 3] and reply.malformed == 2
    assert reply.tokens == [5, 10, 2]  # 'say "hi" é' is 10 characters


def test_shape_of_takes_only_a_verbatim_single_text():
    raw = b'{"choices":[{"delta":{"content":"ab"}}]}'
    assert shape_of(raw, "ab") == (b'{"choices":[{"delta":{"content":"', b'"}}]}')
    assert shape_of(raw, "abc") is None  # the text came from elsewhere too
    assert shape_of(b'{"choices":[{"delta":{"content":"a\\nb"}}]}', "a\nb") is None  # escaped
    assert shape_of(b'{"choices":[{"text":"a","delta":{"content":"a"}}]}', "a") is None  # two text strings
    assert shape_of(b'{"choices":[{"delta":{"reasoning_content":"ab"}}]}', "ab") is None
    assert shape_of(b'{"choices" : [{"text" : "ab"}]}', "ab") == (b'{"choices" : [{"text" : "', b'"}]}')
