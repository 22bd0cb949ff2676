"""The latency-distribution view: histogram and CDF per request class, on log axes.

Reads ``analysis["distribution"]`` as :class:`~tailscope.analysis_model.records.Distribution`
(:mod:`tailscope.analyzers.stats.distribution`:
fixed log-spaced bins shared by every run). Per class the chart gets the bin
centres (geometric means of the edges, ms), the share of requests in each bin
(so classes of different sizes compare) and the cumulative share at each
bin's upper edge. An analysis without the section gives None.
"""

from __future__ import annotations

import math

from tailscope.analysis_model.records import ClassCounts, Distribution


def class_curves(edges: list[float], name: str, entry: ClassCounts) -> dict | None:
    """``{"name", "n", "centres", "share", "cdf_x", "cdf"}`` of one class; None when empty."""
    counts, n = entry.counts, entry.n
    if n == 0 or len(counts) + 1 != len(edges):
        return None
    share, cdf, running = [], [], 0
    for count in counts:
        running += count
        share.append(round(count / n, 6))
        cdf.append(round(running / n, 6))
    return {"name": str(name), "n": n,
            "centres": [round(math.sqrt(lo * hi), 6) for lo, hi in zip(edges[:-1], edges[1:])],
            "share": share, "cdf_x": [round(e, 6) for e in edges[1:]], "cdf": cdf}


def distribution_charts(distribution: Distribution | None) -> dict | None:
    """Curves of every class (``all`` first) of an analysis's ``distribution``; None when absent or empty."""
    if distribution is None:
        return None
    edges = distribution.bin_edges_ms
    curves = [c for c in (class_curves(edges, name, entry) for name, entry in distribution.classes.items()) if c]
    return {"classes": curves} if curves else None
