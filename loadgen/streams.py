"""Splitting a streamed response body into chunks (tokens) and timing each one.

No Locust or gevent import. A request class with ``stream: true`` reads its
response as it arrives; :class:`ChunkTimer` is fed every network read (bytes
and the epoch ns it arrived) and keeps the arrival time of every *chunk*,
framed by the response's Content-Type:

- ``text/event-stream`` (server-sent events, as LLM servers stream tokens):
  one chunk per event that carries data; an event ends at a blank line.
  Comments (``: keep-alive``) and the OpenAI end marker ``data: [DONE]`` are
  not chunks.
- ``application/x-ndjson``, ``application/jsonl``, ``application/json-seq``:
  one chunk per non-empty line.
- anything else (plain chunked transfer): one chunk per network read that
  delivered body bytes.

A chunk's time is the time of the read that completed it. Memory: the
times (one int per chunk) plus at most one incomplete event or line.
"""

from __future__ import annotations

SSE_TYPES = ("text/event-stream",)
LINE_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-seq", "application/x-jsonlines")
#: SSE data that ends a stream without being a token (OpenAI-compatible servers).
SSE_DONE = b"[DONE]"


def framing_of(content_type: str | None) -> str:
    """"sse", "lines" or "reads" for a Content-Type header value (None: "reads")."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in SSE_TYPES:
        return "sse"
    if media in LINE_TYPES:
        return "lines"
    return "reads"


class ChunkTimer:
    """Collects the arrival time (epoch ns) of every chunk of one streamed body."""

    def __init__(self, content_type: str | None):
        self.framing = framing_of(content_type)
        self.times: list[int] = []
        self.bytes = 0
        self._pending = b""
        self._event_has_data = False
        self._event_is_done = False

    def feed(self, data: bytes, t_ns: int) -> None:
        """Body bytes from one network read, received at ``t_ns``."""
        if not data:
            return
        self.bytes += len(data)
        if self.framing == "reads":
            self.times.append(t_ns)
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"), t_ns)

    def finish(self, t_ns: int) -> None:
        """The body ended at ``t_ns``: count a last line or event left without a terminator."""
        if self._pending:
            self._line(self._pending.rstrip(b"\r"), t_ns)
            self._pending = b""
        if self.framing == "sse":
            self._line(b"", t_ns)

    def _line(self, line: bytes, t_ns: int) -> None:
        if self.framing == "lines":
            if line.strip():
                self.times.append(t_ns)
            return
        if not line:  # blank line: the event is complete
            if self._event_has_data and not self._event_is_done:
                self.times.append(t_ns)
            self._event_has_data = self._event_is_done = False
            return
        if line.startswith(b"data"):
            value = line[4:]
            if value[:1] in (b":", b""):
                value = value[1:].lstrip(b" ")
                self._event_has_data = True
                self._event_is_done = self._event_is_done or value.strip() == SSE_DONE

    @property
    def max_gap_ns(self) -> int | None:
        """Largest gap between consecutive chunks, ns; None with fewer than two chunks."""
        times = self.times
        if len(times) < 2:
            return None
        return max(b - a for a, b in zip(times, times[1:]))
