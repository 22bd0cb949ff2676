"""A loopback OpenAI-style streaming server whose every chunk carries its send time (benchmarks only).

    python benchmarks/sse_stamp_server.py [--tokens-per-s 25] [--cpu N] [--seed 1]

asyncio with a bare protocol (no framework), loopback only. Any ``POST``
answers with a chat-completions SSE stream (``text/event-stream``, chunked
transfer, keep-alive): ``max_tokens`` content chunks (from the JSON body;
default 50) of one token each, ``1 / --tokens-per-s`` apart, the first after
a random delay in ``[0, gap)`` so that concurrent streams do not tick in
step; then a chunk with ``finish_reason``, the usage chunk and
``data: [DONE]``. Chunks look like vLLM's (``id``, ``object``, ``model``,
one choice with ``delta.content``, ``logprobs``, ``finish_reason``,
``"usage": null``): constant within a stream except for the content, whose
text is the chunk's send stamp — the epoch ns (``time.time_ns()``, 19 digits)
taken just before the chunk was written to the socket. All events have the
same length (:data:`EVENT_BYTES`, JSON padded with spaces before its last
brace), so a bare client can read exactly one event per read.

The server also keeps each request's stamps, keyed by its ``X-Request-Id``
header (what tailscope sends: the trace id), so that a client that records
arrival times by request and chunk index (``chunks.arrow``) can be joined
with the send times. ``GET /dump?path=FILE`` writes them to ``FILE`` (numpy
``.npz``: ``request_id`` str, ``index`` int32, ``stamp_ns`` int64) and
forgets them. Prints ``LISTENING <port>`` when ready; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import time
from urllib.parse import parse_qs, urlsplit

from loopback_server import serve_until_sigterm  # a sibling script: benchmarks/ is on sys.path

#: Every SSE event's length in bytes, ``data: ...\n\n`` included.
EVENT_BYTES = 240
RESPONSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
ID_WIDTH = 32
DEFAULT_TOKENS = 50


def _frame(event: bytes) -> bytes:
    """One SSE event padded to EVENT_BYTES (spaces before a JSON object's last brace), as one HTTP chunk."""
    pad = EVENT_BYTES - len(b"data: \n\n") - len(event)
    if pad < 0:
        raise ValueError(f"event longer than {EVENT_BYTES} bytes: {event!r}")
    padded = event[:-1] + b" " * pad + b"}" if event.endswith(b"}") else event + b" " * pad
    data = b"data: " + padded + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


#: Digits of an epoch-ns stamp (until the year 2286).
STAMP_DIGITS = 19


def content_frame_parts(request_id: str) -> tuple[bytes, bytes]:
    """(before, after) the stamp's digits in a content chunk of ``request_id``:
    ``before + b"%d" % stamp_ns + after`` is the chunk, framed."""
    marker = b"9" * STAMP_DIGITS
    frame = _frame(b'{"id":"chatcmpl-%s","object":"chat.completion.chunk","model":"bench","choices":'
                   b'[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}],"usage":null}'
                   % (request_id.encode(), marker))
    before, after = frame.split(marker)
    return before, after


def finish_event(request_id: str) -> bytes:
    return _frame(b'{"id":"chatcmpl-%s","object":"chat.completion.chunk","model":"bench","choices":'
                  b'[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}' % request_id.encode())


def usage_event(request_id: str, tokens: int) -> bytes:
    return _frame(b'{"id":"chatcmpl-%s","object":"chat.completion.chunk","model":"bench","choices":[],'
                  b'"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}'
                  % (request_id.encode(), tokens, tokens + 8))


DONE = _frame(b"[DONE]")
END = b"0\r\n\r\n"


class StampLog:
    """Send stamps of every content chunk, by request id."""

    def __init__(self):
        self.streams: dict[str, list[int]] = {}

    def dump(self, path: str) -> int:
        import numpy as np

        ids, index, stamps = [], [], []
        for rid, values in self.streams.items():
            ids.extend([rid] * len(values))
            index.extend(range(len(values)))
            stamps.extend(values)
        np.savez(path, request_id=np.array(ids, dtype=f"U{ID_WIDTH}"), index=np.array(index, dtype=np.int32),
                 stamp_ns=np.array(stamps, dtype=np.int64))
        self.streams = {}
        return len(stamps)


class StreamProtocol(asyncio.Protocol):
    def __init__(self, server: StampServer):
        self.server = server
        self.buffer = b""
        self.transport = None
        self.busy = False  # a response is being streamed (requests are answered in order)
        self.queue: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body = self.buffer[head_end + 4:end]
            self.buffer = self.buffer[end:]
            self.queue.append((head, body))
            if not self.busy:
                self._next()

    def connection_lost(self, exc):
        self.transport = None

    def _next(self) -> None:
        if not self.queue or self.transport is None:
            self.busy = False
            return
        self.busy = True
        head, body = self.queue.pop(0)
        request_line = head.split(b"\r\n", 1)[0].split(b" ")
        if request_line[0] == b"GET":
            self._get(request_line[1].decode())
            return
        request_id = None
        for line in head.split(b"\r\n")[1:]:
            if line[:13].lower() == b"x-request-id:":
                request_id = line[13:].strip().decode()
        if request_id is None or len(request_id) != ID_WIDTH:
            request_id = f"{self.server.rng.getrandbits(128):032x}"
        try:
            tokens = int(json.loads(body).get("max_tokens") or DEFAULT_TOKENS)
        except (ValueError, AttributeError):
            tokens = DEFAULT_TOKENS
        self.transport.write(RESPONSE_HEAD)
        stamps = self.server.log.streams.setdefault(request_id, [])
        loop = asyncio.get_running_loop()
        gap = self.server.gap_s
        first = loop.time() + self.server.rng.random() * gap
        parts = content_frame_parts(request_id)
        loop.call_at(first, self._tick, request_id, parts, stamps, tokens, first)

    def _tick(self, request_id: str, parts: tuple[bytes, bytes], stamps: list, left: int, due: float) -> None:
        transport = self.transport
        if transport is None:
            return
        stamp = time.time_ns()
        transport.write(b"%s%d%s" % (parts[0], stamp, parts[1]))
        stamps.append(stamp)
        if left > 1:
            due += self.server.gap_s
            asyncio.get_running_loop().call_at(due, self._tick, request_id, parts, stamps, left - 1, due)
            return
        transport.write(finish_event(request_id) + usage_event(request_id, len(stamps)) + DONE + END)
        self._next()

    def _get(self, target: str) -> None:
        url = urlsplit(target)
        status, text = b"404 Not Found", b"not found"
        if url.path == "/dump":
            path = parse_qs(url.query).get("path", [""])[0]
            status, text = b"200 OK", str(self.server.log.dump(path)).encode()
        self.transport.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(text), text))
        self._next()


class StampServer:
    def __init__(self, tokens_per_s: float, seed: int):
        self.gap_s = 1.0 / tokens_per_s
        self.rng = random.Random(seed)
        self.log = StampLog()


async def serve(port: int, server: StampServer) -> None:
    await serve_until_sigterm(lambda: StreamProtocol(server), port, backlog=4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens-per-s", type=float, default=25.0, help="chunks per second of each stream")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.port, StampServer(args.tokens_per_s, args.seed)))


if __name__ == "__main__":
    main()
