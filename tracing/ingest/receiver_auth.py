"""Who may write into a run: the receiver's bearer token and its TLS files.

A receiver bound to loopback takes OTLP from processes on this host only; one
bound to any other address (``0.0.0.0``, a LAN address) would take spans and
signals from any host that can reach it, and they would become evidence in the
diagnosis. So a non-loopback receiver needs a token (:func:`require_token`),
and with a token every request, on both transports and ``GET /v1/time`` alike,
must carry ``Authorization: Bearer <token>`` (gRPC: the ``authorization``
metadata key). Requests without it get HTTP 401 / gRPC ``UNAUTHENTICATED`` and
are counted as ``rejected.unauthenticated`` in ``receiver.json``.

The comparison is constant-time: both sides are hashed (SHA-256) and the
digests compared with :func:`hmac.compare_digest`, so neither the content nor
the length of the token leaks through the answer's timing.

Tokens are 16 or more characters of RFC 3986's unreserved set
(``A-Z a-z 0-9 - . _ ~``), e.g. ``secrets.token_urlsafe(32)``: such a token
needs no escaping in a header, in a URL, or in ``OTEL_EXPORTER_OTLP_HEADERS``,
whose values are percent-encoded (W3C Baggage format), which is why the space
after ``Bearer`` is written ``%20`` there
(:func:`tailscope.support.receiver_token.otlp_headers_env`). The token travels to the receiver process in the environment variable
:data:`TOKEN_ENV`, never on a command line, in a log or in the manifest.

TLS is optional and independent of the token: a certificate chain and its
private key (PEM files) serve HTTPS and gRPC over TLS on the same ports.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass, field

from tailscope.support.receiver_token import TOKEN_ENV

__all__ = ["TOKEN_ENV", "BearerCheck", "ReceiverAccessError", "TlsFiles", "check_token", "is_loopback_host",
           "require_token", "tls_files"]

MIN_TOKEN_CHARS = 16
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")
SCHEME = "bearer"
#: gRPC metadata key (gRPC keys are lower case).
GRPC_METADATA_KEY = "authorization"
#: Value of the ``WWW-Authenticate`` header of a 401 (RFC 6750).
CHALLENGE = 'Bearer realm="tailscope"'


class ReceiverAccessError(ValueError):
    """A receiver configuration that would let strangers in, or that cannot be used
    (a missing token on a non-loopback address, a malformed token, unusable TLS files)."""


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` accepts connections from this host only.

    ``localhost`` and loopback literals (127.0.0.0/8, ::1) are; the wildcard
    (``0.0.0.0``, ``::``, ``""``) and other addresses are not; a name counts as
    loopback only when every address it resolves to is loopback."""
    if host in ("", "0.0.0.0", "::"):
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def check_token(token: str) -> str:
    """``token`` when it is usable; raises :class:`ReceiverAccessError` saying what is wrong
    (never quoting the token)."""
    if len(token) < MIN_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(token):
        raise ReceiverAccessError(
            f"the receiver token must be at least {MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 - . _ ~ "
            f"(got {len(token)} characters); e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return token


def require_token(host: str, token: str | None) -> None:
    """Raise :class:`ReceiverAccessError` when a receiver on ``host`` would have no token
    although ``host`` is not loopback (one line, for the CLI to print)."""
    if token is None and not is_loopback_host(host):
        raise ReceiverAccessError(
            f"the OTLP receiver would listen on {host}, which other hosts can reach: pass "
            f"--receiver-token (or set {TOKEN_ENV}) so that only your target and agents can write into "
            "the run, or bind 127.0.0.1")


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


@dataclass(frozen=True)
class BearerCheck:
    """Checks ``Authorization`` values against the token (None: no token, everything passes)."""

    token: str | None = field(default=None, repr=False)

    @property
    def required(self) -> bool:
        return self.token is not None

    def allows(self, authorization: str | None) -> bool:
        """Whether a request whose ``Authorization`` value is ``authorization`` (None: absent) may
        write: ``Bearer``, one or more spaces, the token (RFC 6750), with optional blanks (space,
        tab) around the whole. The scheme is ASCII case-insensitive (RFC 7235); the token must
        match exactly."""
        if self.token is None:
            return True
        scheme, space, given = (authorization or "").strip(" \t").partition(" ")
        bearer = space and scheme.isascii() and scheme.lower() == SCHEME
        presented = given.lstrip(" ").encode("utf-8", "surrogateescape") if bearer else b""
        match = hmac.compare_digest(_digest(presented), _digest(self.token.encode()))
        return match and bool(presented)


@dataclass(frozen=True)
class TlsFiles:
    """A PEM certificate chain and its private key, served on both transports."""

    cert_file: str
    key_file: str

    def server_context(self) -> ssl.SSLContext:
        """An SSL context for the HTTPS side (TLS 1.2+). Raises :class:`ReceiverAccessError`
        when the files cannot be read or do not belong together."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ReceiverAccessError(f"cannot use the receiver's TLS certificate {self.cert_file} and key "
                                      f"{self.key_file}: {getattr(exc, 'strerror', None) or exc}") from exc
        return context

    def pem_pair(self) -> tuple[bytes, bytes]:
        """(private key, certificate chain) bytes, as gRPC's server credentials take them."""
        try:
            with open(self.key_file, "rb") as key, open(self.cert_file, "rb") as cert:
                return key.read(), cert.read()
        except OSError as exc:
            raise ReceiverAccessError(f"cannot read the receiver's TLS files: {exc.strerror or exc}") from exc


def tls_files(cert_file: str | None, key_file: str | None) -> TlsFiles | None:
    """The TLS files when both are given, None when neither is; raises
    :class:`ReceiverAccessError` when only one is, or when they are not usable."""
    if cert_file is None and key_file is None:
        return None
    if cert_file is None or key_file is None:
        raise ReceiverAccessError("TLS needs both the certificate and the key file "
                                  "(--receiver-tls-cert and --receiver-tls-key)")
    files = TlsFiles(cert_file, key_file)
    files.server_context()  # fail now, with the reason, rather than in the receiver process
    return files
