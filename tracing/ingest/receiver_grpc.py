"""OTLP/gRPC for the receiver: ``TraceService``, ``MetricsService`` and ``LogsService`` ``Export``.

The services and methods are the official ones of ``opentelemetry-proto``
(``opentelemetry.proto.collector.{trace,metrics,logs}.v1``); their names are
read from the proto descriptors. Each call decodes the request with the same
protobuf decoders as OTLP/HTTP (:mod:`.otlp_decode`), feeds the receiver's one
ingest queue and bumps the same counters, so a span counts the same whichever
transport brought it. Status codes follow the OTLP specification:

* ``OK`` with an empty ``Export*ServiceResponse``;
* ``UNAUTHENTICATED``: the receiver has a token and the call's ``authorization``
  metadata is not ``Bearer <token>`` (counted ``unauthenticated``; checked
  before the message is read);
* ``INVALID_ARGUMENT``: the message does not decode (counted ``malformed``);
* ``RESOURCE_EXHAUSTED``: the message exceeds ``max_body_bytes``, also after
  gzip inflation. gRPC's transport enforces the limit before the message
  reaches us; the handler sees the call's request stream fail, or end
  without a message, and counts it ``oversized`` (a client that cancels in the
  middle of sending a message, or sends none, is indistinguishable from this
  and is counted the same way). The count lands a moment after the client got
  its answer;
* ``UNAVAILABLE``: the ingest queue is full; the spans are counted dropped and
  a retrying exporter (the OTel SDK's) sends them again later.

Handlers are registered as stream→unary so that a transport-level rejection
still reaches our code: a unary handler would never be called for it. On the
wire this is the same unary ``Export`` call every OTLP exporter makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tailscope.tracing.ingest.otlp_decode import MalformedPayload
from tailscope.tracing.ingest.receiver_auth import GRPC_METADATA_KEY, TlsFiles
from tailscope.tracing.ingest.routes import PROTOBUF, ROUTES, OtlpSink

DEFAULT_GRPC_PORT = 4317
#: Threads serving gRPC calls (decoding happens on them; the writer is separate).
DEFAULT_GRPC_WORKERS = 8
#: Seconds in-flight calls get to finish when the server stops.
STOP_GRACE_S = 2.0
EXPORT_METHOD = "Export"
TRANSPORT = "grpc"

#: OTLP signal → (proto module, service name, receiver route path, empty response bytes).
_SERVICES = (
    (trace_service_pb2, "TraceService", "/v1/traces", trace_service_pb2.ExportTraceServiceResponse),
    (metrics_service_pb2, "MetricsService", "/v1/metrics", metrics_service_pb2.ExportMetricsServiceResponse),
    (logs_service_pb2, "LogsService", "/v1/logs", logs_service_pb2.ExportLogsServiceResponse),
)


def service_names() -> list[str]:
    """Fully qualified names of the three OTLP collector services, from the official descriptors."""
    return [module.DESCRIPTOR.services_by_name[name].full_name for module, name, _, _ in _SERVICES]


class RefusedByTransport(Exception):
    """The call's request stream failed or ended without its message: gRPC's
    transport refused the message (above the size limit) or the client cancelled."""


def _single_message(request_iterator: Iterator[bytes]) -> bytes:
    """The one request message of a unary Export call.

    Raises :class:`RefusedByTransport` when there is none (the transport drops a
    message above ``grpc.max_receive_message_length`` and the stream then either
    fails or ends empty), MalformedPayload when there are several."""
    message = None
    try:
        for count, item in enumerate(request_iterator, 1):
            if count > 1:
                raise MalformedPayload("Export takes exactly one request message")
            message = item
    except grpc.RpcError as exc:
        raise RefusedByTransport(str(exc)) from exc
    if message is None:
        raise RefusedByTransport("the call ended without a request message")
    return message


class _ExportHandler:
    """One OTLP service's ``Export`` method, bound to the receiver."""

    def __init__(self, receiver: OtlpSink, route_path: str, response: bytes):
        self.receiver = receiver
        self.route = ROUTES[route_path]
        self.decode = self.route.decoders[PROTOBUF]
        self.response = response

    def __call__(self, request_iterator: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        receiver = self.receiver
        receiver.request_started()
        try:
            return self._export(request_iterator, context)
        finally:
            receiver.request_finished()

    def _export(self, request_iterator, context) -> bytes:
        stats = self.receiver.stats_counter
        stats.count_request(TRANSPORT)
        if not self.receiver.auth.allows(_metadata_value(context, GRPC_METADATA_KEY)):
            stats.reject("unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            body = _single_message(request_iterator)
        except RefusedByTransport:
            stats.reject("oversized")  # see the module docstring
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"message refused: larger than {self.receiver.max_body_bytes} bytes")
        except MalformedPayload as exc:
            stats.reject("malformed")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if len(body) > self.receiver.max_body_bytes:
            stats.reject("oversized")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"message of {len(body)} bytes exceeds {self.receiver.max_body_bytes}")
        try:
            decoded = self.decode(body)
        except (MalformedPayload, RecursionError) as exc:
            stats.reject("malformed")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc) or "malformed payload")
        if not self.route.accept(self.receiver, decoded):
            context.abort(grpc.StatusCode.UNAVAILABLE, "receiver closed: the run has ended" if self.receiver.closed
                          else "ingest queue full; retry later")
        return self.response


