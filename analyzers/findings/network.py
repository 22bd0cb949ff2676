"""Findings about the time a request spends outside the server's spans.

Both read the stage matrix of the joined requests: ``server`` (the server span's
duration) and ``outside_server`` (service time − server: network, the server's
HTTP layer outside its spans, the generator's reading of the reply).

- ``tcp_delayed_ack``: a large share of the requests waited about the Linux
  delayed-ACK timer (40 ms) outside the server's spans, *and* their response
  body arrived that long after its first byte, while the server's own time was
  small. That is the stall of a response written in separate sends with Nagle's
  algorithm on (no ``TCP_NODELAY``): the second send waits for the ACK of the
  first, which the client delays by its delayed-ACK timer.
- ``outside_server``: most of the service time of the joined requests lies
  outside the server's spans (time-weighted share), and enough of it (at least
  :data:`MIN_OUTSIDE_MS` at the median) to matter.
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.findings.protocol import Finding, FindingCheck, FindingInputs
from tailscope.analyzers.inputs.records import NS_PER_MS, int_column

#: Linux's minimum delayed-ACK timeout (TCP_DELACK_MIN = HZ/25), ms.
DELAYED_ACK_MS = 40.0
#: Stall window around the timer, ms: the ACK is sent a little after the timer fires
#: (timer slack, scheduling), never before it.
STALL_WINDOW_MS = (DELAYED_ACK_MS - 3.0, DELAYED_ACK_MS + 12.0)
#: Share of joined requests stalled that makes the finding, and that makes it ``high``.
MIN_STALLED_SHARE = 0.2
HIGH_STALLED_SHARE = 0.3
#: "Server time is small": its median below half the timer, ms.
MAX_SERVER_P50_MS = DELAYED_ACK_MS / 2
#: Share of the service time outside the server's spans that makes ``outside_server``.
MIN_OUTSIDE_SHARE = 0.5
#: Median time outside the server's spans below which the share is not worth a finding, ms.
MIN_OUTSIDE_MS = 1.0


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else float("nan")


def _outside_and_server(inputs: FindingInputs) -> tuple[np.ndarray, np.ndarray] | None:
    matrix = inputs.matrix
    if len(matrix.request_index) == 0:
        return None
    outside, server = matrix.column("outside_server"), matrix.column("server")
    keep = ~np.isnan(outside) & ~np.isnan(server)
    return (outside[keep], server[keep]) if keep.any() else None


def check_delayed_ack(inputs: FindingInputs) -> Finding | None:
    """``tcp_delayed_ack`` (module docstring); None without joined requests or without the stall."""
    times = _outside_and_server(inputs)
    if times is None:
        return None
    matrix = inputs.matrix
    outside, server = matrix.column("outside_server"), matrix.column("server")
    first_byte, present = int_column(inputs.run.requests, "first_byte_ns")
    rows = matrix.request_index
    gap = np.where(present[rows], (inputs.req.end_ns[rows] - first_byte[rows]) / NS_PER_MS, np.nan)
    lo, hi = STALL_WINDOW_MS
    stalled = (outside >= lo) & (outside <= hi) & (gap >= lo) & (gap <= hi)
    n, count = len(rows), int(np.count_nonzero(stalled))
    share = count / n
    server_p50 = _median(server[~np.isnan(server)])
    if share < MIN_STALLED_SHARE or not server_p50 < MAX_SERVER_P50_MS:
        return None
    outside_p50, gap_p50 = _median(outside[stalled]), _median(gap[stalled])
    summary = (
        f"{share:.0%} of the joined requests ({count:,} of {n:,}) waited about the {DELAYED_ACK_MS:.0f} ms "
        f"delayed-ACK timer outside the server's spans (median {outside_p50:.1f} ms), their response body "
        f"arriving {gap_p50:.1f} ms after its first byte, while the server's own time was {server_p50:.1f} ms "
        "(median): the server writes a response in separate sends with Nagle's algorithm on, and each later "
        "send waits for the client's delayed ACK. Set TCP_NODELAY on the server's sockets, or write the "
        "head and body in one send.")
    return Finding("tcp_delayed_ack", "high" if share >= HIGH_STALLED_SHARE else "medium", summary, {
        "stalled_share": share, "stalled_requests": count, "joined_requests": n,
        "timer_ms": DELAYED_ACK_MS, "window_ms": list(STALL_WINDOW_MS),
        "outside_p50_ms": outside_p50, "read_gap_p50_ms": gap_p50, "server_p50_ms": server_p50})


def check_outside_server(inputs: FindingInputs) -> Finding | None:
    """``outside_server`` (module docstring); None without joined requests or when the server's
    spans hold most of the time."""
    times = _outside_and_server(inputs)
    if times is None:
        return None
    outside, server = times
    service = outside + server
    total = float(service.sum())
    share = float(np.clip(outside, 0.0, None).sum()) / total if total > 0 else 0.0
    outside_p50 = _median(outside)
    if share <= MIN_OUTSIDE_SHARE or outside_p50 < MIN_OUTSIDE_MS:
        return None
    service_p50, server_p50 = _median(service), _median(server)
    summary = (
        f"{share:.0%} of the joined requests' service time was outside the server's spans (median "
        f"{outside_p50:.1f} ms of {service_p50:.1f} ms; the server's spans {server_p50:.1f} ms): the time "
        "goes to the network, the server's HTTP layer before or after its spans, or the client — not to "
        "the stages the spans show.")
    return Finding("outside_server", "high" if share >= 0.75 else "medium", summary, {
        "outside_share": share, "outside_p50_ms": outside_p50, "service_p50_ms": service_p50,
        "server_p50_ms": server_p50, "joined_requests": int(len(outside))})


TCP_DELAYED_ACK = FindingCheck("tcp_delayed_ack", check_delayed_ack)
OUTSIDE_SERVER = FindingCheck("outside_server", check_outside_server)
