"""Serving the LLM reference server with uvicorn on a socket bound here (loopback by default).

:func:`run_llm_server` sets up tracing (the kit's lean engine exporting OTLP to
``otlp_traces_endpoint``, else the standard ``OTEL_EXPORTER_OTLP_*``
variables), binds and listens (port 0 picks a free port), prints ``LISTENING
<port>`` on one flushed line, and serves until SIGINT or SIGTERM. Shutdown is
graceful: in-flight requests get ``graceful_shutdown_s``, the engine stops
(unfinished requests end with a 503 error event), queued spans and GC pauses
are exported, and the function returns (the process exits 0). The socket,
signal and uvicorn helpers are the reference target's
(:mod:`tailscope.targets.reference.server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TextIO

from opentelemetry import trace

from tailscope.targets.llm.app import LlmApp
from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.reference.server import (
    ExternallySignalledServer,
    announce_port,
    bind_listening_socket,
    exit_on_signals,
    uvicorn_config,
)
from tailscope.tracing import kit


def build_app(config: LlmServerConfig, tracer_provider: trace.TracerProvider | None) -> LlmApp:
    """The ASGI app; its ``llm_request`` spans go to ``tracer_provider`` (None: no spans)."""
    return LlmApp(config, kit.get_tracer(tracer_provider) if tracer_provider is not None else None)


def run_llm_server(config: LlmServerConfig, *, announce_to: TextIO | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then shut down cleanly and return (see the module docstring).

    ``announce_to`` (default stdout) receives the ``LISTENING <port>`` line.
    Raises OSError when the address cannot be bound.
    """
    provider = kit.setup_tracing(config.service_name, config.otlp_traces_endpoint or None) if config.tracing else None
    gc_reporter = kit.GcPauseReporter(provider, config.gc_min_pause_ms) if provider is not None else None
    try:
        server = ExternallySignalledServer(uvicorn_config(build_app(config, provider), config))
        with exit_on_signals(server), contextlib.closing(bind_listening_socket(config.host, config.port)) as sock:
            if gc_reporter is not None:
                gc_reporter.start()
            announce_port(sock.getsockname()[1], announce_to or sys.stdout)
            asyncio.run(server.serve(sockets=[sock]))
    finally:
        if gc_reporter is not None:
            gc_reporter.stop()
        if provider is not None:
            provider.shutdown()
