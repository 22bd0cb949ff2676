"""Whether a URL points at this host only: load and fault traffic may go nowhere else."""

from __future__ import annotations

from urllib.parse import urlparse

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is a loopback address (127.0.0.0/8, localhost, ::1)."""
    host = (urlparse(url).hostname or "").lower()
    return host in LOOPBACK_HOSTS or host.startswith("127.")
