"""Client→server clock alignment from the requests' server spans.

When the target runs on another host its clock differs from the generator's.
Every server span lies inside its request's ``[sent_ns, end_ns]`` on the
generator's clock (up to where each side takes its stamps: below), so the
offset θ to *add* to server times satisfies, for each request i::

    sent_i − span_start_i  <=  θ  <=  end_i − span_end_i

and the feasible offsets are the intersection of these intervals. To stay
robust to a few violators (a span joined to the wrong request, a clock step)
the bounds are order statistics instead of the extremes: the lower bound is
the ``1 − TRIM`` quantile of ``sent − span_start`` and the upper bound the
``TRIM`` quantile of ``end − span_end`` (TRIM = 1%: up to 1% of requests may
violate each side). The estimate is the midpoint; its bound the half-width —
the true offset lies within ±bound when the network delays in each direction
are at least the fastest request's. With symmetric loopback-like delays the
error is a fraction of the shortest request's network time.

Where each side takes its timestamps. Neither side stamps the wire: the
client stamps ``sent`` before its send work and ``end`` after its receive
work; the server's instrumentation starts its span after its framework has
read the request and ends it after the reply was handed to the kernel — and
on a busy host the server can be descheduled between its last write and its
end stamp, so a same-host server span can end *after* the client's ``end``
(measured with OpenTelemetry's FastAPI instrumentation under uvicorn on one
loaded 2-core host: 15% of spans, up to 8 ms; the 1%-trimmed bounds above
then cross, though the clocks are one). So containment is held only up to a
tolerance taken from the data: τ = the median client-minus-server duration
``(end − sent) − (span_end − span_start)`` — the time the median request
spends outside its server span (both sides' send and receive work, the
network, the server's framework around its span), which is where the two
sides' stamps may sit. The rule (``mode`` ``auto``): an offset is
*demonstrated*, and applied, only when the median request's span starts
before its send stamp, or ends after its end stamp, by more than τ::

    median(sent − span_start) > τ    or    median(end − span_end) < −τ

Medians, not the 1% tails, because placement errors are a tail (a
descheduled server) while a real offset moves every request. A demonstrated
offset lies outside the feasible interval too (the median is inside the
trimmed bounds), so the estimate above is what is applied. Offsets smaller
than about 2τ are not told from stamp placement and are left alone; they are
also too small to move a span across the analysis's windows. ``consistent``
is False when no offset puts 99% of the span *starts* inside their requests
even with τ on each side — a start cannot be placed outside ``[sent, end]``
(the server cannot start before the request was sent, nor after the reply
arrived), so that means drifting or stepping clocks, or wrong joins.

``mode``: ``auto`` applies the estimate only when an offset is demonstrated
(above), ``on`` always applies it, ``off`` never does. Correction shifts the analysis's
copy of the spans and of the target's ``gc_pause`` events; the stored data is
never changed. Span-event timestamps stay on the server clock (stage durations
are differences and do not depend on the offset).

Cost: O(requests) with two quantiles.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.stages import ClockAlignment as ClockAlignmentSection
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays
from tailscope.analyzers.stages.decomposition import SpanJoin, as_rules, join_spans
from tailscope.analyzers.stages.rules import StageRules
from tailscope.rundir import Run

#: Share of requests allowed to violate each side of the containment constraint.
TRIM = 0.01
#: Fewer joined requests than this: no estimate.
MIN_REQUESTS = 20
#: Event kinds written from the target's clock (shifted with the spans).
SERVER_CLOCK_EVENT_KINDS = ("gc_pause",)


@dataclass(frozen=True)
class ClockAlignment:
    """The estimated offset (ns to add to server times) and what was done with it."""

    mode: str
    requests: int
    offset_ns: int | None = None
    bound_ns: int | None = None
    lower_ns: int | None = None
    upper_ns: int | None = None
    applied: bool = False
    violating_before: float | None = None  # share of requests whose span is outside [sent, end]
    violating_after: float | None = None
    #: τ: how far a span may lie outside its request from where each side stamps (ns; module docstring).
    tolerance_ns: int | None = None
    #: Whether some offset puts 99% of the span starts inside their requests within τ (None: no estimate).
    consistent: bool | None = None

    def section(self) -> ClockAlignmentSection:
        """The ``stages.clock_alignment`` section of analysis.json (ms)."""
        def ms(value):
            return None if value is None else value / NS_PER_MS
        return ClockAlignmentSection(
            mode=self.mode, requests=self.requests, applied=self.applied,
            offset_ms=ms(self.offset_ns), bound_ms=ms(self.bound_ns),
            feasible_ms=None if self.lower_ns is None else [ms(self.lower_ns), ms(self.upper_ns)],
            tolerance_ms=ms(self.tolerance_ns),
            consistent=self.consistent,
            violating_share_before=self.violating_before, violating_share_after=self.violating_after,
        )

    def apply(self, run: Run) -> Run:
        """``run`` with server-clock times shifted by the offset when ``applied``; else ``run``."""
        if not self.applied or not self.offset_ns:
            return run
        return dataclasses.replace(run, spans=shift_columns(run.spans, self.offset_ns, None),
                                   events=shift_columns(run.events, self.offset_ns, SERVER_CLOCK_EVENT_KINDS))


def shift_columns(table: pa.Table, offset_ns: int, kinds: tuple[str, ...] | None) -> pa.Table:
    """``table`` with ``start_ns``/``end_ns`` + ``offset_ns`` (only rows of ``kinds`` when given)."""
    if len(table) == 0:
        return table
    mask = None if kinds is None else pc.is_in(table.column("kind"), value_set=pa.array(kinds, pa.string()))
    for name in ("start_ns", "end_ns"):
        column = table.column(name)
        shifted = pc.add(column, pa.scalar(offset_ns, pa.int64()))
        if mask is not None:
            shifted = pc.if_else(mask, shifted, column)
        table = table.set_column(table.schema.get_field_index(name), name, shifted)
    return table


def feasible_interval(sent_ns: np.ndarray, end_ns: np.ndarray, span_start_ns: np.ndarray,
                      span_end_ns: np.ndarray, trim: float = TRIM) -> tuple[int, int]:
    """(lower, upper) robust bounds of the offset θ (ns); see the module docstring."""
    low_side = sent_ns - span_start_ns
    high_side = end_ns - span_end_ns
    lower = np.quantile(low_side, 1.0 - trim, method="inverted_cdf")
    upper = np.quantile(high_side, trim, method="inverted_cdf")
    return int(lower), int(upper)


def placement_tolerance(sent_ns: np.ndarray, end_ns: np.ndarray, span_start_ns: np.ndarray,
                        span_end_ns: np.ndarray) -> int:
    """τ (ns, >= 0): the median client-minus-server duration (module docstring)."""
    outside = (end_ns - sent_ns) - (span_end_ns - span_start_ns)
    return max(0, int(np.median(outside)))


def offset_demonstrated(sent_ns, end_ns, span_start_ns, span_end_ns, tolerance_ns: int) -> bool:
    """Whether the median request's span starts before its send, or ends after its end,
    by more than ``tolerance_ns``: the clocks differ (module docstring)."""
    return bool(np.median(sent_ns - span_start_ns) > tolerance_ns
                or np.median(end_ns - span_end_ns) < -tolerance_ns)


def starts_fit(sent_ns, end_ns, span_start_ns, tolerance_ns: int, trim: float = TRIM) -> bool:
    """Whether one offset puts all but ``trim`` of the span starts (each side) inside their
    requests' ``[sent − τ, end + τ]``."""
    lower = np.quantile(sent_ns - span_start_ns, 1.0 - trim, method="inverted_cdf")
    upper = np.quantile(end_ns - span_start_ns, trim, method="inverted_cdf")
    return bool(lower - tolerance_ns <= upper + tolerance_ns)


