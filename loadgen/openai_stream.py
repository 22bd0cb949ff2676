"""Reading an OpenAI-compatible response as it arrives: SSE chunks, tokens, usage, errors.

No Locust or gevent import. :class:`OpenAIReply` is fed every network read of
a response body (bytes and the epoch ns it arrived, like
:class:`~.streams.ChunkTimer`) and keeps, for every *content chunk* (a chunk
whose choices carry text), its arrival time; at :meth:`OpenAIReply.finish` it
works out each chunk's token count, the request's prompt and output tokens
and where those counts came from.

Framing. A body is server-sent events when the Content-Type is
``text/event-stream`` or the body starts like one (``data``, ``event``, ``:``);
otherwise it is one JSON document (a non-streamed reply, an error), parsed at
the end. The SSE parser follows the WHATWG rules: lines end with CRLF, LF or
CR (a CR at the end of a read waits for the next read, which may bring its
LF); ``:`` starts a comment; ``data:`` with or without one space; several
``data`` lines of one event are joined with LF; a blank line ends the event;
events and lines may be split anywhere across reads. An event's time is the
time of the read that completed it. ``data: [DONE]`` ends the stream. An
event whose joined data is not JSON but whose lines each are (a server that
leaves out the blank lines between events) is read as one event per line
(counted right, but timed when the merged event ends).

Chunks. Text is read from each choice's ``delta`` (chat: ``content``,
``reasoning_content``, ``reasoning``, ``tool_calls[].function.arguments``),
``message`` (a non-streamed chat reply) and ``text`` (completions). A chunk
without text — the first chat chunk with only ``role``, the last one with
only ``finish_reason``, the usage chunk (``choices: []`` with ``usage``) —
is not a content chunk: it moves neither the first- nor the last-token time.
``finish_reason`` is the last one a choice gave.

Kinds of output (issue 29). Each content chunk has one kind: *answer*
(``content``, ``text``), *reasoning* (``reasoning_content`` as vLLM, SGLang
and DeepSeek send it, or ``reasoning``) or *tool* (``tool_calls`` arguments); a
chunk carrying both answer text and another kind is an answer chunk, one
with reasoning and tool-call text a tool chunk. The reply keeps the first and
last arrival of each kind (a mixed chunk also moves the reasoning times when
it has reasoning text), and assembles the tool calls by their ``index``
(``id`` and ``function.name`` from the chunk that has them, ``arguments``
concatenated in arrival order; a non-streamed reply's ``message.tool_calls``
whole); a call is complete at the arrival of its last piece of arguments.
Per-kind token counts: ``reasoning_tokens`` is
``usage.completion_tokens_details.reasoning_tokens`` when the server gives it
(then, unless every chunk carried usage, the reasoning chunks share it and the
other chunks share the rest), else the reasoning chunks' tokens; the answer
and tool-call counts are their chunks' tokens. The three add up to
``output_tokens`` (a server that counts reasoning it does not stream leaves
its share out of the chunks: then answer = output − reasoning − tool).

An object with ``error``
(OpenAI: ``{"error": {...}}``; TGI: ``{"error": "..."}``) or ``"object":
"error"`` (vLLM) is an error, in the stream or as the body; its first
:data:`ERROR_BODY_BYTES` bytes are kept.

Token counts (``token_count_source``; see ``tailscope.rundir.schema.TOKEN_COUNT_SOURCES``):

- ``usage``: the server's ``usage.completion_tokens`` (output) and
  ``usage.prompt_tokens`` (prompt; a reply without output — embeddings, score,
  rerank — that gives only ``total_tokens``, as vLLM's rerank does: that) — the
  last usage object in the stream.
  Each chunk's share: the increase of ``completion_tokens`` when every content
  chunk carried usage (vLLM's ``continuous_usage_stats``) and those add up,
  else the total apportioned over the chunks in proportion to their
  tokenizer counts (with a tokenizer) or their text lengths in characters;
- ``tokenizer`` (no usage, a tokenizer given): the tokenizer's count of the
  whole output text, apportioned by each chunk's own count;
- ``chunks`` (neither): one token per content chunk.

Apportioning keeps the sum exact (largest remainder) and gives every chunk
at least one token when there are at least as many tokens as chunks.

Fast paths (the generator reads tens of thousands of chunks a second). A
read that holds whole events of one ``data: `` line each (the usual case:
servers write one event per write, and TCP delivers it in one piece; a
read that waited holds several) skips the line splitting. And a stream's chunks usually differ only in
their text: vLLM's are ``{"id": same, "created": same, ..., "choices":
[{"index": 0, "delta": {"content": TEXT}, "logprobs": null,
"finish_reason": null}]}``. When a chunk is parsed (``json.loads``) and
found to be such a plain content chunk (text, no finish reason, no usage,
no error) whose text is the one ``"content"`` or ``"text"`` string in it,
written without escapes, the bytes before and after that string are kept
as the stream's *shape*. A later event that is the same bytes around a
string without quotes, backslashes or control characters is, by JSON's
grammar, the same object with another text: its text is those bytes
decoded as UTF-8, with no parse. Anything else (an escape, usage in every
chunk, a finish reason, an error, another shape) takes the full parse; a
reply learns a new shape at most :data:`SHAPE_LEARNS` times. A read that
is exactly one such event (``data: `` + shape + ``\n\n``, nothing pending)
is read at :meth:`OpenAIReply.feed`'s door, before any SSE framing.

Memory: the times, one count per chunk, one incomplete line and event; the
text only with a tokenizer and no usage yet; a non-SSE body up to
:data:`MAX_JSON_BODY_BYTES`. CPU: one ``json.loads`` per event, except for
the events the shape fast path reads.
"""

