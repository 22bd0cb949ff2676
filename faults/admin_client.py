"""JSON over HTTP to the reference target's admin endpoints (loopback only, standard library)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlparse

from tailscope.faults.injector import FaultSetupError

TIMEOUT_S = 30.0


def call(base_url: str, method: str, path: str, document: dict | None = None, timeout_s: float = TIMEOUT_S) -> dict:
    """Send ``document`` (JSON) to ``base_url + path``; return the JSON reply.

    Raises FaultSetupError when the target cannot be reached or answers
    anything but 200 (e.g. 404: the admin switches are off, ``--no-admin``).
    """
    parsed = urlparse(base_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=timeout_s)
    body = json.dumps(document).encode() if document is not None else None
    try:
        connection.request(method, path, body=body, headers={"content-type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
    except OSError as exc:
        raise FaultSetupError(f"{method} {base_url}{path}: {exc}") from exc
    finally:
        connection.close()
    if response.status != 200:
        raise FaultSetupError(f"{method} {base_url}{path} answered {response.status}: "
                              f"{payload[:200].decode(errors='replace')}")
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise FaultSetupError(f"{method} {base_url}{path}: reply is not JSON") from exc
