"""The comparison document: ``comparison.json``, new runs against baseline runs.

Built by analyzers/comparison/baseline.py ``compare_runs`` (with llm_compare.py for ``llm``) and
encoded once there; read through reports/upgrade.py ``comparison_of`` by the comparison page
(reports/compare_html.py), its JUnit suite (reports/junit.py) and the terminal
(conductor/terminal.py). docs/analyzers/compare.md describes every key; its field table names
exactly these types' fields (tests/test_comparison_model.py).

Units as in ``analysis.json``: durations ms, rates per second, shares fractions in [0, 1]; an
interval is ``[low, high]`` in the figure's unit. A field without a default is written by every
comparison since format 1.0; a field with one was added later (format 1.1: the title, the sides'
runs, ``method``, the gate interval; later 1.1: ``environment``) and its default is how an older
comparison.json reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailscope.analysis_model.codec import written_when_set
from tailscope.analysis_model.records import Distribution
from tailscope.analysis_model.run import Environment
from tailscope.support.units import percentile_label

#: A confidence interval ``[low, high]`` in its figure's unit.
Interval = tuple[float, ...]
#: A percentile row's metric in words (``latency P50``, ``service time P99.9``).
METRIC_NAMES = {"latency_ms": "latency", "service_time_ms": "service time"}
#: An LLM row's figure in words (analyzers/comparison/llm_compare.py's rows).
LLM_FIGURE_NAMES = {
    "ttft_ms": "TTFT", "tpot_ms": "TPOT", "output_tokens_per_s": "output tokens/s", "goodput": "goodput",
    "ttfa_ms": "time to first answer token", "reasoning_tpot_ms": "reasoning TPOT",
    "time_to_tool_call_ms": "time to complete tool call", "image_ttft_ms": "TTFT with images",
    "ranking_e2e_ms": "rerank/score end-to-end", "ttft_first_turn_ms": "TTFT turn 1",
    "ttft_later_turns_ms": "TTFT later turns", "session_duration_ms": "session duration",
    "session_tokens": "tokens per session", "prefix_cache_hit_rate": "server prefix-cache hit rate",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """One run of a side in figures: its name (the manifest's or scenario's, else the folder's),
    path, requests scheduled, achieved rate (successes per s over the load period; None for an
    empty period), error rate (share of requests), load period ``duration_s`` (s) and ``started``:
    its load start, UTC text to the second (``2026-12-06 01:40:05``; None when unknown, or in a
    comparison before format 1.1)."""

    name: str
    path: str
    requests: int
    achieved_rps: float | None
    error_rate: float
    duration_s: float
    started: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SideFacts(RunFacts):
    """A side over all its runs: requests, achieved rate and error rate over every run,
    ``duration_s`` summed, ``started`` the first run's start, the first run's name, the path the
    side was given as; ``run_count`` runs and each one's :class:`RunFacts` (before format 1.1 a
    side was one run: 1 and none listed)."""

    run_count: int = 1
    runs: tuple[RunFacts, ...] = ()


@dataclass(frozen=True, slots=True)
class Method:
    """How the intervals were resampled: ``name`` in words (hierarchical block bootstrap,
    time-block bootstrap, per-request bootstrap), the ``resampling`` rule, whether the run-to-run
    spread is in the intervals (``resampled``; ``unknown`` with one run on a side; ``ignored`` by
    the per-request bootstrap), a sentence for readers, the block length (s; None per request),
    the runs per side and the replicates per side."""

    name: str
    resampling: Literal["hierarchical", "request"]
    run_to_run_noise: Literal["resampled", "unknown", "ignored"]
    note: str
    block_s: float | None
    baseline_runs: int
    current_runs: int
    resamples: int


@dataclass(frozen=True, slots=True)
class ComparisonVerdict:
    """Whether any check failed, and one sentence: what regressed and where, or why each significant
    change of all requests' latency is none. ``inconclusive``: a check failed, but the current runs'
    host was busier than the baseline's (``host_load``), so the regression may be the host's — exit
    code 3, not 1 (False in comparisons before it)."""

    regressed: bool
    summary: str
    inconclusive: bool = False

    @property
    def label(self) -> str:
        """The banner's word: ``INCONCLUSIVE``, ``REGRESSION`` or ``NO REGRESSION``."""
        return "INCONCLUSIVE" if self.inconclusive else "REGRESSION" if self.regressed else "NO REGRESSION"


