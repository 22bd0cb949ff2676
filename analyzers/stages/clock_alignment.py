"""Client→server clock alignment from the requests' server spans.

When the target runs on another host its clock differs from the generator's.
Every server span must lie inside its request's ``[sent_ns, end_ns]`` on the
generator's clock, so the offset θ to *add* to server times satisfies, for
each request i::

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

``mode``: ``auto`` applies the estimate only when the uncorrected spans
demonstrably violate containment (0 is outside the robust feasible interval),
``on`` always applies it, ``off`` never does. Correction shifts the analysis's
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

from tailscope.rundir import Run

from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays
from tailscope.analyzers.stages.rules import StageRules
from tailscope.analyzers.stages.decomposition import SpanJoin, as_rules, join_spans

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

    @property
    def consistent(self) -> bool | None:
        """Whether the robust feasible interval is non-empty (None without an estimate)."""
        return None if self.lower_ns is None else self.lower_ns <= self.upper_ns

    def as_dict(self) -> dict:
        """The ``stages.clock_alignment`` section of analysis.json (ms)."""
        def ms(value):
            return None if value is None else value / NS_PER_MS
        return {
            "mode": self.mode, "requests": self.requests, "applied": self.applied,
            "offset_ms": ms(self.offset_ns), "bound_ms": ms(self.bound_ns),
            "feasible_ms": None if self.lower_ns is None else [ms(self.lower_ns), ms(self.upper_ns)],
            "consistent": self.consistent,
            "violating_share_before": self.violating_before, "violating_share_after": self.violating_after,
        }

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
    applied = mode == "on" or (mode == "auto" and not min(lower, upper) <= 0 <= max(lower, upper))
    before = violating_share(sent, end, servers.start_ns, servers.end_ns, 0)
    after = violating_share(sent, end, servers.start_ns, servers.end_ns, offset) if applied else before
    return ClockAlignment(mode=mode, requests=n, offset_ns=offset, bound_ns=bound, lower_ns=lower,
                          upper_ns=upper, applied=applied and mode != "off",
                          violating_before=before, violating_after=after)


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
            "no single clock offset puts 99% of server spans inside their requests' send/end interval "
            f"(feasible bounds cross by {abs(bound_ms) * 2:.3f} ms): the clocks may drift or step during the "
            "run, or spans joined the wrong requests")})
    return out
