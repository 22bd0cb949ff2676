"""The OTLP receiver the harness runs during a test: OTLP/HTTP and OTLP/gRPC.

Run as its own process (the conductor reads the HTTP port from the first
stdout line, ``LISTENING <port>``; the gRPC port is in ``receiver.json``,
written before that line)::

    python -m tailscope.tracing.ingest.receiver --run-dir DIR [--host 127.0.0.1] [--port 4318]
        [--grpc-port 4317 | --no-grpc] [--tls-cert FILE --tls-key FILE]

(the bearer token, required when ``--host`` is not loopback, comes from the
environment variable ``TAILSCOPE_RECEIVER_TOKEN``: :mod:`.receiver_auth`)

or in-process through :class:`OtlpReceiver`. HTTP handler threads and gRPC
worker threads (:mod:`.receiver_grpc`) decode request bodies with the
routes both share (:mod:`.routes`, :mod:`.otlp_decode`) and put the columns on one bounded queue; one writer
thread appends them to the run directory:

* spans → ``spans.arrow`` (SPANS_SCHEMA);
* ``gc.pause`` spans → ``gc_pause`` rows in ``events.receiver.arrow``;
* gauge/sum metric points → ``signals.receiver.arrow`` (series = metric name), histogram
  points as ``<name>.count`` and ``<name>.sum`` (:class:`.otlp_decode.MetricPoints`);
* counters → ``receiver.json``, rewritten atomically every second and at stop.

Streams are flushed every 0.5 s, so a ``kill -9`` loses at most that much.
HTTP semantics follow the OTLP/HTTP spec: 200 with an empty export response in
the request's encoding, 401 without the run's bearer token (when it has one), 400 malformed, 413 too large, 415 unsupported media
type, 404 unknown path, 503 + ``Retry-After`` when the ingest queue is full
(the request's spans are dropped and counted; a retrying client may deliver
them later).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import queue
import signal
import ssl
import sys
import threading
import time
import zlib

from google.rpc import status_pb2

from tailscope.rundir import Appender, PeriodicFlusher, schema, write_json_atomic
from tailscope.rundir.appender import EXIT_DISK_FULL
from tailscope.tracing.ingest.otlp_decode import MalformedPayload, MetricPoints, SpanColumns
from tailscope.tracing.ingest.receiver_auth import (
    CHALLENGE,
    TOKEN_ENV,
    BearerCheck,
    ReceiverAccessError,
    TlsFiles,
    check_token,
    require_token,
    tls_files,
)
from tailscope.tracing.ingest.receiver_grpc import DEFAULT_GRPC_PORT, OtlpGrpcServer
from tailscope.tracing.ingest.routes import JSON, PROTOBUF, ROUTES
from tailscope.tracing.ingest.span_keeper import SpanKeeper

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4318
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_QUEUE_SIZE = 1024
#: ``--grpc-port`` value that turns OTLP/gRPC off.
GRPC_OFF = -1
#: Seconds a client is asked to wait before retrying after a 503.
RETRY_AFTER_S = 1
#: Seconds an idle keep-alive connection is kept open.
IDLE_CONNECTION_TIMEOUT_S = 30
STATS_INTERVAL_S = 1.0
#: How often the accept loop checks for shutdown (bounds stop() latency).
SHUTDOWN_POLL_S = 0.05
RECEIVER_WRITER = "receiver"
#: GET path answering the receiver's clock (``{"t_ns": epoch ns}``) for remote agents.
TIME_PATH = "/v1/time"

class BodyTooLarge(Exception):
    """The (decompressed) request body exceeds the configured limit."""


class UnsupportedEncoding(Exception):
    """A Content-Encoding other than gzip or identity."""


class ReceiverStats:
    """Thread-safe counters, reported as the ``receiver.json`` dict."""

    def __init__(self, port: int, auth: str = "none", tls: bool = False):
        self._lock = threading.Lock()
        self._counts = {
            "spans_received": 0,
            "spans_stored": 0,
            "spans_dropped": 0,
            "spans_refused_after_close": 0,
            "gc_events": 0,
            "requests": 0,
            "requests_by_transport": {"http": 0, "grpc": 0},
            "rejected": {"malformed": 0, "oversized": 0, "unsupported": 0, "unauthenticated": 0},
            "metrics_points": 0,
            "logs_records": 0,
            "port": port,
            "grpc_port": None,
            "auth": auth,
            "tls": tls,
        }

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def count_request(self, transport: str) -> None:
        """One export request arrived over ``transport`` (``http`` or ``grpc``)."""
        with self._lock:
            self._counts["requests"] += 1
            self._counts["requests_by_transport"][transport] += 1

    def reject(self, reason: str) -> None:
        with self._lock:
            self._counts["rejected"][reason] += 1

    def set_port(self, port: int) -> None:
        with self._lock:
            self._counts["port"] = port

    def set_grpc_port(self, port: int | None) -> None:
        with self._lock:
            self._counts["grpc_port"] = port

    def snapshot(self) -> dict:
        with self._lock:
            return {**self._counts, "rejected": dict(self._counts["rejected"]),
                    "requests_by_transport": dict(self._counts["requests_by_transport"])}


def read_limited_gunzip(data: bytes, max_bytes: int) -> bytes:
    """Gunzip ``data``, refusing to inflate beyond ``max_bytes`` (decompression bombs)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise MalformedPayload(f"bad gzip body: {exc}") from exc
    if len(out) > max_bytes:
        raise BodyTooLarge(f"gzip body inflates beyond {max_bytes} bytes")
    if not inflater.eof:
        raise MalformedPayload("truncated gzip body")
    return out


