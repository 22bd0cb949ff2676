"""The verdict in words, the same on the terminal, in summary.md, report.html and junit.xml.

Pure text over an analysis's ``verdict`` section (docs/analysis-schema.md), shared by the
reports and the entry points; the outcome itself is decided in
tailscope.analyzers.health.outcome.
"""

from __future__ import annotations


def verdict_line(verdict: dict) -> str:
    """The verdict in one line, the same on the terminal, in summary.md, report.html and junit.xml:
    ``PASSED``, ``FAILED: p99 < 250ms``, ``INCOMPLETE: killed …; covered 0–40 s of 60 s planned``,
    ``INCONCLUSIVE: TTFT P99 needs ≥ 459 samples (has 52): run ≥ 9 min at this rate (0.9 req/s)``.
    An analysis written before outcomes existed gives PASSED or FAILED from ``passed``."""
    label = verdict.get("label") or ("PASSED" if verdict.get("passed", True) else "FAILED")
    detail = verdict.get("detail")
    if detail is None and verdict.get("failed"):
        detail = "failed: " + ", ".join(verdict["failed"])
    return f"{label}: {detail}" if detail else label


def unclaimed_note(row: dict) -> str:
    """``not claimed (52 samples, need 459)`` for an SLO row whose status is unclaimed."""
    samples, needed = row.get("samples"), row.get("needed_samples")
    if samples is None or not needed:
        return "not claimed"
    return f"not claimed ({samples:,} samples, need {needed:,})"
