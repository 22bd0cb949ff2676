"""The cause-detector protocol and registry that spike detection consults.

A detector looks at one spike (:class:`SpikeContext`) and returns a
:class:`Finding` — a kind (e.g. ``"gc_pause"``), a confidence in [0, 1] and
the numbers that support it — or None when it has nothing to say. The
registry runs only the detectors whose ``needs`` the run can satisfy, and a
finding *fires* when its confidence reaches ``min_confidence``.

When no detector fires, the spike's cause is ``unexplained``, carrying the
stage decomposition as evidence. Its confidence says how sure we are that
*none of the known causes* is behind the spike:
``coverage × (1 − strongest non-firing confidence)``, where coverage is the
share of registered detectors whose inputs the run had (a run without
signals cannot rule out throttling or swap, so "unexplained" is then weak).
"unexplained" is a valid answer and better than a wrong one. Registries are
plain objects passed explicitly; there is no global registry. A new registry
is empty; :func:`tailscope.analyzers.causes.registry.default_registry` holds ours.

A need ending in ``*`` is a prefix: ``"gpu*"`` is met by any series whose
name starts with ``gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from tailscope.rundir import Run

#: Findings at or above this confidence explain a spike.
DEFAULT_MIN_CONFIDENCE = 0.5


@dataclass(frozen=True)
class Finding:
    """A detector's verdict on one spike: kind, confidence in [0, 1], evidence numbers."""

    kind: str
    confidence: float
    evidence: dict = field(default_factory=dict)

    def __post_init__(self):
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence!r}")

    def as_dict(self) -> dict:
        return {"kind": self.kind, "confidence": float(self.confidence), "evidence": self.evidence}


@dataclass(frozen=True)
class SpikeContext:
    """What a detector may look at for one spike.

    ``slow_request_index`` / ``normal_request_index`` index the run's requests
    (rows of ``run.requests``); times are epoch ns. ``inputs`` (a
    :class:`~.run_inputs.RunInputs`) holds what detectors share for the run;
    ``threshold_ms`` is the baseline P99 that made a request slow.
    """

    run: Run
    start_ns: int
    end_ns: int
    peak_ns: int
    slow_request_index: np.ndarray
    normal_request_index: np.ndarray
    decomposition: dict
    available: frozenset[str]
    inputs: object = None
    threshold_ms: float | None = None


@runtime_checkable
class Detector(Protocol):
    """A cause detector. ``needs`` names what it reads: ``"spans"``, ``"events"``,
    ``"signals"`` or a signal series name such as ``"host.cpu.busy"``."""

    name: str
    needs: tuple[str, ...]

    def score(self, ctx: SpikeContext) -> Finding | None:
        ...


def available_inputs(run: Run) -> frozenset[str]:
    """The inputs a run offers: table names with rows, and every signal series name."""
    have = {name for name, table in (("spans", run.spans), ("events", run.events),
                                     ("signals", run.signals)) if len(table)}
    if len(run.signals):
        have.update(s for s in run.signals.column("series").unique().to_pylist() if s is not None)
    return frozenset(have)


class DetectorRegistry:
    """An ordered set of detectors; empty when created."""

    def __init__(self, min_confidence: float = DEFAULT_MIN_CONFIDENCE):
        self.min_confidence = min_confidence
        self._detectors: list[Detector] = []

    def register(self, detector: Detector) -> Detector:
        """Add a detector (names are unique); returns it, so it can decorate."""
        if not isinstance(detector, Detector):
            raise TypeError(f"{detector!r} does not implement the Detector protocol (name, needs, score)")
        if any(d.name == detector.name for d in self._detectors):
            raise ValueError(f"a detector named {detector.name!r} is already registered")
        self._detectors.append(detector)
        return detector

    def detectors(self) -> list[Detector]:
        return list(self._detectors)

    def eligible(self, available: frozenset[str]) -> list[Detector]:
        """Detectors whose needs are all available."""
        return [d for d in self._detectors if all(need_met(n, available) for n in d.needs)]

    def attribute(self, ctx: SpikeContext) -> list[dict]:
        """The spike's causes, highest confidence first, or ``[unexplained]``."""
        findings = [f for f in (d.score(ctx) for d in self.eligible(ctx.available)) if f is not None]
        fired = sorted((f for f in findings if f.confidence >= self.min_confidence),
                       key=lambda f: -f.confidence)
        if fired:
            return [f.as_dict() for f in fired]
        consulted = [d.name for d in self.eligible(ctx.available)]
        skipped = [d.name for d in self._detectors if d.name not in consulted]
        return [unexplained(ctx.decomposition, findings, consulted, skipped).as_dict()]


def need_met(need: str, available: frozenset[str]) -> bool:
    """Whether one need is available (a trailing ``*`` matches any name with that prefix)."""
    if need.endswith("*"):
        return any(name.startswith(need[:-1]) for name in available)
    return need in available


def unexplained(decomposition: dict, weak: list[Finding], consulted: list[str],
                skipped: list[str] = ()) -> Finding:
    """The ``unexplained`` finding: no detector fired; evidence is the decomposition.

    Confidence = coverage × (1 − strongest weak confidence), coverage =
    consulted / (consulted + skipped); with no detector registered at all,
    coverage is 0: nothing was ruled out.
    """
    strongest = max((f.confidence for f in weak), default=0.0)
    total = len(consulted) + len(skipped)
    coverage = len(consulted) / total if total else 0.0
    stage = decomposition.get("dominant_stage")
    summary = (f"no known cause reached its threshold ({len(consulted)} of {total} detectors had their "
               f"inputs); strongest weak finding {strongest:.0%}"
               + (f"; {decomposition.get('summary')}" if stage else ""))
    return Finding("unexplained", round(coverage * (1.0 - strongest), 6), {
        "summary": summary,
        "coverage": coverage,
        "decomposition": decomposition,
        "detectors_consulted": consulted,
        "detectors_without_inputs": list(skipped),
        "weak_findings": [f.as_dict() for f in weak],
    })
