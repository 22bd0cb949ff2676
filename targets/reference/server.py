"""Serving the reference target with uvicorn on a socket we bind ourselves.

:func:`run_target` binds and listens (port 0 picks a free port), prints
``LISTENING <port>`` on one line and flushes it, then serves until SIGINT or
SIGTERM. Shutdown is graceful: the listener closes, in-flight requests get
``graceful_shutdown_s`` to finish, the batchers stop, pending gc pauses and
spans are flushed to the OTLP endpoint, and the function returns (it never
re-raises the signal, so the process exits with status 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

import uvicorn
from opentelemetry import trace

from tailscope.targets.reference.app import InferenceApp
from tailscope.targets.reference.config import TargetConfig
from tailscope.targets.reference.model import ReferenceModel
from tailscope.tracing import kit

_EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_BACKLOG = 2048


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` and listening (port 0: the kernel picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets
    # whose proto is TCP, and without it Nagle + delayed ACKs add ~40 ms to
    # every keep-alive response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def announce_port(port: int, stream: TextIO) -> None:
    """Write ``LISTENING <port>`` as one flushed line, for a parent process to read."""
    stream.write(f"LISTENING {port}\n")
    stream.flush()


class ExternallySignalledServer(uvicorn.Server):
    """uvicorn Server that leaves signal handling to :func:`exit_on_signals`.

    uvicorn's own handling re-raises the signal after a graceful shutdown,
    which would kill the process instead of letting :func:`run_target` return.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.contextmanager
def exit_on_signals(server: uvicorn.Server) -> Iterator[None]:
    """While active, SIGINT/SIGTERM ask ``server`` to shut down gracefully (a second SIGINT forces it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in _EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def build_asgi_app(config: TargetConfig, tracer_provider: trace.TracerProvider | None) -> Any:
    """The traced ASGI app (or the bare app when ``tracer_provider`` is None)."""
    tracer = kit.get_tracer(tracer_provider) if tracer_provider is not None else trace.NoOpTracer()
    app = InferenceApp(config, ReferenceModel(config.model_dim, config.seed), tracer)
    if tracer_provider is None:
        return app
    return kit.TraceContextMiddleware(app, tracer_provider)


def uvicorn_config(app: Any, config: TargetConfig) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        lifespan="on",
        http="httptools",
        access_log=config.access_log,
        log_level=config.log_level,
        timeout_graceful_shutdown=config.graceful_shutdown_s,
    )


def run_target(config: TargetConfig, *, announce_to: TextIO | None = None) -> None:
    """Serve the reference target until SIGINT/SIGTERM, then shut down cleanly and return.

    ``announce_to`` (default stdout) receives the ``LISTENING <port>`` line.
    Raises OSError when the address cannot be bound.
    """
    provider = kit.setup_tracing(config.service_name) if config.tracing else None
    serve_until_signalled(build_asgi_app(config, provider), config, provider,
                          announce_to=announce_to, gc_freeze=config.gc_freeze)


def serve_until_signalled(app: Any, config: Any, provider: trace.TracerProvider | None, *,
                          announce_to: TextIO | None = None, gc_freeze: bool = False) -> None:
    """Serve ``app`` with uvicorn on ``config.host``/``config.port`` until SIGINT/SIGTERM; the
    target's GC pauses are reported as spans while it serves (``config.gc_min_pause_ms``), and
    ``provider`` is flushed and shut down on the way out, also on failure. ``gc_freeze`` moves
    the start-up heap out of the collector's reach before the first request. Shared by both
    reference services (``config`` needs the fields :func:`uvicorn_config` reads). Raises
    OSError when the address cannot be bound."""
    gc_reporter = kit.GcPauseReporter(provider, config.gc_min_pause_ms) if provider is not None else None
    try:
        server = ExternallySignalledServer(uvicorn_config(app, config))
        with exit_on_signals(server), contextlib.closing(bind_listening_socket(config.host, config.port)) as sock:
            if gc_reporter is not None:
                gc_reporter.start()
            if gc_freeze:
                gc.collect()
                gc.freeze()
            announce_port(sock.getsockname()[1], announce_to or sys.stdout)
            asyncio.run(server.serve(sockets=[sock]))
    finally:
        if gc_reporter is not None:
            gc_reporter.stop()
        if provider is not None:
            provider.shutdown()