from __future__ import annotations

import json
import re

from tailscope.loadgen.llm_tokens import TokenCounter

#: Bytes of a server's error JSON (or error body) kept in the record.
ERROR_BODY_BYTES = 256
#: Largest non-streamed body kept to read its usage (larger: counted as unreadable).
MAX_JSON_BODY_BYTES = 64 << 20
_SSE_MEDIA = "text/event-stream"
_SSE_STARTS = (b"data", b"event", b":", b"id:", b"retry:")
_DONE = b"[DONE]"
#: Most shapes (see the module docstring) one reply learns; then it keeps the last one.
SHAPE_LEARNS = 4
#: The key of the string a chunk's text is read from, up to the string's opening quote.
_TEXT_KEY = re.compile(rb'"(?:content|text)"[ \t\r\n]*:[ \t\r\n]*"')
#: Bytes that keep a JSON string's raw bytes from being its value: a quote, a backslash, a control character.
_NOT_VERBATIM = re.compile(rb'["\\\x00-\x1f]')
#: Kinds of a content chunk (see "Kinds of output" in the module docstring).
ANSWER, REASONING, TOOL = 0, 1, 2


class OpenAIReply:
    """Collects one OpenAI-API response body: see the module docstring.

    ``counter``: a tokenizer-backed :class:`TokenCounter` to count chunk text,
    or None (character lengths and chunk counts). ``generates``: False for
    embeddings (no output tokens). Results are valid after :meth:`finish`.
    """

    def __init__(self, content_type: str | None = None, counter: TokenCounter | None = None,
                 generates: bool = True):
        media = (content_type or "").split(";")[0].strip().lower()
        self.framing: str | None = "sse" if media == _SSE_MEDIA else None  # None: decided by the first bytes
        self.counter = counter if counter is not None and counter.exact else None
        self.generates = generates
        self.times: list[int] = []  # arrival of every content chunk, epoch ns
        self.tokens: list[int] = []  # tokens of every content chunk (after finish)
        self.bytes = 0
        self.events = 0  # SSE events with data
        self.malformed = 0  # events whose data was not a JSON object
        self.done = False  # data: [DONE] seen
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.error_message: str | None = None  # the server's error message (stream or body)
        self.error_body: bytes | None = None  # first ERROR_BODY_BYTES of the error JSON
        self.head = b""  # first ERROR_BODY_BYTES of the body
        self.prompt_tokens: int | None = None  # from usage
        self.output_tokens: int | None = None
        self.token_count_source: str | None = None
        self._weights: list[int] = []
        self._deltas: list[int | None] = []
        self._texts: list[str] = []
        self._last_completion: int = 0
        self._pending = b""
        self._data: list[bytes] = []
        self._event = b""
        self._body = bytearray()
        self._body_overflow = False
        self._finished = False
        self._shape: tuple[bytes, bytes] | None = None  # bytes before and after a plain content chunk's text
        self._shape_learns = 0
        self._event_head: bytes = b""  # the shape as a whole one-line SSE event: b"data: " + before ...
        self._event_tail: bytes | None = None  # ... and after + b"\n\n" (None: no shape yet)
        # Kinds of output (module docstring); valid after finish except the times.
        self.first_reasoning_ns: int | None = None  # epoch ns of the first / last chunk with reasoning text
        self.last_reasoning_ns: int | None = None
        self.reasoning_tokens: int | None = None
        self.answer_tokens: int | None = None
        self.tool_call_tokens: int | None = None
        self.tool_calls: list[ToolCall] = []  # assembled, in index order
        self._kinds: list[int] | None = None  # kind of every content chunk; None: all answer so far
        self._calls: dict[int, ToolCall] = {}
        #: The answer chunks' text, kept only when set to a list (a multi-turn session's turn: its
        #: history needs the actual answer); reasoning and tool-call text are not part of it.
        self.answer_parts: list[str] | None = None

    # -- input ---------------------------------------------------------------------
    def feed(self, data: bytes, t_ns: int) -> None:
        """Body bytes from one network read, received at ``t_ns`` (epoch ns)."""
        if not data:
            return
        if len(self.head) < ERROR_BODY_BYTES:
            self.head += data[: ERROR_BODY_BYTES - len(self.head)]
        self.bytes += len(data)
        if self.framing is None:
            self._pending += data
            start = self._pending.lstrip()
            if not start or (not start.startswith(_SSE_STARTS) and any(s.startswith(start) for s in _SSE_STARTS)):
                return  # too few bytes to tell yet (e.g. b"da")
            self.framing = "sse" if start.startswith(_SSE_STARTS) else "json"
            data, self._pending = self._pending, b""
        if self.framing == "json":
            self._keep_body(data)
            return
        tail = self._event_tail
        if (tail is not None and data.endswith(tail) and data.startswith(self._event_head)
                and not self._pending and not self._data and not self._event):
            text = _verbatim_between(data, len(self._event_head), len(data) - len(tail))
            if text is not None:  # one whole event of the stream's shape: no splitting, no parse
                self.events += 1
                if text:
                    self._content(text, None, t_ns)
                return
        if not self._pending and not self._data and not self._event and data[-2:] == b"\n\n" and b"\r" not in data:
            if data.count(b"\n") == 2 and data[:6] == b"data: ":
                self.events += 1  # one whole event of one data line: no splitting
                self._payload(data[6:-2], b"", t_ns)
                return
            events = data[:-2].split(b"\n\n")
            if all(event[:6] == b"data: " and b"\n" not in event for event in events):
                for event in events:  # whole one-line events (a read that waited: several)
                    self.events += 1
                    self._payload(event[6:], b"", t_ns)
                return
        buffer = self._pending + data if self._pending else data
        if b"\r" in buffer:
            lines = buffer.splitlines(keepends=True)
            last = lines[-1]
            if last.endswith(b"\n"):
                self._pending = b""
            else:  # incomplete, or a CR that the next read may pair with an LF
                self._pending = lines.pop()
            for line in lines:
                self._line(line.rstrip(b"\r\n"), t_ns)
        else:
            lines = buffer.split(b"\n")
            self._pending = lines.pop()
            for line in lines:
                self._line(line, t_ns)

    def finish(self, t_ns: int) -> None:
        """The body ended at ``t_ns``: complete a last event without its blank line,
        parse a JSON body, and work out the token counts."""
        if self._finished:
            return
        self._finished = True
        if self.framing is None and self._pending:
            self.framing = "sse" if self._pending.lstrip().startswith(_SSE_STARTS) else "json"
            if self.framing == "json":
                self._keep_body(self._pending)
                self._pending = b""
        if self.framing == "sse":
            if self._pending:
                self._line(self._pending.rstrip(b"\r\n"), t_ns)
                self._pending = b""
            self._line(b"", t_ns)
        elif self.framing == "json" and self._body:
            self._json_body(bytes(self._body), t_ns)
            self._body = bytearray()
        self._count_tokens()

    # -- results ---------------------------------------------------------------------
    @property
    def first_token_ns(self) -> int | None:
        """Arrival of the first content chunk, epoch ns (None: no content)."""
        return self.times[0] if self.times else None

    @property
    def last_token_ns(self) -> int | None:
        """Arrival of the last content chunk, epoch ns (the usage chunk and [DONE] do not count)."""
        return self.times[-1] if self.times else None

    @property
    def max_gap_ns(self) -> int | None:
        """Largest gap between consecutive content chunks, ns; None with fewer than two."""
        times = self.times
        if len(times) < 2:
            return None
        return max(b - a for a, b in zip(times, times[1:]))

    def error_text(self, status: int = 200) -> str | None:
        """The server's error as text for the record: the error JSON found in the
        stream or body, else (``status`` >= 400) the body's first bytes; None
        when there is neither. At most :data:`ERROR_BODY_BYTES` bytes."""
        raw = self.error_body if self.error_body is not None else (self.head if status >= 400 else None)
        return raw.decode("utf-8", "replace") if raw else None

    # -- SSE -------------------------------------------------------------------------
    def _line(self, line: bytes, t_ns: int) -> None:
        if line[:6] == b"data: ":  # the common case first
            self._data.append(line[6:])
            return
        if not line:
            if self._data:
                payload = b"\n".join(self._data)
                event = self._event
                self._data = []
                self._event = b""
                self.events += 1
                self._payload(payload, event, t_ns)
            else:
                self._event = b""
            return
        if line[:1] == b":":
            return  # a comment (keep-alive)
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1:]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value

    def _payload(self, payload: bytes, event: bytes, t_ns: int) -> None:
        stripped = payload.strip()
        if stripped == _DONE:
            self.done = True
            return
        if self._shape is not None and not event:
            text = _text_in_shape(stripped, self._shape)
            if text is not None:
                if text:
                    self._content(text, None, t_ns)
                return
        try:
            obj = json.loads(stripped)
        except (ValueError, UnicodeDecodeError):
            obj = None
        if not isinstance(obj, dict):
            if b"\n" in stripped and obj is None:  # `data:` lines without the blank lines between events
                for part in stripped.split(b"\n"):
                    if part.strip():
                        self._payload(part, event, t_ns)
                return
            self.malformed += 1
            if event == b"error" and self.error_message is None:
                self._set_error(stripped, stripped.decode("utf-8", "replace")[:200])
            return
        self._object(obj, stripped, t_ns, event == b"error")

    # -- JSON ------------------------------------------------------------------------
    def _keep_body(self, data: bytes) -> None:
        if self._body_overflow:
            return
        if len(self._body) + len(data) > MAX_JSON_BODY_BYTES:
            self._body_overflow = True
            self._body = bytearray()
            return
        self._body += data

    def _json_body(self, body: bytes, t_ns: int) -> None:
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            self.malformed += 1
            return
        if isinstance(obj, dict):
            self._object(obj, body.strip(), t_ns, False)
        else:
            self.malformed += 1

    def _object(self, obj: dict, raw: bytes, t_ns: int, error_event: bool) -> None:
        """One chunk (or a whole non-streamed reply) as a parsed JSON object."""
        message = error_message_of(obj) if "error" in obj or obj.get("object") == "error" else None
        if message is not None or error_event:
            if self.error_message is None:
                self._set_error(raw, message if message is not None else raw.decode("utf-8", "replace")[:200])
            return
        usage = obj.get("usage")
        completion = None
        if isinstance(usage, dict):
            self.usage = usage
            completion = _int_or_none(usage.get("completion_tokens"))
        text, finish, kind, reasoning, calls = chunk_parts(obj.get("choices"))
        if finish is not None:
            self.finish_reason = finish
        if reasoning and self.generates:
            if self.first_reasoning_ns is None:
                self.first_reasoning_ns = t_ns
            self.last_reasoning_ns = t_ns
        if calls:
            self._tool_pieces(calls, t_ns)
        if text and self.generates:
            self._content(text, completion, t_ns, kind)
            if finish is None and usage is None and self._shape_learns < SHAPE_LEARNS:
                shape = shape_of(raw, text)
                if shape is not None:
                    self._shape = shape
                    self._shape_learns += 1
                    self._event_head, self._event_tail = b"data: " + shape[0], shape[1] + b"\n\n"
        if completion is not None:
            self._last_completion = completion

    def _content(self, text: str, completion: int | None, t_ns: int, kind: int = ANSWER) -> None:
        """A content chunk with ``text`` of ``kind``, arrived at ``t_ns``; ``completion``: its usage's count, if any."""
        if kind != ANSWER and self._kinds is None:
            self._kinds = [ANSWER] * len(self.times)
        if self._kinds is not None:
            self._kinds.append(kind)
        if self.answer_parts is not None and kind == ANSWER:
            self.answer_parts.append(text)
        self.times.append(t_ns)
        if self.counter is not None:
            self._weights.append(self.counter.count(text))
            self._texts.append(text)
        else:
            self._weights.append(len(text))
        self._deltas.append(completion - self._last_completion if completion is not None else None)

    def _tool_pieces(self, calls: list, t_ns: int) -> None:
        """Add the ``tool_calls`` items of one chunk (or a whole message) to the assembled calls."""
        for position, item in enumerate(calls):
            if not isinstance(item, dict):
                continue
            index = item.get("index")
            index = index if isinstance(index, int) and not isinstance(index, bool) else position
            call = self._calls.get(index)
            if call is None:
                call = self._calls[index] = ToolCall(index)
            if isinstance(item.get("id"), str) and item["id"]:
                call.id = item["id"]
            function = item.get("function")
            if isinstance(function, dict):
                if isinstance(function.get("name"), str) and function["name"]:
                    call.name = function["name"]
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    call.pieces.append(arguments)
                    call.complete_ns = t_ns
                elif isinstance(arguments, dict):  # a server that sends the arguments as an object
                    call.pieces.append(json.dumps(arguments))
                    call.complete_ns = t_ns
            if call.complete_ns is None:
                call.complete_ns = t_ns

    def kinds(self) -> tuple:
        """The record's output-kind columns after :meth:`finish` (``REQUESTS_SCHEMA`` order):
        ``(reasoning_tokens, answer_tokens, first_reasoning_ns, last_reasoning_ns,
        first_answer_ns, last_answer_ns, tool_calls, tool_call_ns)``."""
        return (self.reasoning_tokens, self.answer_tokens, self.first_reasoning_ns, self.last_reasoning_ns,
                self.first_answer_ns, self.last_answer_ns, len(self.tool_calls), self.tool_call_ns)

    @property
    def tool_call_ns(self) -> int | None:
        """When the last tool call became complete (its last piece of arguments arrived), epoch ns; None without."""
        done = [call.complete_ns for call in self._calls.values() if call.complete_ns is not None]
        return max(done) if done else None

    @property
    def first_answer_ns(self) -> int | None:
        """Arrival of the first answer chunk (``content``/``text``), epoch ns; None without."""
        if self._kinds is None:
            return self.first_token_ns
        return next((t for t, k in zip(self.times, self._kinds) if k == ANSWER), None)

    @property
    def last_answer_ns(self) -> int | None:
        """Arrival of the last answer chunk, epoch ns; None without."""
        if self._kinds is None:
            return self.last_token_ns
        return next((t for t, k in zip(reversed(self.times), reversed(self._kinds)) if k == ANSWER), None)

    def _set_error(self, raw: bytes, message: str) -> None:
        self.error_message = message
        self.error_body = raw[:ERROR_BODY_BYTES]

    # -- token counts -------------------------------------------------------------------
    def _count_tokens(self) -> None:
        usage = self.usage or {}
        self.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        if not self.generates:
            if self.prompt_tokens is None:  # rerank answers usage: {total_tokens} only
                self.prompt_tokens = _int_or_none(usage.get("total_tokens"))
            self.token_count_source = "usage" if self.prompt_tokens is not None else None
            return
        n = len(self.times)
        completion = _int_or_none(usage.get("completion_tokens"))
        exact = False  # each chunk's count is its own usage increase
        if completion is not None:
            self.token_count_source = "usage"
            self.output_tokens = completion
            deltas = self._deltas
            if n and all(d is not None and d >= 0 for d in deltas) and sum(deltas) == completion:
                self.tokens = list(deltas)
                exact = True
            else:
                self.tokens = apportion(completion, self._weights)
        elif self.counter is not None:
            self.token_count_source = "tokenizer"
            self.output_tokens = self.counter.count("".join(self._texts)) if n else 0
            self.tokens = apportion(self.output_tokens, [max(1, w) for w in self._weights])
        else:
            self.token_count_source = "chunks"
            self.output_tokens = n
            self.tokens = [1] * n
        self._texts = []
        self._count_kinds(usage, completion, exact)

    def _count_kinds(self, usage: dict, completion: int | None, exact: bool) -> None:
        """Per-kind token counts and the assembled tool calls (module docstring)."""
        self.tool_calls = [self._calls[i] for i in sorted(self._calls)]
        for call in self.tool_calls:
            call.arguments = "".join(call.pieces)
            call.pieces = []
        details = usage.get("completion_tokens_details")
        reported = _int_or_none(details.get("reasoning_tokens")) if isinstance(details, dict) else None
        output = self.output_tokens or 0
        if reported is not None and reported > output:
            reported = None  # not a part of the completion: not believed
        kinds = self._kinds
        if kinds is None:
            self.reasoning_tokens = reported or 0
            self.tool_call_tokens = 0
            self.answer_tokens = output - self.reasoning_tokens
            return
        if reported is not None and completion is not None and REASONING in kinds and not exact:
            split = {REASONING: apportion(reported, [w for w, k in zip(self._weights, kinds) if k == REASONING]),
                     ANSWER: apportion(completion - reported,
                                       [w for w, k in zip(self._weights, kinds) if k != REASONING])}
            cursors = {REASONING: iter(split[REASONING]), ANSWER: iter(split[ANSWER])}
            self.tokens = [next(cursors[REASONING if k == REASONING else ANSWER]) for k in kinds]
        sums = [0, 0, 0]
        for count, kind in zip(self.tokens, kinds):
            sums[kind] += count
        self.reasoning_tokens = reported if reported is not None else sums[REASONING]
        self.tool_call_tokens = sums[TOOL]
        self.answer_tokens = max(0, output - self.reasoning_tokens - self.tool_call_tokens)


