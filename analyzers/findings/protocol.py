"""The finding protocol: a kind, a check from the analysis inputs to a finding or None.

A :class:`FindingCheck` looks at the whole run (:class:`FindingInputs`: the typed
sections it reads — the summary, the spikes, the generator — the request arrays, the
stage matrix, the run) and returns a :class:`~tailscope.analysis_model.findings.Finding`
— ``{kind, severity, summary, evidence}``, the evidence holding the numbers the summary
states — or None when the run does not have that problem. Checks are pure and cheap
(array work over the joined requests at most); they never raise for a run that lacks
their inputs (no spans, no requests): they return None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tailscope.analysis_model.findings import SEVERITIES, Finding
from tailscope.analysis_model.health import Generator
from tailscope.analysis_model.spikes import Spike
from tailscope.analysis_model.summary import Summary
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.stages.decomposition import StageMatrix
from tailscope.rundir import Run

__all__ = ["SEVERITIES", "Finding", "FindingCheck", "FindingInputs", "run_checks"]


@dataclass(frozen=True, kw_only=True)
class FindingInputs:
    """What a check may read: the run's ``summary``, its latency ``spikes`` (with their causes)
    and ``generator`` section as their types, the load start (epoch ns; None without a load
    period), the requests as arrays, the stage matrix of the joined requests, the run
    (clock-aligned copy), and per span the index of its request (-1: none; None: not joined yet,
    a check joins what it needs)."""

    summary: Summary
    spikes: Sequence[Spike]
    generator: Generator
    load_start_ns: int | None
    req: RequestArrays
    matrix: StageMatrix
    run: Run
    span_request: np.ndarray | None = None


@dataclass(frozen=True)
class FindingCheck:
    """A finding plug-in: ``check(inputs)`` returns a :class:`Finding` of ``kind`` or None."""

    kind: str
    check: Callable[[FindingInputs], Finding | None]


def run_checks(checks: Iterable[FindingCheck], inputs: FindingInputs) -> list[Finding]:
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
    return found
