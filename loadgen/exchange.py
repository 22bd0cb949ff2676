"""One HTTP request/response over Locust's FastHttpSession connection pool.

Imports gevent (through geventhttpclient): use it only in the Locust process.

:class:`Exchanger` sends a :class:`~tailscope.loadgen.mix.PreparedRequest`
on the geventhttpclient client pool of a Locust ``FastHttpSession``, times it
on the run clock (sent, first response byte, last byte; epoch ns), writes one
record, and fires Locust's ``request`` event so Locust's own statistics stay
valid. The ``response_time`` given to Locust is measured from the scheduled
send time, like our records, so Locust's percentiles are free of coordinated
omission too.

Failures are recorded, never raised: ``timeout`` (no complete response within
the client timeout; ``end_ns = sent_ns + timeout``), ``refused``, ``reset``,
``http`` (status >= 400), ``other``. An HTTP error's record keeps the first 256
bytes of its body (``error_body``, decoded as UTF-8 with replacement) for
every class that is not streamed.

A class with ``stream: true`` reads its body as it arrives: every network read
is timed and framed into chunks (:mod:`.streams`: SSE events, JSON lines or
reads); ``first_byte_ns`` is then the first chunk (time to first token), the
record carries the chunk count and the largest gap, and the chunk times go to
the recorder's chunk sink (``chunks.arrow``).

A class with ``api:`` (OpenAI-compatible, :class:`~.spec.LLMSpec`) reads its
body with :class:`~.openai_stream.OpenAIReply` whether streamed or not:
``first_byte_ns`` is the first *content* chunk (TTFT), the record carries the
prompt and output token counts and their source, the finish reason, the last
token's time and the server's error JSON (first 256 bytes), and each content
chunk goes to ``chunks.arrow`` with its token count. An error object in a
success response is recorded as ``other`` (``server error: ...``). A
multi-turn session's turn (``PreparedRequest.llm.session``) also keeps the
reply's answer text, returned by :meth:`Exchanger.exchange` for the session's
history, and its record carries the session id, turn and planned turns.

The bytes of a request (head and body) are built by :meth:`Exchanger.encode`
before its scheduled time (geventhttpclient's own request builder, so headers
are exactly what ``client.request`` would send), and the send at the deadline
is one ``send`` on a pooled keep-alive connection (:func:`send_all`: no
``SO_SNDBUF`` query per call, as gevent's ``sendall`` makes). A pooled
connection is checked with one non-blocking ``MSG_PEEK`` read before reuse
(:func:`pooled_socket`; geventhttpclient's own check costs a gevent
``select`` per request); one the server has closed meanwhile is replaced, and
an idempotent request whose connection turns out closed is retried, as
geventhttpclient does.
"""

from __future__ import annotations

import errno
import socket as _stdlib_socket

import gevent
import gevent.queue
import gevent.socket
import gevent.ssl
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse
from geventhttpclient.url import URL

from tailscope.loadgen import arrival_stamps
from tailscope.loadgen.clock import RunClock
from tailscope.loadgen.mix import PreparedRequest
from tailscope.loadgen.openai_stream import ERROR_BODY_BYTES, OpenAIReply
from tailscope.loadgen.recorder import Recorder
from tailscope.loadgen.stream_reader import StreamReader
from tailscope.loadgen.streams import ChunkTimer
from tailscope.rundir.request_record import KIND_FIELDS, RequestRecord, http_record, latency_ns

_REFUSED_ERRNOS = frozenset({errno.ECONNREFUSED})
#: Send errors after which the server may still have answered (it rejected the
#: request early and closed), so the response is read before giving up.
_BROKEN_SEND_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE})
#: RFC 9110 section 9.2.2: only idempotent requests are retried automatically
#: on a fresh connection when a pooled keep-alive connection turns out closed.
_CLIENT_HANDLED_HEADERS = frozenset({"expect", "transfer-encoding"})
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_PEEK_NOW = _stdlib_socket.MSG_PEEK | _stdlib_socket.MSG_DONTWAIT
#: geventhttpclient ConnectionPool internals :func:`pooled_socket` needs (else it uses ``get_socket``).
_POOL_INTERNALS = ("_semaphore", "_socket_queue", "_closed", "_create_socket", "_is_socket_alive")