def _metadata_value(context: grpc.ServicerContext, key: str) -> str | None:
    """The first value of metadata ``key`` of the call (None when absent or binary)."""
    for item in context.invocation_metadata() or ():
        if item.key == key and isinstance(item.value, str):
            return item.value
    return None


def _generic_handlers(receiver: OtlpSink) -> list[grpc.GenericRpcHandler]:
    handlers = []
    for module, name, route_path, response_type in _SERVICES:
        full_name = module.DESCRIPTOR.services_by_name[name].full_name
        export = _ExportHandler(receiver, route_path, response_type().SerializeToString())
        # No (de)serializers: the handler receives and returns raw bytes and
        # decodes them with the receiver's own decoder.
        method = grpc.stream_unary_rpc_method_handler(export)
        handlers.append(grpc.method_handlers_generic_handler(full_name, {EXPORT_METHOD: method}))
    return handlers


class OtlpGrpcServer:
    """The OTLP/gRPC endpoint of an :class:`~.routes.OtlpSink` (the receiver).

    ``start()`` binds ``host:port`` (0 picks a free port), over TLS when
    ``tls`` is given, and returns the port; raises OSError when the address
    cannot be bound.
    ``stop()`` refuses new calls and gives in-flight ones ``STOP_GRACE_S``.
    """

    def __init__(self, receiver: OtlpSink, host: str, port: int, workers: int = DEFAULT_GRPC_WORKERS,
                 tls: TlsFiles | None = None):
        self.receiver = receiver
        self.tls = tls
        self.host = host
        self.port = port
        self.workers = workers
        self._server: grpc.Server | None = None

    def start(self) -> int:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="otlp-grpc"),
            handlers=_generic_handlers(self.receiver),
            options=[
                ("grpc.max_receive_message_length", self.receiver.max_body_bytes),
                ("grpc.so_reuseport", 0),  # a busy port must fail, not be shared
            ],
        )
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            if self.tls is None:
                bound = server.add_insecure_port(address)
            else:
                bound = server.add_secure_port(address, grpc.ssl_server_credentials([self.tls.pem_pair()]))
        except RuntimeError as exc:  # grpcio raises RuntimeError when it cannot bind
            raise OSError(f"cannot bind gRPC {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"cannot bind gRPC {address}")
        server.start()
        self._server, self.port = server, bound
        return bound

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=STOP_GRACE_S).wait(STOP_GRACE_S + 1.0)
            self._server = None
