"""Kernel receive times of streamed reads: when a chunk reached this host, not when Python got to it.

No Locust or gevent import. A streamed response's chunks are timed per
network read. Timing a read with the clock after ``recv`` returns adds the
time the read waited for the event loop: with thousands of streams on one
core, other streams' chunks are being parsed when this one's socket becomes
readable, and that wait (milliseconds when the core is busy) would be
recorded as if the server had sent late. Linux stamps every received packet
in the kernel; with ``SO_TIMESTAMPNS`` set on the socket, ``recvmsg``
returns that stamp (``SCM_TIMESTAMPNS``, a ``struct timespec`` of
``CLOCK_REALTIME``) beside the data.

Guarantees and limits:

- The stamp is the kernel's receive time of the *last* packet the read
  copied (TCP: ``tcp_recv_timestamp``). A read that holds one chunk — the
  usual case, as a chunk's gap is tens of ms and the reader is not that far
  behind — is timed exactly; a read that holds several chunks (the reader
  fell a whole chunk gap behind) times them all at the last one's arrival,
  which is still no later than the clock would have read.
- The stamp is mapped onto the run clock (:class:`~.clock.RunClock`, epoch
  ns that never jump) as *now on the run clock minus the stamp's age on the
  wall clock*, so a wall-clock step between runs does not move it, and it is
  never later than now.
- The first time a socket on the host asks for stamps, Linux turns receive
  stamping on with deferred work: packets received before that carry none.
- Where stamps are not available — not Linux, a TLS socket (no
  ``recvmsg``), a read that carried no stamp — the read is timed with the
  clock, as before. :func:`enable` says which.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time

from tailscope.loadgen.clock import RunClock

#: ``SO_TIMESTAMPNS`` and its control-message type (Linux ``asm-generic/socket.h``: 35 for both).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = getattr(socket, "SCM_TIMESTAMPNS", SO_TIMESTAMPNS)
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
#: Ancillary buffer size for one timestamp message.
STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


def enable(sock) -> bool:
    """Ask the kernel to stamp ``sock``'s received data; whether reads will carry stamps.

    False for TLS sockets, sockets without ``recvmsg`` and platforms without
    ``SO_TIMESTAMPNS`` (the caller then times reads with the clock). Idempotent
    and cheap (one ``setsockopt``)."""
    if not STAMP_SPACE or isinstance(sock, ssl.SSLSocket) or not hasattr(sock, "recvmsg"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except (OSError, AttributeError):
        return False
    return True


def wall_offset_ns(clock: RunClock) -> int:
    """The run clock minus the wall clock, ns, read back to back: added to a kernel stamp (wall
    clock) it gives the stamp on the run clock. Read it once per batch of reads: it moves only
    when the wall clock is stepped or slewed."""
    return clock.now_ns() - time.time_ns()


def arrival_ns(ancillary: list, offset_ns: int) -> int | None:
    """The kernel's receive stamp in ``ancillary`` (``recvmsg``'s) on the run clock (epoch ns):
    the stamp plus ``offset_ns`` (:func:`wall_offset_ns`); None when the read carried none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds * 1_000_000_000 + nanoseconds + offset_ns
    return None