def idle_socket_alive(sock) -> bool | None:
    """Whether an idle pooled keep-alive connection is still usable: one non-blocking
    ``MSG_PEEK`` read that finds nothing to read. EOF (the server closed it), bytes
    nobody asked for, or an error mean it is not. None when the socket cannot be
    peeked at (TLS sockets refuse recv flags): ask the pool's own check then."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.recv(1, _PEEK_NOW)
    except BlockingIOError:
        return True
    except ValueError:
        return None
    except OSError:
        return False
    return False


def pooled_socket(pool):
    """A connection from a geventhttpclient ``ConnectionPool``: ``pool.get_socket()``
    with :func:`idle_socket_alive` as the liveness check. Blocks until the pool has a
    free slot; the caller returns the socket with ``pool.return_socket`` (the
    response does) or ``pool.release_socket``. Falls back to ``get_socket`` when
    the pool lacks the internals this relies on."""
    if not all(hasattr(pool, name) for name in _POOL_INTERNALS):
        return pool.get_socket()
    pool._semaphore.acquire()
    if pool._closed:
        pool._semaphore.release()
        raise RuntimeError("connection pool closed")
    queue = pool._socket_queue
    while not queue.empty():
        try:
            sock = queue.get(block=False)
        except gevent.queue.Empty:
            break
        alive = idle_socket_alive(sock)
        if alive or (alive is None and pool._is_socket_alive(sock)):
            return sock
        try:
            sock.close()
        except OSError:
            pass
    try:
        return pool._create_socket()
    except BaseException:
        pool._semaphore.release()
        raise


def send_all(sock, data: bytes) -> None:
    """Send every byte of ``data`` on a gevent socket (usually one ``send``)."""
    sent = sock.send(data)
    if sent < len(data):
        view = memoryview(data)
        while sent < len(data):
            sent += sock.send(view[sent:])


class RequestFailed(Exception):
    """A failed request as reported to Locust's statistics (grouped by message)."""


def classify_error(exc: BaseException) -> str:
    """The record's ``error_kind`` for an exception raised while exchanging."""
    if isinstance(exc, (gevent.Timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) in _REFUSED_ERRNOS:
        return "refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError,
                        HTTPConnectionClosed)):
        return "reset"
    if getattr(exc, "errno", None) in _RESET_ERRNOS:
        return "reset"
    if isinstance(exc, HTTPParseError) and "connection closed" in str(exc):
        return "reset"
    return "other"


