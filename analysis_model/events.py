"""The ``events`` section: faults injected, GC pauses and other events of the run.

``properties.events`` and ``$defs.event`` of analyzers/analysis.schema.json; built by
analyzers/analysis.py (``event_digest``) from the run's events table; drawn by the report's fault
table, its GC line and the timeline's event marks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its kind (``fault``, ``gc_pause``, ...), start and end (epoch ns), duration (ms),
    where it came from (None: unknown) and its attributes (the event's JSON object; a value that
    was not an object is ``{"value": ...}``, one that did not parse ``{"raw": ...}``)."""

    kind: str
    start_ns: int
    end_ns: int
    duration_ms: float
    source: str | None
    attributes: dict


@dataclass(frozen=True, slots=True)
class GcPauses:
    """The GC pauses: how many, their total and longest (ms; None without pauses), and the
    longest ones (at most 50, by start)."""

    count: int
    total_ms: float
    max_ms: float | None
    longest: list[Event]


@dataclass(frozen=True, slots=True)
class Events:
    """The run's events: the faults (the first 200 by start) and their total, the GC pauses, and
    how many events of each other kind."""

    faults: list[Event]
    faults_total: int
    gc_pauses: GcPauses
    other_counts: dict[str, int]
