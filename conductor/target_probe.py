"""Is anything listening at the target? A connect probe before the load starts.

A run against a target that refuses every connection would otherwise wait out
its whole duration recording ``refused`` errors, and read like a slow target.
Before the first request the conductor connects to the target's host and port
(TCP only: nothing is sent) until one connection succeeds, for at most
:data:`PROBE_WINDOW_S`, retrying every :data:`RETRY_INTERVAL_S` (a target that
is still starting gets that long to begin listening). When none succeeds the
run does not start: :class:`TargetUnreachable` names the URL and the last
error, and the CLI exits 2.

A target that accepted connections at the start and is lost later is not this
module's business: the run goes on, and the analysis reports the outage.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

#: Seconds the target has to accept one connection before the run is refused.
PROBE_WINDOW_S = 3.0
#: Seconds between connection attempts.
RETRY_INTERVAL_S = 0.2
#: Seconds one connection attempt may take.
CONNECT_TIMEOUT_S = 1.0


class TargetUnreachable(Exception):
    """No connection to the target succeeded within the probe window (one line, naming the URL)."""


def target_address(url: str) -> tuple[str, int]:
    """(host, port) of a base URL; the port defaults to 443 for https, 80 otherwise."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise TargetUnreachable(f"target {url} has no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def wait_until_accepting(url: str, window_s: float = PROBE_WINDOW_S) -> float:
    """Return the seconds it took until the target at ``url`` accepted a TCP connection.

    Raises :class:`TargetUnreachable` when every attempt within ``window_s`` failed
    (connection refused, unreachable, timed out, name not resolved)."""
    host, port = target_address(url)
    started = time.monotonic()
    deadline = started + window_s
    attempts = 0
    while True:
        attempts += 1
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return time.monotonic() - started
        except OSError as exc:
            last = exc
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(RETRY_INTERVAL_S, remaining))
    reason = getattr(last, "strerror", None) or str(last) or type(last).__name__
    raise TargetUnreachable(
        f"target {url} accepts no connections: {attempts} attempts over {window_s:g} s failed ({reason}); "
        "is the service running and listening on that address?")