def shape_of(raw: bytes, text: str) -> tuple[bytes, bytes] | None:
    """The bytes before and after ``text`` in the raw JSON ``raw`` of a plain content
    chunk, or None when the text is not the chunk's one ``"content"``/``"text"``
    string written verbatim (no escapes): see the module docstring."""
    found = _TEXT_KEY.search(raw)
    if found is None or _TEXT_KEY.search(raw, found.end()) is not None:
        return None
    start = found.end()
    end = raw.find(b'"', start)
    if end < 0 or _NOT_VERBATIM.search(raw, start, end) is not None:
        return None
    try:
        if raw[start:end].decode() != text:
            return None
    except UnicodeDecodeError:
        return None
    return raw[:start], raw[end:]


def _text_in_shape(raw: bytes, shape: tuple[bytes, bytes]) -> str | None:
    """The text of an event that is ``shape`` around a verbatim string, else None."""
    before, after = shape
    if len(raw) < len(before) + len(after) or not raw.startswith(before) or not raw.endswith(after):
        return None
    return _verbatim_between(raw, len(before), len(raw) - len(after))


def _verbatim_between(raw: bytes, start: int, end: int) -> str | None:
    """``raw[start:end]`` decoded, when it is a JSON string's content written verbatim (no quote,
    backslash or control byte; valid UTF-8), else None."""
    if end < start or _NOT_VERBATIM.search(raw, start, end) is not None:
        return None
    try:
        return raw[start:end].decode()
    except UnicodeDecodeError:
        return None


