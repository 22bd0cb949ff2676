"""A load sweep as types: ``sweep.json`` (``tailscope sweep``) and the analysis's optional ``sweep`` key.

:class:`Sweep` is ``sweep.json``: built by analyzers/patterns/load_sweep.py (``step_record``,
``summarize_sweep``) from the step runs' analyses, written once by conductor/sweep.py, drawn by
reports/sweep_report.py and printed by cli/commands/sweep.py. Its format is stated by these types
and by docs/sweep.md's key table (tests/test_sweep_model.py checks that the two name the same
keys). A field with a default is one an older ``sweep.json`` lacks (format 1.0: no ``variable``,
``concurrency``, ``llm``, ``max_concurrency_under_slo`` or ``frontier``; 1.1: no ``stopped``; a step's
``outcome`` arrived within 1.1); the default is how such a file reads. reports/upgrade.py ``sweep_of``
reads a file of any version.

:class:`AnalysisSweep` is a different thing: the ``sweep`` key an analyzer of one's own may add to
``analysis.json`` (docs/report.md "Keys read when present"), drawn as the run report's sweep table;
every key of it is optional.

Units: rates in requests/s, latencies in ms, shares in [0, 1], durations in s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.warning import AnalysisWarning


@dataclass(frozen=True, slots=True)
class StepPercentile:
    """A step's latency percentile (ms): the run summary's value, its distribution-free 95% CI,
    the sample size and whether ``n`` is large enough to claim it (analysis_model.percentiles.
    Percentile without the early-stopping bound). Values are None without samples."""

    value_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    n: int
    claimed: bool


@dataclass(frozen=True, slots=True)
class StepPercentiles:
    """P50 and P99 of one LLM metric (TTFT or TPOT, ms)."""

    p50: StepPercentile
    p99: StepPercentile


@dataclass(frozen=True, slots=True)
class StepLlm:
    """A step's LLM figures, from its run's ``llm`` section: LLM requests, those completed, output
    tokens/s (the step's output tokens ÷ its load period; None for an empty load period) and TTFT /
    TPOT P50 and P99 (ms; TTFT from each request's send in concurrency mode)."""

    requests: int
    completed: int
    output_tokens_per_s: float | None
    ttft_ms: StepPercentiles
    tpot_ms: StepPercentiles


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepStep:
    """One step: a full run at one level. ``rate`` is the offered rate it ran at (req/s; None in a
    concurrency sweep), ``concurrency`` the requests kept in flight (None in a rate sweep and in
    format 1.0). ``status`` is its run's status; ``duration_s`` its load period (s); ``requests``,
    ``errors`` and ``error_rate`` (0–1) its counts; ``offered_rps`` / ``achieved_rps`` its rates
    (None when the load period is 0; offered is None in concurrency mode); ``p50`` / ``p99`` its
    latency from the scheduled send. ``passed`` / ``outcome`` its SLO verdict (None without SLOs;
    outcome ``passed``|``failed``|``inconclusive``|``incomplete``, None in sweeps written before
    outcomes), ``failed_slos`` the SLOs it failed, ``generator_limited`` true when more than 1% of
    its sends were over 1 ms late, ``llm`` its LLM figures (None without OpenAI-API requests)."""

    index: int
    rate: float | None
    concurrency: int | None = None
    run_dir: str
    status: str
    duration_s: float
    requests: int
    errors: int
    error_rate: float
    offered_rps: float | None
    achieved_rps: float | None
    p50: StepPercentile
    p99: StepPercentile
    passed: bool | None
    outcome: Literal["passed", "failed", "inconclusive", "incomplete"] | None = None
    failed_slos: list[str]
    generator_limited: bool
    llm: StepLlm | None = None

    @property
    def level(self) -> float:
        """The level the step ran at: its concurrency in a concurrency sweep, else its offered rate."""
        return self.concurrency if self.concurrency is not None else self.rate


@dataclass(frozen=True, slots=True, kw_only=True)
class Knee:
    """The knee of P99 against the level (Kneedle): the step's ``rate`` (None in a concurrency
    sweep), ``concurrency`` (None in a rate sweep and in format 1.0), ``level`` (whichever was
    varied; reports/upgrade.py fills it from ``rate`` in format 1.0), ``index``, ``achieved_rps``,
    ``p99_ms``, its normalised ``distance`` below the chord (≥ 0.05) and the ``method``."""

    rate: float | None
    concurrency: int | None = None
    level: float
    index: int
    achieved_rps: float | None
    p99_ms: float
    distance: float
    method: Literal["kneedle"]


@dataclass(frozen=True, slots=True)
class Saturation:
    """A rate sweep's first step (by rate) whose achieved rate fell below 90% of its offered rate."""

    rate: float
    index: int
    offered_rps: float
    achieved_rps: float


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One step with LLM figures on the throughput–latency plane: its ``level``, output tokens/s,
    achieved req/s, TTFT and TPOT P50/P99 (ms), its SLO ``passed`` (None without SLOs) and whether
    it is ``pareto``-optimal (no other step has at least its throughput with no worse TTFT P99 and
    TPOT P99)."""

    index: int
    level: float
    output_tokens_per_s: float
    achieved_rps: float | None
    ttft_ms: StepPercentiles
    tpot_ms: StepPercentiles
    passed: bool | None
    pareto: bool


@dataclass(frozen=True, slots=True)
class BestPoint:
    """The step with the most output tokens/s among those that met every SLO (ties: the lower
    TPOT P99), with its TTFT and TPOT P99 (ms; None where not measured)."""

    index: int
    level: float
    output_tokens_per_s: float
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None


@dataclass(frozen=True, slots=True)
class Frontier:
    """The throughput–latency frontier: points by level; ``best_under_slo`` None without SLOs or
    when no step passed."""

    throughput: Literal["output_tokens_per_s"]
    points: list[FrontierPoint]
    best_under_slo: BestPoint | None


@dataclass(frozen=True, slots=True)
class SearchTry:
    """One step of a peak search: the rate tried (req/s) and whether it passed."""

    rate: float
    passed: bool


@dataclass(frozen=True, slots=True)
class Search:
    """A peak search: its bounds and tolerance (req/s), the steps spent of at most ``max_steps``,
    the bracket (the highest passing and lowest failing rate; None where none) and its history."""

    low: float
    high: float
    tolerance_rps: float
    steps: int
    max_steps: int
    passing_rate: float | None
    failing_rate: float | None
    history: list[SearchTry]


@dataclass(frozen=True, slots=True)
class KneeStep:
    """The saturation knee step: its index, level, throughput (in the stop's ``unit``) and latency
    (ms: P50, else P99)."""

    index: int
    level: float
    throughput: float
    latency_ms: float


@dataclass(frozen=True, slots=True)
class PastKnee:
    """A step past the saturation knee: its index, level, throughput and latency (ms), and its
    throughput and level gains relative to the knee step (0.05 = 5%)."""

    index: int
    level: float
    throughput: float
    latency_ms: float
    throughput_gain: float
    level_gain: float


@dataclass(frozen=True, slots=True)
class SaturationStop:
    """The evidence that a sweep stepped past saturation: the knee step, the throughput unit
    (achieved req/s, or output tokens/s for LLM steps), the steps past the knee it waited for and
    those steps (each gained less than half its level's relative increase while latency rose)."""

    knee: KneeStep
    unit: Literal["req/s", "output tokens/s"]
    steps_past_knee: int
    after: list[PastKnee]


@dataclass(frozen=True, slots=True)
class Stopped:
    """Why a list of levels stopped before its end: ``saturation`` or ``slo_failures`` (steps in a
    row failed their SLOs), the sentence said on the terminal, the levels not run, and the
    saturation evidence (None for an SLO-failure stop)."""

    reason: Literal["saturation", "slo_failures"]
    message: str
    levels_not_run: list[float]
    saturation: SaturationStop | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """``sweep.json``: the sweep's ``name`` (the scenario's), ``mode`` and the ``variable`` its steps
    varied (``rate`` in format 1.0), its SLO texts, the steps sorted by level, the highest level
    whose step met every SLO (``max_rate_under_slo`` in a rate sweep, ``max_concurrency_under_slo``
    in a concurrency sweep; None otherwise) and that step's index, the knee, a rate sweep's
    saturation, the LLM frontier (None without LLM steps), the peak search (None for a list), why a
    list stopped early (None when it ran every level), ``passed`` (a step met every SLO; None
    without SLOs), warnings, and where and how it ran: its folder, each step's length (s) and
    whether Ctrl-C ended it."""

    format_version: str
    name: str
    mode: Literal["rates", "search", "concurrency"]
    variable: Literal["rate", "concurrency"] = "rate"
    slos: list[str]
    steps: list[SweepStep]
    max_rate_under_slo: float | None
    max_concurrency_under_slo: float | None = None
    max_rate_step: int | None
    knee: Knee | None
    saturation: Saturation | None
    frontier: Frontier | None = None
    search: Search | None
    stopped: Stopped | None = None
    passed: bool | None
    warnings: list[AnalysisWarning]
    path: str
    step_duration_s: float
    interrupted: bool

    @property
    def max_level_under_slo(self) -> float | None:
        """The highest level whose step met every SLO, whichever the sweep varied."""
        return self.max_concurrency_under_slo if self.variable == "concurrency" else self.max_rate_under_slo


@dataclass(frozen=True, slots=True)
class AnalysisSweepStep:
    """One step of an analysis's own ``sweep`` key: rates (req/s), P50/P99 (ms), error share and
    SLO outcome; any of them may be absent (None)."""

    offered_rps: float | None = None
    achieved_rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    error_rate: float | None = None
    passed: bool | None = None


@dataclass(frozen=True, slots=True)
class AnalysisSweep:
    """The ``sweep`` key an analyzer of one's own may add to analysis.json (tailscope's analyzers do
    not write it): steps, the knee and the highest rate under the SLO (req/s), and the SLO's text;
    every key optional."""

    steps: list[AnalysisSweepStep] | None = None
    knee_rps: float | None = None
    max_rate_under_slo_rps: float | None = None
    slo: str | None = None
