"""The finding protocol: a kind, a check from the analysis inputs to a finding or None.

A :class:`FindingCheck` looks at the whole run (:class:`FindingInputs`: the
analysis assembled so far, the request arrays, the stage matrix, the run) and
returns a :class:`Finding` — ``{kind, severity, summary, evidence}``, the
evidence holding the numbers the summary states — or None when the run does
not have that problem. Checks are pure and cheap (array work over the joined
requests at most); they never raise for a run that lacks their inputs (no
spans, no requests): they return None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.stages.decomposition import StageMatrix
from tailscope.rundir import Run

#: Severities, most pressing first (the order findings are listed in).
SEVERITIES = ("high", "medium", "low")


@dataclass(frozen=True)
class Finding:
    """One whole-run finding: its kind, severity (:data:`SEVERITIES`), a one-paragraph
    summary with the numbers, and those numbers as ``evidence`` (ms, shares in [0, 1], counts)."""

    kind: str
    severity: str
    summary: str
    evidence: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, got {self.severity!r}")

    def as_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "summary": self.summary, "evidence": self.evidence}


@dataclass(frozen=True)
class FindingInputs:
    """What a check may read: ``analysis`` (every section but ``findings``), the requests as
    arrays, the stage matrix of the joined requests, the run (clock-aligned copy), and per span
    the index of its request (-1: none; None: not joined yet, a check joins what it needs)."""

    analysis: dict
    req: RequestArrays
    matrix: StageMatrix
    run: Run
    span_request: np.ndarray | None = None


@dataclass(frozen=True)
class FindingCheck:
    """A finding plug-in: ``check(inputs)`` returns a :class:`Finding` of ``kind`` or None."""

    kind: str
    check: Callable[[FindingInputs], Finding | None]


def run_checks(checks: Iterable[FindingCheck], inputs: FindingInputs) -> list[dict]:
    """Every finding the checks return, most severe first (then in the checks' order)."""
    found = []
    for check in checks:
        finding = check.check(inputs)
        if finding is None:
            continue
        if finding.kind != check.kind:
            raise ValueError(f"the {check.kind} check returned a finding of kind {finding.kind!r}")
        found.append(finding)
    found.sort(key=lambda f: SEVERITIES.index(f.severity))
    return [f.as_dict() for f in found]