def error_message_of(obj: dict) -> str | None:
    """The message of an OpenAI-style error object, or None when ``obj`` is not an error."""
    error = obj.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or json.dumps(error)[:200])
    if isinstance(error, str) and error:
        return error
    if obj.get("object") == "error":
        return str(obj.get("message") or obj.get("type") or "error")
    return None


class ToolCall:
    """One tool call of a reply, assembled from its pieces (``index`` as the server numbered it;
    ``arguments`` valid after :meth:`OpenAIReply.finish`; ``complete_ns``: epoch ns of its last piece)."""

    __slots__ = ("index", "id", "name", "arguments", "pieces", "complete_ns")

    def __init__(self, index: int):
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.arguments = ""
        self.pieces: list[str] = []
        self.complete_ns: int | None = None

    @property
    def arguments_valid(self) -> bool:
        """True when the assembled arguments are one JSON object (what a tool can be called with)."""
        try:
            return isinstance(json.loads(self.arguments), dict)
        except ValueError:
            return False


def chunk_text(choices) -> tuple[str, str | None]:
    """(text of every choice, last finish_reason) of one chunk's ``choices``."""
    text, finish, _, _, _ = chunk_parts(choices)
    return text, finish


def chunk_parts(choices) -> tuple[str, str | None, int, bool, list]:
    """``(text, finish_reason, kind, has_reasoning, tool_call_items)`` of one chunk's ``choices``:
    the text of every choice (reasoning, answer and tool-call arguments, in that order), the last
    finish reason, the chunk's kind (:data:`ANSWER`, :data:`REASONING` or :data:`TOOL`: module
    docstring), whether any choice carried reasoning text, and the ``tool_calls`` items."""
    if not isinstance(choices, list) or not choices:
        return "", None, ANSWER, False, []
    if len(choices) == 1:  # the common case: one choice, a delta with content only
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and len(delta) == 1 and "text" not in choice:
            content = delta.get("content")
            reason = choice.get("finish_reason")
            if isinstance(content, str):
                return content, reason if isinstance(reason, str) and reason else None, ANSWER, False, []
    parts: list[str] = []
    calls: list = []
    finish = None
    has = [False, False, False]
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            finish = reason
        text = choice.get("text")
        if isinstance(text, str) and text:
            parts.append(text)
            has[ANSWER] = True
        for key in ("delta", "message"):
            delta = choice.get(key)
            if isinstance(delta, dict):
                _delta_text(delta, parts, has, calls)
    kind = ANSWER if has[ANSWER] else TOOL if has[TOOL] else REASONING if has[REASONING] else ANSWER
    return "".join(parts), finish, kind, has[REASONING], calls