def _error_body(content_type: str, http_status: int, message: str) -> bytes:
    """An OTLP error body: google.rpc.Status in the request's encoding."""
    if content_type == JSON:
        return json.dumps({"code": http_status, "message": message}).encode()
    return status_pb2.Status(code=http_status, message=message).SerializeToString()


class _OtlpRequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the OTel exporters reuse connections
    timeout = IDLE_CONNECTION_TIMEOUT_S
    server_version = "tailscope-otlp"

    def log_message(self, format, *args):  # noqa: A002 - base-class signature
        """Silence per-request logging (the counters are in receiver.json)."""

    def setup(self):
        """With TLS, the handshake runs here, on the connection's own thread (never in the
        accept loop, where a slow client would hold up every other one)."""
        super().setup()
        self.tls_failed = False
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (ssl.SSLError, OSError):
                self.tls_failed = True  # not TLS, a certificate the client refused, a timeout

    def handle(self):
        if not self.tls_failed:
            super().handle()

    def _authorized(self, reply_type: str) -> bool:
        """True when the request carries the run's token (or none is needed); otherwise
        answer 401, count it, and close the connection when its body was not read."""
        if self.server.receiver.auth.allows(self.headers.get("Authorization")):
            return True
        self._discard_body()
        self._reject(401, "unauthenticated", reply_type, "missing or wrong bearer token",
                     **{"WWW-Authenticate": CHALLENGE})
        return False

    def _reply(self, status: int, content_type: str, body: bytes, headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _reject(self, status: int, reason: str | None, content_type: str, message: str, **headers):
        if reason is not None:
            self.server.receiver.stats_counter.reject(reason)
        self._reply(status, content_type, _error_body(content_type, status, message), headers)

    def do_GET(self):
        if not self._authorized(JSON):
            return
        self._discard_body()
        if self.path.split("?", 1)[0] == TIME_PATH:
            # Clock echo for remote agents: they estimate their offset NTP-style
            # from (send, this stamp, receive) and keep the lowest-RTT sample.
            self._reply(200, JSON, json.dumps({"t_ns": time.time_ns()}).encode())
            return
        self._reject(405 if self.path in ROUTES else 404, None, JSON, "only POST is supported")

    def _discard_body(self) -> None:
        """Keep the connection usable after a request we do not read: close it."""
        if self.headers.get("Content-Length") not in (None, "0"):
            self.close_connection = True

    def do_POST(self):
        receiver: OtlpReceiver = self.server.receiver
        receiver.request_started()
        try:
            self._handle_post(receiver)
        finally:
            receiver.request_finished()

    def _handle_post(self, receiver: OtlpReceiver) -> None:
        receiver.stats_counter.count_request("http")
        route = ROUTES.get(self.path.split("?", 1)[0])
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        reply_type = JSON if content_type == JSON else PROTOBUF
        if not self._authorized(reply_type):
            return
        if route is None:
            self._discard_body()
            self._reject(404, None, reply_type, f"unknown path {self.path}")
            return
        if content_type not in route.decoders:
            self._discard_body()
            self._reject(415, "unsupported", reply_type, f"unsupported Content-Type {content_type!r}")
            return
        try:
            body = self._read_body(receiver.max_body_bytes)
            decoded = route.decoders[content_type](body)
        except BodyTooLarge as exc:
            self.close_connection = True
            self._reject(413, "oversized", reply_type, str(exc))
            return
        except UnsupportedEncoding as exc:
            self.close_connection = True
            self._reject(415, "unsupported", reply_type, str(exc))
            return
        except (MalformedPayload, RecursionError) as exc:
            self._reject(400, "malformed", reply_type, str(exc) or "malformed payload")
            return
        if not route.accept(receiver, decoded):
            self._reject(
                503, None, reply_type, "receiver closed: the run has ended" if receiver.closed else "ingest queue full",
                **{"Retry-After": str(RETRY_AFTER_S)}
            )
            return
        self._reply(200, reply_type, b"{}" if reply_type == JSON else b"")

    def _read_body(self, max_bytes: int) -> bytes:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self.close_connection = True
            raise MalformedPayload("Content-Length is required")
        try:
            length = int(length_header)
        except ValueError as exc:
            self.close_connection = True
            raise MalformedPayload(f"bad Content-Length {length_header!r}") from exc
        if length < 0:
            self.close_connection = True
            raise MalformedPayload(f"bad Content-Length {length}")
        if length > max_bytes:
            raise BodyTooLarge(f"body of {length} bytes exceeds {max_bytes}")
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            raise MalformedPayload("body shorter than Content-Length")
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding == "gzip":
            return read_limited_gunzip(body, max_bytes)
        if encoding != "identity":
            raise UnsupportedEncoding(f"unsupported Content-Encoding {encoding!r}")
        return body


class _OtlpHttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not block shutdown

    def __init__(self, address, receiver: OtlpReceiver, tls: ssl.SSLContext | None = None):
        self.receiver = receiver
        self.tls = tls
        super().__init__(address, _OtlpRequestHandler)

    def get_request(self):
        """Accept; with TLS, wrap the connection without its handshake (the handler thread does it)."""
        connection, address = super().get_request()
        if self.tls is not None:
            connection = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address


_STOP = object()


class OtlpReceiver:
    """OTLP receiver (HTTP, and gRPC when ``grpc_port`` is not None) writing into one run directory.

    ``start()`` binds (port 0 picks a free one) and returns the HTTP port
    (``grpc_port`` then holds the bound gRPC port); ``stop()`` stops
    accepting, drains the queue, flushes and closes the streams and writes
    ``receiver.json``. ``stats()`` returns the current counters. Both
    transports share the queue, the body limit, the counters and the access
    rules: with a ``token`` every request needs ``Authorization: Bearer
    <token>``; a ``host`` that is not loopback needs a token (else
    :class:`~.receiver_auth.ReceiverAccessError`, also for a malformed token);
    ``tls`` (:class:`~.receiver_auth.TlsFiles`) serves HTTPS and gRPC over TLS.
    """

    def __init__(
        self,
        run_dir: str,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        grpc_port: int | None = None,
        token: str | None = None,
        tls: TlsFiles | None = None,
    ):
        if max_body_bytes <= 0 or queue_size <= 0:
            raise ValueError("max_body_bytes and queue_size must be positive")
        require_token(host, token)
        self.auth = BearerCheck(check_token(token) if token is not None else None)
        self.tls = tls
        self._tls_context = tls.server_context() if tls is not None else None
        self.run_dir = run_dir
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.stats_counter = ReceiverStats(port, auth="bearer token" if token is not None else "none",
                                           tls=tls is not None)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.grpc_port = grpc_port
        self._server: _OtlpHttpServer | None = None
        self._grpc: OtlpGrpcServer | None = None
        self._threads: list[threading.Thread] = []
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._accepting = False
        self._spans: Appender | None = None
        self._events: Appender | None = None
        self._signals: Appender | None = None
        self._metric_meta: dict[str, dict] = {}  # metric name → descriptor (writer thread only)
        self._flusher: PeriodicFlusher | None = None

    # -- lifecycle

    def start(self) -> int:
        """Bind, open the streams, start serving; return the bound HTTP port.

        Raises OSError when either address cannot be bound (nothing is left open)."""
        os.makedirs(self.run_dir, exist_ok=True)
        self._server = _OtlpHttpServer((self.host, self.port), self, self._tls_context)
        self.port = self._server.server_address[1]
        self.stats_counter.set_port(self.port)
        if self.grpc_port is not None:
            self._grpc = OtlpGrpcServer(self, self.host, self.grpc_port, tls=self.tls)
            try:
                self.grpc_port = self._grpc.start()
            except OSError:
                self._server.server_close()
                self._server = self._grpc = None
                raise
            self.stats_counter.set_grpc_port(self.grpc_port)
        self._spans = Appender(os.path.join(self.run_dir, schema.SPANS), schema.SPANS_SCHEMA)
        self._events = Appender(
            os.path.join(self.run_dir, schema.writer_file(schema.EVENTS, RECEIVER_WRITER)),
            schema.EVENTS_SCHEMA,
        )
        self._signals = Appender(
            os.path.join(self.run_dir, schema.writer_file(schema.SIGNALS, RECEIVER_WRITER)),
            schema.SIGNALS_SCHEMA,
        )
        self._flusher = PeriodicFlusher([self._spans, self._events, self._signals]).start()
        self._span_keeper = SpanKeeper(self._spans, self.run_dir)
        self._write_stats()
        self._accepting = True
        self._threads = [
            threading.Thread(target=self._write_loop, name="otlp-writer", daemon=True),
            threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": SHUTDOWN_POLL_S},
                name="otlp-http",
                daemon=True,
            ),
        ]
        for thread in self._threads:
            thread.start()
        return self.port

    def stop(self, drain_timeout_s: float = 5.0) -> None:
        """Stop accepting, finish in-flight requests, drain, flush, close, write stats."""
        if self._server is None:
            return
        self._accepting = False
        if self._grpc is not None:
            self._grpc.stop()
        self._server.shutdown()
        self._server.server_close()
        deadline = time.monotonic() + drain_timeout_s
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        self._queue.put(_STOP)
        writer, http_thread = self._threads
        writer.join(timeout=max(0.1, deadline - time.monotonic()))
        http_thread.join(timeout=1.0)
        self._flusher.stop()
        self._write_stats()
        self._server = None

    def stats(self) -> dict:
        """Current counters (the ``receiver.json`` content)."""
        snapshot = self.stats_counter.snapshot()
        if self._flusher is not None and self._flusher.error is not None:
            snapshot["write_error"] = str(self._flusher.error)
        keeper = getattr(self, "_span_keeper", None)
        if keeper is not None and keeper.state is not None:
            snapshot["spans_not_retained"] = keeper.not_retained
        return snapshot

    def write_failed(self) -> OSError | None:
        """The error that stopped the span streams (e.g. disk full), or None."""
        return self._flusher.error if self._flusher is not None else None

    # -- called by handler threads

    def request_started(self) -> None:
        with self._in_flight_lock:
            self._in_flight += 1

    def request_finished(self) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1

    def enqueue(self, item, dropped_spans: int) -> bool:
        """Queue decoded columns for the writer; False when full (the spans count in
        ``spans_dropped``) or once ``stop()`` began (the run's wait for late spans is over:
        they count in ``spans_refused_after_close``, answered 503 / UNAVAILABLE)."""
        if not self._accepting:
            self.stats_counter.add("spans_refused_after_close", dropped_spans)
            return False
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            pass
        self.stats_counter.add("spans_dropped", dropped_spans)
        return False

    @property
    def closed(self) -> bool:
        """True once ``stop()`` began: exports are refused and counted, not stored."""
        return not self._accepting

    # -- writer thread

    def _write_loop(self) -> None:
        next_stats = time.monotonic() + STATS_INTERVAL_S
        while True:
            try:
                item = self._queue.get(timeout=0.25)
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if item is not None:
                self._store(item)
            self.stats_counter.add("spans_stored", self._span_keeper.tick())
            if time.monotonic() >= next_stats:
                self._write_stats()
                next_stats += STATS_INTERVAL_S

    def _store(self, item) -> None:
        if isinstance(item, SpanColumns):
            if item.span_count:
                self.stats_counter.add("spans_stored", self._span_keeper.store(item.span_dict()))
            for row in item.event_rows:
                self._events.append(*row)
            self.stats_counter.add("gc_events", len(item.event_rows))
        elif isinstance(item, MetricPoints):
            self._signals.append_columns(
                {"t_ns": item.t_ns, "series": item.series, "value": item.value}
            )
            self.stats_counter.add("metrics_points", len(item))
            self._describe_metrics(item.descriptors)

    def _describe_metrics(self, descriptors: dict) -> None:
        """Keep every metric's unit/kind/description in ``signals.receiver.json``
        (rewritten atomically when a metric is new or changes)."""
        changed = {k: v for k, v in descriptors.items() if self._metric_meta.get(k) != v}
        if changed:
            self._metric_meta.update(changed)
            write_json_atomic(os.path.join(self.run_dir, schema.SIGNALS_RECEIVER_META),
                              {"metrics": dict(sorted(self._metric_meta.items()))})

    def _write_stats(self) -> None:
        try:
            write_json_atomic(os.path.join(self.run_dir, schema.RECEIVER_STATS), self.stats())
        except OSError:
            pass  # a full disk: the flusher's error stops the receiver (see main)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tailscope.tracing.ingest.receiver",
        description="OTLP receiver (HTTP and gRPC) writing spans into a tailscope run directory.",
    )
    parser.add_argument("--run-dir", required=True, help="run directory to write into")
    parser.add_argument("--host", default=DEFAULT_HOST, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="OTLP/HTTP port; 0 picks a free port")
    parser.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT,
                        help=f"OTLP/gRPC port (default {DEFAULT_GRPC_PORT}); 0 picks a free port, "
                             f"{GRPC_OFF} turns gRPC off")
    parser.add_argument("--no-grpc", dest="grpc_port", action="store_const", const=GRPC_OFF,
                        help="serve OTLP/HTTP only")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--queue-size", type=int, default=DEFAULT_QUEUE_SIZE,
                        help="requests waiting for the writer before 503")
    parser.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain: serve HTTPS and gRPC over TLS")
    parser.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    args = parser.parse_args(argv)
    if not GRPC_OFF <= args.grpc_port <= 65535:
        parser.error(f"--grpc-port must be {GRPC_OFF} (off) or 0..65535, got {args.grpc_port}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then drain and exit 0 (2: cannot bind, or access refused:
    a non-loopback ``--host`` without a token in ``TAILSCOPE_RECEIVER_TOKEN``, unusable TLS files)."""
    args = parse_args(argv)
    grpc_port = None if args.grpc_port == GRPC_OFF else args.grpc_port
    try:
        receiver = OtlpReceiver(args.run_dir, args.host, args.port, args.max_body_bytes, args.queue_size,
                                grpc_port=grpc_port, token=os.environ.get(TOKEN_ENV) or None,
                                tls=tls_files(args.tls_cert, args.tls_key))
    except ReceiverAccessError as exc:
        print(f"receiver: {exc}", file=sys.stderr)
        return 2
    stop_requested = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())
    try:
        port = receiver.start()
    except OSError as exc:
        where = f"{args.host}:{args.port}" + (f" (gRPC {grpc_port})" if grpc_port is not None else "")
        print(f"receiver: cannot listen on {where}: {exc}", file=sys.stderr)
        return 2
    print(f"LISTENING {port}", flush=True)
    if receiver.grpc_port is not None:
        print(f"GRPC_LISTENING {receiver.grpc_port}", flush=True)
    while not stop_requested.wait(0.5):
        if receiver.write_failed() is not None:
            break
    receiver.stop()
    failure = receiver.write_failed()
    if failure is not None:
        try:
            print(f"receiver: stopped: {failure}", file=sys.stderr, flush=True)
        except OSError:
            pass  # the log is on the full disk too; the exit status says it
        return EXIT_DISK_FULL if getattr(failure, "errno", None) == 28 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
