"""Outage windows: when the target refused, reset or stopped answering connections.

Derived from the request records: taken in send order, a run of at least
``MIN_OUTAGE_REQUESTS`` consecutive requests that each failed with a
connection failure (``refused``, ``reset`` or ``timeout``) is an outage. It
starts at the first failing request's send time and ends when the next request
that did not fail that way was sent (the target answered again); a run still
failing at the end of the load ends at its last failure's end
(``recovered: false``). Its ``kind`` is ``down`` when most failures were
refused or reset connections (the process was gone or restarting) and
``stalled`` when most were timeouts (it accepted but did not answer).

Outage events recorded by others (``events.arrow`` rows of kind ``outage``,
e.g. a fault injector's ground truth) are listed beside, marked with their
source. Cost: O(n log n) for the sort by send time.
"""

from __future__ import annotations

import json

import numpy as np

from tailscope.analysis_model.health import Outage, Outages
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column

CONNECTION_FAILURES = ("refused", "reset", "timeout")
#: Fewest consecutive connection failures that make an outage.
MIN_OUTAGE_REQUESTS = 3
#: Most outages listed (the longest are kept).
MAX_OUTAGES = 100
#: The ``source`` of an outage found in the request records.
DERIVED = "derived from requests"


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[(first, last)] index pairs of the runs of True in a boolean array."""
    padded = np.concatenate(([False], flags, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[0::2].tolist(), (edges[1::2] - 1).tolist()))


def derived_outages(req: RequestArrays, min_requests: int = MIN_OUTAGE_REQUESTS) -> list[Outage]:
    """Outages found in the request records (see module docstring), in time order."""
    sent = np.flatnonzero(req.has_sent)
    if len(sent) == 0:
        return []
    order = sent[np.argsort(req.sent_ns[sent], kind="stable")]
    kinds = req.error_kind[order]
    failing = np.isin(kinds.astype(object), CONNECTION_FAILURES)
    outages = []
    for first, last in _runs(failing):
        if last - first + 1 < min_requests:
            continue
        members = order[first:last + 1]
        counts = {kind: int(np.sum(kinds[first:last + 1] == kind)) for kind in CONNECTION_FAILURES}
        recovered = last + 1 < len(order)
        start_ns = int(req.sent_ns[members[0]])
        end_ns = int(req.sent_ns[order[last + 1]]) if recovered else int(req.end_ns[members].max())
        outages.append(Outage(
            kind="down" if counts["refused"] + counts["reset"] >= counts["timeout"] else "stalled",
            start_ns=start_ns,
            end_ns=end_ns,
            duration_ms=(end_ns - start_ns) / NS_PER_MS,
            requests=int(len(members)),
            errors_by_kind={k: v for k, v in counts.items() if v},
            recovered=bool(recovered),
            source=DERIVED,
        ))
    return outages


def recorded_outages(events) -> list[Outage]:
    """Rows of kind ``outage`` in the events table, as outages (``kind`` from the row's attributes,
    default ``down``)."""
    if events is None or len(events) == 0:
        return []
    kinds = events.column("kind").to_numpy(zero_copy_only=False)
    index = np.flatnonzero(kinds == "outage")
    start, _ = int_column(events, "start_ns")
    end, _ = int_column(events, "end_ns")
    sources = events.column("source").to_numpy(zero_copy_only=False)
    attributes = events.column("attributes").to_numpy(zero_copy_only=False)
    out = []
    for i in index:
        try:
            attrs = json.loads(attributes[i]) if attributes[i] else {}
        except (TypeError, ValueError):
            attrs = {}
        attrs = attrs if isinstance(attrs, dict) else {}
        out.append(Outage(kind=str(attrs.get("kind", "down")), start_ns=int(start[i]), end_ns=int(end[i]),  # type: ignore[arg-type]
                          duration_ms=(int(end[i]) - int(start[i])) / NS_PER_MS, requests=None,
                          errors_by_kind={}, recovered=True, source=str(sources[i] or "events")))
    return out


def find_outages(req: RequestArrays, events) -> Outages:
    """The ``outages`` section: derived and recorded outages (at most :data:`MAX_OUTAGES`, the
    longest), by start; ``total_ms`` sums the derived ones."""
    outages = derived_outages(req) + recorded_outages(events)
    total_ms = float(sum(o.duration_ms for o in outages if o.source == DERIVED))
    count = len(outages)
    if len(outages) > MAX_OUTAGES:
        outages = sorted(outages, key=lambda o: -o.duration_ms)[:MAX_OUTAGES]
    outages.sort(key=lambda o: o.start_ns)
    return Outages(count=count, total_ms=total_ms, outages=outages)
