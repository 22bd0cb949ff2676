"""Minimal ASGI request/response plumbing for the reference target (no web framework)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class HttpError(Exception):
    """Answer the request with ``status`` and a JSON ``{"error": message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case bytes) in an ASGI scope, or None."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def read_body(receive: Receive, max_bytes: int) -> bytes:
    """The whole request body; HttpError 413 past ``max_bytes``, 499 if the client disconnected."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(499, "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise HttpError(413, f"request body larger than {max_bytes} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_response(send: Send, status: int, body: bytes, content_type: str) -> None:
    """Send a complete response with ``content-type`` and ``content-length``."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode("latin-1")),
                (b"content-length", str(len(body)).encode("latin-1")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def json_bytes(document: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


async def send_json(send: Send, status: int, document: Any) -> None:
    """Send ``document`` as an ``application/json`` response."""
    await send_response(send, status, json_bytes(document), "application/json")


async def send_error(send: Send, error: HttpError) -> None:
    """Send ``{"error": message}`` with the error's status."""
    await send_json(send, error.status, {"error": error.message})
