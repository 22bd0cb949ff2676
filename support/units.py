"""Units of time that scenario files, fault options and command-line flags share.

A leaf module: it imports nothing from tailscope, so the scenario model, the fault
injectors and the CLI can all parse ``"90s"`` the same way without importing each other.
"""

from __future__ import annotations

import re
from typing import Any

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
