"""JSON over HTTP to the reference target's admin endpoints (loopback only, standard library).

Every call asks not to be traced: it carries a W3C ``traceparent`` of a fresh trace with the
*sampled* flag off (``…-00``: the generator's :func:`~tailscope.loadgen.tracecontext.new_traceparent`
at sample rate 0). A target that follows its parent's sampling decision — the
OpenTelemetry SDK's default ``ParentBased(ALWAYS_ON)`` sampler, the target kit — records no span
for it, so the harness's own fault switches never show as other clients' traffic (the demo's
latency chart had drawn an "other traffic" band at its GC fault's start and end).
"""

from __future__ import annotations

import http.client
import json
import random
from urllib.parse import urlparse

from tailscope.faults.injector import FaultSetupError
from tailscope.loadgen.tracecontext import TRACEPARENT_HEADER, new_traceparent

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
        connection.request(method, path, body=body, headers={"content-type": "application/json",
                                                             TRACEPARENT_HEADER: new_traceparent(random.SystemRandom(), 0.0)[0]})
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
