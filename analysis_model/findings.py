"""The ``findings`` section: what is true of the run as a whole rather than of one spike.

``properties.findings`` of analyzers/analysis.schema.json; built by analyzers/findings (one check
per kind, registered in analyzers/findings/registry.py; docs/analyzers/findings.md); drawn by the
report's findings list (reports/findings_view.py) and the terminal summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: Severities, most pressing first (the order findings are listed in).
SEVERITIES = ("high", "medium", "low")


@dataclass(frozen=True, slots=True)
class Finding:
    """One whole-run finding: its ``kind`` (``tcp_delayed_ack``, ``outside_server``,
    ``generator_limited``, ``p99_set_by``; a reader shows a kind it does not know as itself), its
    ``severity`` (:data:`SEVERITIES`), a one-paragraph ``summary`` with the numbers, and those
    numbers as ``evidence`` (ms, shares in [0, 1], counts; its keys differ per kind,
    docs/analyzers/findings.md). Raises ValueError for a severity outside :data:`SEVERITIES`."""

    kind: str
    severity: Literal["high", "medium", "low"]
    summary: str
    evidence: dict[str, Any]

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, got {self.severity!r}")
