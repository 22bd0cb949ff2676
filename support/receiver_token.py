"""The receiver's bearer token as its clients send it (``tailscope agent``, a target's OTel SDK).

The receiver's side (who may write, constant-time checks, TLS) is
``tailscope.tracing.ingest.receiver_auth``; docs/receiver.md has the rules.
"""

from __future__ import annotations

#: Environment variable holding the token, for the receiver process, ``tailscope run`` and ``tailscope agent``.
TOKEN_ENV = "TAILSCOPE_RECEIVER_TOKEN"


def authorization_header(token: str | None) -> dict[str, str]:
    """The header a client sends: ``{"Authorization": "Bearer <token>"}`` ({} without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def otlp_headers_env(token: str) -> str:
    """The ``OTEL_EXPORTER_OTLP_HEADERS`` value that makes an OTel SDK exporter send the token
    (W3C Baggage format: values percent-encoded, so the space after ``Bearer`` is ``%20``)."""
    return f"Authorization=Bearer%20{token}"
