"""The ``warnings`` section: what makes the run's numbers weaker than they look.

``properties.warnings`` of analyzers/analysis.schema.json: a list of :class:`AnalysisWarning`,
gathered by analyzers/analysis.py from the analyzers that notice (run health, SLO parsing, clock
alignment, patterns, …); listed by the report, the Markdown summary and the terminal summary.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AnalysisWarning:
    """One warning: its ``code`` (``incomplete``, ``partial_join``, ``latency_drift``, …: the
    schema's enum; a reader shows a code it does not know as it is) and a one-sentence ``message``."""

    code: str
    message: str