def describe_error(exc: BaseException) -> str:
    """A short message for the record: exception type and text."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Exchanger:
    """Sends prepared requests to one base URL and records each exchange.

    ``client_pool`` is the geventhttpclient ``HTTPClientPool`` of a Locust
    ``FastHttpSession`` (``user.client.client.clientpool``); its concurrency
    must be at least the number of requests in flight, or requests would
    queue for a connection after their ``sent_ns``.
    """

    def __init__(self, client_pool, base_url: str, clock: RunClock, timeout_s: float,
                 recorder: Recorder, request_event, stream_reader: StreamReader | None = None):
        url = URL(base_url)
        self._client = client_pool.get_client(url)
        self._prefix = url.path.rstrip("/")
        self._base_url = base_url.rstrip("/")
        self._clock = clock
        self._timeout_s = timeout_s
        self._timeout_ns = int(timeout_s * 1e9)
        self._recorder = recorder
        self._request_event = request_event
        self._stream_reader = stream_reader  # None: each streamed body is read in its request's greenlet

    def encode(self, request: PreparedRequest) -> bytes | None:
        """The request on the wire: head (default headers, Host, Content-Length,
        the class's and the trace headers) and body. Cheap to send, costly to
        build (tens of µs): build it before the request's scheduled time.
        None when the class's headers ask for ``Expect`` or ``Transfer-Encoding``
        handling: such requests go through geventhttpclient's ``request``."""
        cls = request.cls
        if any(name.lower() in _CLIENT_HANDLED_HEADERS for name in request.headers):
            return None
        head = self._client._build_request(cls.method.upper(), self._prefix + cls.path, body=request.body,
                                           headers=request.headers, chunked=False)
        return head.encode("latin-1") + request.body

    def exchange(self, request: PreparedRequest, scheduled_ns: int | None) -> str | None:
        """Send ``request`` now and record it. ``scheduled_ns`` (epoch ns) is the
        intended send time; None means "now" (closed loop: scheduled = sent).
        Returns the answer text of a session's turn (``request.llm.session``) that
        ended without error, for the session's history; None otherwise."""
        clock = self._clock
        cls = request.cls
        sent_ns = clock.now_ns()
        if scheduled_ns is None:
            scheduled_ns = sent_ns
        self._recorder.sent(scheduled_ns, sent_ns)  # the live late share counts it now, not when it ends
        first_byte_ns = None
        status = 0
        bytes_in = 0
        chunks: ChunkTimer | None = None
        reply: OpenAIReply | None = None
        failure: BaseException | None = None
        error_body: bytes | None = None  # plain classes: the first bytes of an HTTP error's body
        timer = gevent.Timeout(self._timeout_s)
        timer.start()
        try:
            wire = request.wire if request.wire is not None else self.encode(request)
            if wire is not None:
                response = self._send(wire, cls.method.upper())
            else:
                response = self._client.request(cls.method, self._prefix + cls.path,
                                                body=request.body, headers=request.headers)
            first_byte_ns = clock.now_ns()
            status = response.status_code
            if request.llm is not None:
                reply = OpenAIReply(response.get("content-type"), request.llm.counter, cls.llm.generates)
                if request.llm.session is not None:
                    reply.answer_parts = []  # the session's next turn sends this answer back
                read_stream(response, reply, clock, self._stream_reader)
                bytes_in = reply.bytes
                if reply.times:
                    first_byte_ns = reply.times[0]
            elif cls.stream:
                chunks = ChunkTimer(response.get("content-type"))
                read_stream(response, chunks, clock, self._stream_reader)
                bytes_in = chunks.bytes
                first_byte_ns = chunks.times[0] if chunks.times else first_byte_ns
            else:
                body = response.read()
                bytes_in = len(body)
                error_body = body[:ERROR_BODY_BYTES] if status >= 400 else None
            end_ns = clock.now_ns()
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            failure, end_ns = exc, sent_ns + self._timeout_ns
        except gevent.GreenletExit as exc:
            failure, end_ns = exc, clock.now_ns()
        except Exception as exc:  # noqa: BLE001  (every transport failure is recorded)
            failure, end_ns = exc, clock.now_ns()
        finally:
            timer.close()
        error_kind, error = self._outcome(failure, status)
        if request.llm is not None:
            if reply is not None:
                reply.finish(end_ns)  # idempotent; counts a reply cut short as far as it came
                if reply.error_message is not None and error_kind is None:
                    error_kind, error = "other", _server_error(reply.error_message)
            bytes_in = self._record_llm(request, reply, scheduled_ns, sent_ns, end_ns, first_byte_ns, status,
                                        error_kind, error)
        elif chunks is not None:
            self._recorder.record(http_record(
                scheduled_ns=scheduled_ns, sent_ns=sent_ns, end_ns=end_ns, first_byte_ns=first_byte_ns,
                cls=cls.name, status=status, bytes_out=len(request.body), bytes_in=chunks.bytes,
                trace_id=request.trace_id, error_kind=error_kind, error=error, chunks=len(chunks.times),
                max_gap_ns=chunks.max_gap_ns, worker=self._recorder.worker))
            self._recorder.record_chunks(request.trace_id, chunks.times)
        else:
            self._recorder.record(http_record(
                scheduled_ns=scheduled_ns, sent_ns=sent_ns, end_ns=end_ns, first_byte_ns=first_byte_ns,
                cls=cls.name, status=status, bytes_out=len(request.body), bytes_in=bytes_in,
                trace_id=request.trace_id, error_kind=error_kind, error=error, worker=self._recorder.worker,
                error_body=None if error_body is None else error_body.decode("utf-8", "replace")))
        self._request_event.fire(
            request_type=cls.method,
            name=cls.name,
            response_time=latency_ns(scheduled_ns, end_ns) / 1e6,
            response_length=bytes_in,
            exception=RequestFailed(error) if error_kind is not None else None,
            context={"trace_id": request.trace_id},
            start_time=sent_ns / 1e9,
            url=self._base_url + cls.path,
            response=None,
        )
        if isinstance(failure, gevent.GreenletExit):
            raise failure
        if error_kind is None and reply is not None and reply.answer_parts is not None:
            return "".join(reply.answer_parts)
        return None

    def _record_llm(self, request: PreparedRequest, reply: OpenAIReply | None, scheduled_ns: int, sent_ns: int,
                    end_ns: int, first_byte_ns: int | None, status: int, error_kind: str | None,
                    error: str | None) -> int:
        """Record an OpenAI-API exchange (its row, and its content chunks when streamed)
        from a finished ``reply`` (None: no response head arrived); returns the body bytes read."""
        cls, info = request.cls, request.llm
        llm: dict = {"prompt_tokens": info.prompt_tokens}  # the record's token fields
        chunk_count, max_gap_ns, bytes_in = 0, None, 0
        if reply is not None:
            bytes_in = reply.bytes
            source = reply.token_count_source
            if source is None and not cls.llm.generates:
                source = "tokenizer" if info.counter.exact else "words"
            llm.update(
                prompt_tokens=reply.prompt_tokens if reply.prompt_tokens is not None else info.prompt_tokens,
                output_tokens=reply.output_tokens, token_count_source=source, finish_reason=reply.finish_reason,
                last_token_ns=reply.last_token_ns, error_body=reply.error_text(status))
            if cls.llm.generates:
                llm.update(zip(KIND_FIELDS, reply.kinds()))
            if cls.stream:
                chunk_count, max_gap_ns = len(reply.times), reply.max_gap_ns
        if info.session is not None:
            llm.update(session_id=info.session.session_id, turn=info.session.turn,
                       session_turns=info.session.turns)
        if info.images is not None:
            llm["images"], llm["image_pixels"] = info.images
        if info.ranking is not None:
            llm["documents"], llm["document_tokens"] = info.ranking
        self._recorder.record(RequestRecord(
            scheduled_ns=scheduled_ns, sent_ns=sent_ns, end_ns=end_ns, first_byte_ns=first_byte_ns, cls=cls.name,
            status=status, bytes_out=len(request.body), bytes_in=bytes_in, trace_id=request.trace_id,
            error_kind=error_kind, error=error, chunks=chunk_count, max_gap_ns=max_gap_ns,
            worker=self._recorder.worker, **llm))
        if reply is not None and cls.stream:
            self._recorder.record_chunks(request.trace_id, reply.times, reply.tokens)
        return bytes_in

    def _send(self, wire: bytes, method: str) -> HTTPSocketPoolResponse:
        """Send ``wire`` on a pooled connection and return the response once its
        head has arrived (the body is read by the caller)."""
        client = self._client
        pool = client._connection_pool
        retries_left = pool.size + 1 if method in _IDEMPOTENT_METHODS else 0
        while True:
            sock = pooled_socket(pool)
            try:
                send_all(sock, wire)
            except gevent.socket.error as exc:
                if exc.errno not in _BROKEN_SEND_ERRNOS:
                    pool.release_socket(sock)
                    raise
                try:  # the server may have answered before closing: read that answer
                    return HTTPSocketPoolResponse(sock, pool, block_size=client.block_size, method=method,
                                                  headers_type=client.headers_type)
                except (gevent.socket.error, HTTPParseError):
                    if retries_left <= 0:
                        raise
                    retries_left -= 1
                    continue
            try:
                return HTTPSocketPoolResponse(sock, pool, block_size=client.block_size, method=method,
                                              headers_type=client.headers_type)
            except HTTPConnectionClosed:  # a stale keep-alive connection; the response released it
                if retries_left <= 0:
                    raise
                retries_left -= 1

    def _outcome(self, failure: BaseException | None, status: int) -> tuple[str | None, str | None]:
        """``(error_kind, error message)`` of an exchange; ``(None, None)`` on success."""
        if isinstance(failure, gevent.GreenletExit):
            return "other", "abandoned: the run ended before the response"
        if isinstance(failure, gevent.Timeout):
            return "timeout", f"no complete response within {self._timeout_s:g} s"
        if failure is not None:
            return classify_error(failure), describe_error(failure)
        if status >= 400:
            return "http", f"HTTP {status}"
        return None, None


def _server_error(message: str) -> str:
    """The record's ``error`` for an error object the server sent with a success status."""
    return f"server error: {message[:200]}"


class ArrivedWithHead:
    """A body consumer's front for the body bytes that arrived in the response head's read.

    Those bytes are stamped in user space once the head has been parsed (``head_ns``), which is
    late by however long the requesting greenlet waited for the loop after the read; the reads
    after them carry the kernel's receive stamps. TCP delivers in order, so the head's bytes
    arrived no later than the next read: they are fed just before it, stamped
    ``min(head_ns, that read's stamp)``, and a stream's chunk times never run backwards (a tool
    call complete before its first byte, as a loaded host once recorded). With no later read,
    :meth:`finish` feeds them at ``head_ns``. Only ``feed`` and ``finish`` are forwarded: the
    readers use nothing else."""

    __slots__ = ("consumer", "_head", "_head_ns")

    def __init__(self, consumer: ChunkTimer | OpenAIReply, head: bytes, head_ns: int) -> None:
        self.consumer = consumer
        self._head: bytes | None = head
        self._head_ns = head_ns

    def feed(self, data: bytes, t_ns: int) -> None:
        """Body bytes of one read received at ``t_ns`` (epoch ns), after the head's."""
        if self._head is not None:
            self.consumer.feed(self._head, min(self._head_ns, t_ns))
            self._head = None
        self.consumer.feed(data, t_ns)

    def finish(self, t_ns: int) -> None:
        """The body ended at ``t_ns``: the head's bytes first if no read followed them."""
        if self._head is not None:
            self.consumer.feed(self._head, self._head_ns)
            self._head = None
        self.consumer.finish(t_ns)


def read_stream(response, chunks: ChunkTimer | OpenAIReply, clock: RunClock, reader: StreamReader | None = None) -> None:
    """Read a response body read by read until it is complete, timing each read.

    Uses the geventhttpclient response's parser directly (``feed``, its body
    buffer and socket): its public ``read(n)`` waits for ``n`` bytes and would
    merge tokens that arrive apart. Raises ``HTTPConnectionClosed`` when the
    connection ends before the body does (recorded as ``reset``).

    Two costs per chunk are avoided (a stream is mostly waiting for its next
    chunk): the socket's own timeout is cleared first (the exchange's timer
    bounds the whole request, and a socket timeout costs gevent a timer
    started and stopped around every read that waits), and after a read that
    drained the socket (fewer bytes than a block) the loop waits for the socket
    to be readable before the next ``recv``, instead of a ``recv`` that fails
    with ``EWOULDBLOCK`` (a system call and a Python exception) and then waits.

    Each read is timed with the kernel's receive stamp where the socket gives
    one (:mod:`.arrival_stamps`: ``recvmsg`` with ``SO_TIMESTAMPNS``; not for
    TLS), so the time a ready read waited for the busy event loop is not
    recorded as the server's; else with the clock after the read.
    """
    buffer = response._body_buffer
    if buffer:  # body bytes that came in the head's read, stamped now, after it
        if response.message_complete:
            chunks.feed(bytes(buffer), clock.now_ns())
        else:
            chunks = ArrivedWithHead(chunks, bytes(buffer), clock.now_ns())
        del buffer[:]
    if not response.message_complete and reader is not None and not isinstance(response._sock, gevent.ssl.SSLSocket):
        reader.read(response, chunks)
        chunks.finish(clock.now_ns())
        return
    sock = response._sock
    if sock is not None and sock.timeout is not None:
        sock.settimeout(None)
    wait, readable = getattr(sock, "_wait", None), getattr(sock, "_read_event", None)  # gevent's own wait
    stamped = sock is not None and arrival_stamps.enable(sock)
    block_size = response.block_size
    drained = True
    while not response.message_complete:
        sock = response._sock
        if sock is None:
            raise HTTPConnectionClosed("connection closed before the end of the stream")
        if drained and readable is not None:
            wait(readable)
        if stamped:
            data, ancillary, _flags, _address = sock.recvmsg(block_size, arrival_stamps.STAMP_SPACE)
        else:
            data = sock.recv(block_size)
        if not data:
            response.release()
            raise HTTPConnectionClosed("connection closed before the end of the stream")
        drained = len(data) < block_size
        response.feed(data)
        if buffer:
            t_ns = arrival_stamps.arrival_ns(ancillary, arrival_stamps.wall_offset_ns(clock)) if stamped else None
            chunks.feed(bytes(buffer), clock.now_ns() if t_ns is None else t_ns)
            del buffer[:]
    chunks.finish(clock.now_ns())