def _delta_text(delta: dict, parts: list[str], has: list[bool], calls: list) -> None:
    for key, kind in (("reasoning_content", REASONING), ("reasoning", REASONING), ("content", ANSWER)):
        value = delta.get(key)
        if isinstance(value, str) and value:
            parts.append(value)
            has[kind] = True
    items = delta.get("tool_calls")
    if isinstance(items, list):
        calls.extend(items)
        for call in items:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, dict):
                arguments = json.dumps(arguments)
            if isinstance(arguments, str) and arguments:
                parts.append(arguments)
                has[TOOL] = True


def apportion(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (integers,
    largest remainder; the sum is exactly ``total``). When ``total`` is at least
    the number of chunks, every chunk gets at least one. O(n log n)."""
    n = len(weights)
    if n == 0:
        return []
    if total <= 0:
        return [0] * n
    if total == n:  # every chunk gets at least one: one each, whatever the weights
        return [1] * n
    w = [max(0, int(x)) for x in weights]
    weight_sum = sum(w)
    if weight_sum == 0:
        w, weight_sum = [1] * n, n
    shares = [total * x / weight_sum for x in w]
    out = [int(s) for s in shares]
    left = total - sum(out)
    for i in sorted(range(n), key=lambda i: out[i] - shares[i])[:left]:
        out[i] += 1
    if total >= n:
        for i in range(n):
            if out[i] == 0:
                donor = max(range(n), key=out.__getitem__)
                out[donor] -= 1
                out[i] = 1
    return out


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