def violating_share(sent_ns, end_ns, span_start_ns, span_end_ns, offset_ns: int) -> float:
    """Share of requests whose span, shifted by ``offset_ns``, is not inside [sent, end]."""
    outside = (span_start_ns + offset_ns < sent_ns) | (span_end_ns + offset_ns > end_ns)
    return float(outside.mean()) if len(outside) else 0.0


def align_clocks(req: RequestArrays, spans: pa.Table, rules: StageRules | None = None,
                 mode: str | None = None, join: SpanJoin | None = None) -> ClockAlignment:
    """Estimate the client→server clock offset from each joined request's server span.

    ``mode`` defaults to the rules' ``clock`` (``auto``). Needs MIN_REQUESTS joined
    requests; with fewer, nothing is estimated or applied. ``join``: the
    :func:`~.stages.join_spans` of exactly these spans under the same rules, to skip the join."""
    rules = as_rules(rules)
    mode = mode or rules.clock
    join = join if join is not None else join_spans(req, spans, rules)
    if join.servers is None:
        return ClockAlignment(mode=mode, requests=0)
    servers = join.servers
    requests = join.ok_index[servers.position]
    n = len(requests)
    if n < MIN_REQUESTS:
        return ClockAlignment(mode=mode, requests=n)
    sent, end = req.sent_ns[requests], req.end_ns[requests]
    lower, upper = feasible_interval(sent, end, servers.start_ns, servers.end_ns)
    offset = (lower + upper) // 2
    bound = abs(upper - lower) // 2
    tolerance = placement_tolerance(sent, end, servers.start_ns, servers.end_ns)
    applied = mode == "on" or (mode == "auto" and offset_demonstrated(sent, end, servers.start_ns,
                                                                      servers.end_ns, tolerance))
    before = violating_share(sent, end, servers.start_ns, servers.end_ns, 0)
    after = violating_share(sent, end, servers.start_ns, servers.end_ns, offset) if applied else before
    return ClockAlignment(mode=mode, requests=n, offset_ns=offset, bound_ns=bound, lower_ns=lower,
                          upper_ns=upper, applied=applied and mode != "off",
                          violating_before=before, violating_after=after, tolerance_ns=tolerance,
                          consistent=starts_fit(sent, end, servers.start_ns, tolerance))


def clock_warnings(alignment: ClockAlignment) -> list[dict]:
    """What the reader must know about the alignment, as ``{"code", "message"}``."""
    out = []
    if alignment.offset_ns is None:
        return out
    offset_ms, bound_ms = alignment.offset_ns / NS_PER_MS, alignment.bound_ns / NS_PER_MS
    if alignment.applied:
        direction = "behind" if offset_ms > 0 else "ahead of"
        out.append({"code": "clock_offset_corrected", "message": (
            f"the target's clock is {abs(offset_ms):.3f} ms (± {bound_ms:.3f} ms) {direction} the generator's, "
            f"estimated from {alignment.requests:,} requests; span times were shifted by {offset_ms:+.3f} ms "
            f"in this analysis ({alignment.violating_before:.1%} of server spans lay outside their request "
            f"before, {alignment.violating_after:.1%} after)")})
    if alignment.consistent is False:
        out.append({"code": "clock_inconsistent", "message": (
            "no single clock offset puts 99% of server spans' starts inside their requests' send/end interval, "
            f"even allowing {alignment.tolerance_ns / NS_PER_MS:.3f} ms each side for where the client and the "
            "server take their timestamps: the clocks may drift or step during the run, or spans joined the "
            "wrong requests")})
    return out