@dataclass(frozen=True, slots=True)
class Check:
    """One judged figure (a JUnit testcase): ``all latency P99``, ``short latency P50``, ``LLM
    TTFT P99``; failed when regressed; ``cls`` the request class (None: all requests, or an LLM
    figure) and a message with the figures and the interval."""

    name: str
    cls: str | None
    passed: bool
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PercentileChange:
    """One percentile of ``latency_ms`` or ``service_time_ms`` for all requests (``cls`` None) or
    one class: each side's nearest-rank value (ms, its runs pooled) with its resampled interval at
    the comparison's confidence, the change (current − baseline, ms) with its interval and with the
    gate interval the verdict reads (at ``gate_confidence``; a comparison before format 1.1 judged
    on the change interval: None), the relative change (None when the baseline is 0), whether
    ``significant`` (the change interval excludes 0), ``regressed``, ``improved``, ``claimable``
    (both sides hold enough values to claim it) and the sample sizes."""

    metric: Literal["latency_ms", "service_time_ms"]
    cls: str | None
    percentile: str
    baseline_ms: float
    baseline_ci_ms: Interval
    current_ms: float
    current_ci_ms: Interval
    change_ms: float
    change_ci_ms: Interval
    gate_ci_ms: Interval | None = None
    relative_change: float | None
    significant: bool
    regressed: bool
    improved: bool
    claimable: bool
    baseline_n: int
    current_n: int

    @property
    def figure(self) -> str:
        """The row's figure in words: ``latency P50``, ``service time P99.9``."""
        return f"{METRIC_NAMES.get(self.metric, self.metric)} {percentile_label(self.percentile)}"


@dataclass(frozen=True, slots=True)
class StageChange:
    """One stage's mean (ms) over each side's tail requests (those at or above each run's own
    ``tail_percentile`` of latency; ``*_tail_requests`` of them), the change and its
    normal-approximation 95% interval (ms)."""

    stage: str
    baseline_ms: float
    current_ms: float
    change_ms: float
    change_ci_ms: Interval
    tail_percentile: str
    baseline_tail_requests: int
    current_tail_requests: int


@dataclass(frozen=True, slots=True)
class ChangedStage:
    """The stage whose tail mean grew most with an interval above 0: its growth (ms), its share of
    all stages' growth (0–1) and a sentence."""

    stage: str
    change_ms: float
    share_of_growth: float
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmChange:
    """One LLM figure against the baseline (analyzers/comparison/llm_compare.py): ``metric``
    (``ttft_ms``, ``output_tokens_per_s``, ``goodput``, …) at ``percentile`` (``p50``/``p99``; None
    for a rate or share), in ``unit``; values, intervals, change and gate interval as
    :class:`PercentileChange` in that unit (intervals None for a figure that is shown, not
    judged; the gate interval None before format 1.1), the judgement, whether lower is worse and
    the sample sizes. ``check`` is written false for a figure that is never a check (sessions, the
    prefix-cache hit rate; absent: a check unless a P50), ``judged`` false for one without an
    interval (absent: judged)."""

    metric: str
    percentile: str | None
    unit: Literal["ms", "tokens/s", "share", "tokens"]
    baseline: float
    baseline_ci: Interval | None
    current: float
    current_ci: Interval | None
    change: float
    change_ci: Interval | None
    gate_ci: Interval | None = None
    relative_change: float | None
    significant: bool
    regressed: bool
    improved: bool
    claimable: bool
    baseline_n: int
    current_n: int
    lower_is_worse: bool
    check: bool | None = written_when_set()
    judged: bool | None = written_when_set()

    @property
    def figure(self) -> str:
        """The row's figure in words: ``TTFT P99``, ``output tokens/s``, ``goodput``."""
        label = LLM_FIGURE_NAMES.get(self.metric, self.metric)
        return f"{label} {self.percentile.upper()}" if self.percentile else label

    @property
    def is_check(self) -> bool:
        """Whether the row is a check (JUnit testcase): its P99 or its rate/share, unless ``check`` is false."""
        return self.percentile != "p50" and self.check is not False


