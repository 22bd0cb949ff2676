"""Units, thresholds and labels that every stage shares, each defined once here.

Durations as scenario files, fault options and command-line flags write them;
nanosecond conversions; the generator's "late" threshold; percentile labels.
A leaf module: it imports nothing from tailscope, so the scenario model, the load
generator, the analyzers, the reports and the CLI all read the same facts without
importing each other.
"""

from __future__ import annotations

import re
from typing import Any

#: Nanoseconds per second / per millisecond (times in tailscope are epoch ns).
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

#: A request is "late" when it left the generator more than this after its
#: scheduled time (wrk2's and tailscope's coordinated-omission line), ns and ms.
LATE_THRESHOLD_NS = NS_PER_MS
LATE_THRESHOLD_MS = LATE_THRESHOLD_NS / NS_PER_MS

#: How a percentile key is written for people: ``p999`` → ``P99.9``.
PERCENTILE_LABELS = {"p50": "P50", "p90": "P90", "p95": "P95", "p99": "P99", "p999": "P99.9", "max": "max"}


def percentile_label(key: str) -> str:
    """``"p99"`` → ``"P99"``, ``"p999"`` → ``"P99.9"``, ``"p99_ms"`` → ``"P99"``; unknown keys upper-cased."""
    base = key[:-3] if key.endswith("_ms") else key
    return PERCENTILE_LABELS.get(base, base.upper())


#: A duration: a non-negative number with an optional unit (``ms``, ``s``, ``m``, ``h``; none = seconds).
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
#: Seconds per duration unit (``None``: a bare number is seconds).
DURATION_UNITS_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(value: Any) -> float:
    """``"90s"``, ``"2m"``, ``"1.5h"``, ``"250ms"`` or a number of seconds → seconds (float).

    Raises ValueError for anything else (booleans included).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 60s or 2m, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = DURATION_RE.match(value)
        if match:
            return float(match.group(1)) * DURATION_UNITS_S[match.group(2)]
    raise ValueError(f"expected a duration such as 60s, 2m or 250ms, got {value!r}")
