"""The run's verdict: each SLO judged, and the one outcome word the exit code follows.

``verdict`` of analyzers/analysis.schema.json. Built by analyzers/stats/slo.py (``evaluate``: the
rows), analyzers/health/load_checks.py (an abort) and analyzers/health/outcome.py (the outcome);
read by the report's banner and SLO table, junit.xml, summary.md, the terminal and the exit code.
An analysis written before outcomes existed (no ``outcome``, rows without ``status``) is brought to
this shape by reports/upgrade.py before it is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set
from tailscope.support.exit_codes import OUTCOME_EXIT_CODES

#: The outcome words (tailscope.analyzers.health.outcome.OUTCOMES): exit codes 0, 1, 3, 3.
Outcome = Literal["passed", "failed", "inconclusive", "incomplete"]
#: How an SLO row was judged: ``unclaimed`` = its percentile's sample is too small to claim it,
#: and a breach is not claimed either.
RowStatus = Literal["pass", "fail", "unclaimed"]
#: What the scenario's ``verdict: {unclaimed: ...}`` makes of an unclaimed SLO.
UnclaimedPolicy = Literal["pass", "inconclusive", "fail"]
#: What an unclaimed SLO makes of the run when the scenario does not say (and in an analysis written
#: before verdict policies existed).
DEFAULT_UNCLAIMED: UnclaimedPolicy = "inconclusive"
#: The metrics an SLO may name (analyzers/stats/slo.py).
SloMetric = Literal[
    "p50", "p90", "p95", "p99", "p999",
    "ttft_p50", "ttft_p90", "ttft_p95", "ttft_p99", "ttft_p999",
    "itl_p50", "itl_p90", "itl_p95", "itl_p99", "itl_p999",
    "tpot_p50", "tpot_p90", "tpot_p95", "tpot_p99", "tpot_p999",
    "e2e_p50", "e2e_p90", "e2e_p95", "e2e_p99", "e2e_p999",
    "error_rate", "goodput", "achieved_rps", "output_tokens_per_s",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SloRow:
    """One SLO judged: ``observed`` and ``threshold`` in the metric's unit (ms for percentiles, a
    share 0–1 for rates of errors and goodput, req/s or tokens/s for throughputs); ``observed`` is
    None when the run has no value for it. ``passed`` is true only when ``status`` is ``pass``;
    ``claimed`` is false for a percentile whose sample is too small to claim it (MLPerf early
    stopping at 99%; true for rates and shares). ``samples``/``needed_samples``: the percentile's
    sample size and the size that claims it (459 for P99); None for rates and shares. ``cls``: the
    request class the SLO is scoped to (None: all requests); ``op`` its comparison (None only in a
    row written without one)."""

    slo: str
    metric: SloMetric
    cls: str | None = None
    op: Literal["<", "<=", ">", ">="] | None = written_when_set()
    observed: float | None
    threshold: float
    status: RowStatus
    passed: bool
    claimed: bool
    samples: int | None = None
    needed_samples: int | None = None

    def unclaimed_note(self) -> str:
        """``not claimed (52 samples, need 459)`` (``not claimed`` when the sizes are unknown)."""
        if self.samples is None or not self.needed_samples:
            return "not claimed"
        return f"not claimed ({self.samples:,} samples, need {self.needed_samples:,})"


@dataclass(frozen=True, slots=True)
class Incomplete:
    """How a run was cut short: the reason in words, seconds of load covered and planned (None when
    the plan was a request count or unknown) and ``span``, e.g. ``covered 0–40 s of 60 s planned``."""

    reason: str
    covered_s: float
    planned_s: float | None
    span: str


@dataclass(frozen=True, slots=True)
class VerdictPolicy:
    """The scenario's verdict policy (``verdict:`` section): what an unclaimed SLO makes of the run."""

    unclaimed: UnclaimedPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The verdict. ``outcome`` decides the exit code (:attr:`exit_code`); precedence failed >
    incomplete > unclaimed (by ``policy``) > passed (analyzers/health/outcome.py). ``passed`` is
    true only for the outcome ``passed``; ``failed`` lists the failed SLO texts (with
    ``aborted: <reason>`` entries for an aborted run, and ``<slo> (not claimed)`` under
    ``unclaimed: fail``); ``unclaimed`` the SLO texts whose status is unclaimed; ``label`` the
    outcome in capitals; ``detail`` one line (what failed, the covered span, or what would make it
    conclusive; "" when passed); ``needs`` one hint per unclaimed SLO; ``aborted`` True for a run
    stopped by an abort rule (the key is there only then: None otherwise)."""

    passed: bool
    slos: tuple[SloRow, ...]
    failed: tuple[str, ...]
    unclaimed: tuple[str, ...] = ()
    aborted: bool | None = written_when_set()
    outcome: Outcome
    label: str
    detail: str
    incomplete: Incomplete | None
    needs: tuple[str, ...]
    policy: VerdictPolicy

    @property
    def exit_code(self) -> int:
        """The exit code of the outcome (README "Exit codes"): 0 passed, 1 failed, 3 inconclusive
        or incomplete."""
        return OUTCOME_EXIT_CODES[self.outcome]

    def line(self) -> str:
        """The verdict in one line, the same on the terminal, in summary.md, report.html and
        junit.xml: ``PASSED``, ``FAILED: failed: p99 < 250ms``, ``INCOMPLETE: killed …; covered
        0–40 s of 60 s planned``, ``INCONCLUSIVE: TTFT P99 needs ≥ 459 samples (has 52): …``."""
        return f"{self.label}: {self.detail}" if self.detail else self.label
