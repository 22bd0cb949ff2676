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

from typing import TextIO

from opentelemetry import trace

from tailscope.targets.llm.app import LlmApp
from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.reference.server import serve_until_signalled
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
    serve_until_signalled(build_app(config, provider), config, provider, announce_to=announce_to)