@dataclass(frozen=True, slots=True)
class LlmComparison:
    """The LLM figures of two sides whose runs all hold OpenAI-API requests."""

    rows: tuple[LlmChange, ...]


@dataclass(frozen=True, slots=True)
class ErrorRateChange:
    """Both sides' error rates (shares of all their runs' requests), the change and the
    two-proportion z-test p-value."""

    baseline: float
    current: float
    change: float
    p_value: float


@dataclass(frozen=True, slots=True)
class Distributions:
    """Both sides' latency histograms (the analysis's ``distribution``; a side's runs' counts
    summed over the same fixed bins)."""

    baseline: Distribution
    current: Distribution


@dataclass(frozen=True, slots=True)
class EnvironmentDifference:
    """A fact the sides' first runs differ in (server kind, version, model, max_model_len, GPUs,
    driver, CPU model), both values (GPUs NVML stated absent: ``none``) and the warning sentence."""

    field: str
    baseline: str | int
    current: str | int
    message: str


@dataclass(frozen=True, slots=True)
class EnvironmentComparison:
    """Each side's first run's ``run.environment`` and the differences compare warns about."""

    baseline: Environment
    current: Environment
    differences: tuple[EnvironmentDifference, ...]


@dataclass(frozen=True, slots=True)
class HostLoad:
    """How busy each side's host was with other processes while its runs ran: CPU cores used by
    everything but the target and the generator (analyzers/inputs/cpu_accounting.py), each run's
    mean over its load (``*_runs``, None where a run has no CPU series) and the side's mean over
    those (None: no run has them). ``busier``: ``current`` or ``baseline`` when that side's mean is
    at least ``material_cores`` above the other's, else None; ``message`` says so in words."""

    baseline_cores: float | None
    current_cores: float | None
    baseline_runs: tuple[float | None, ...]
    current_runs: tuple[float | None, ...]
    material_cores: float
    busier: str | None
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """``comparison.json``: the new side (``current``) against the ``baseline`` side.

    ``threshold`` (relative change that counts), ``confidence`` of the intervals and ``resamples``
    per side are the rules; ``gate_confidence`` is the confidence each judged interval is read at
    for the ``checks_judged_together`` (Bonferroni, expanded for few runs; None before format
    1.1). ``classes_compared`` are the classes on both sides (sorted), ``classes_only_in_one`` the
    others. ``title`` names the sides (None before format 1.1: reports/upgrade.py
    ``comparison_of`` names them by their runs). ``llm`` is None unless every run of both sides
    holds OpenAI-API requests (and in a comparison before LLM figures); ``environment`` None in a
    comparison before environments were recorded; ``host_load`` how busy each side's host was with
    other processes (None, and left out of the JSON, in comparisons before it)."""

    format_version: str
    title: str | None = None
    baseline: SideFacts
    current: SideFacts
    threshold: float
    confidence: float
    resamples: int
    gate_confidence: float | None = None
    checks_judged_together: int | None = None
    method: Method | None = None
    verdict: ComparisonVerdict
    checks: tuple[Check, ...]
    percentiles: tuple[PercentileChange, ...]
    stages: tuple[StageChange, ...]
    changed_stage: ChangedStage | None
    llm: LlmComparison | None = None
    error_rate: ErrorRateChange
    classes_compared: tuple[str, ...]
    classes_only_in_one: tuple[str, ...]
    distributions: Distributions
    environment: EnvironmentComparison | None = None
    host_load: HostLoad | None = written_when_set()
