"""The ``stages`` section: how the joined requests' time splits into stages, and how it was told.

``properties.stages`` of analyzers/analysis.schema.json, with ``$defs.stage_stats`` and
``$defs.name_count``; built by analyzers/stages/ (decomposition.summarize_stages,
consistency.stage_consistency, slow_split, clock_alignment, server_metrics, rule_model) and
analyzers/analysis.py; drawn by the report's stage table, its tracing lines and the slow/normal
split. Times are ms unless a name says ``_ns`` (epoch ns) or ``_s`` (seconds).

A field with a default is one an older analysis may lack; the default (None, empty) is how such
an analysis reads: the report then leaves that part out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True)
class StageStats:
    """One stage over the joined requests that have it (ms; None without samples): nearest-rank
    P50 and P99, the mean, and how many requests have the stage (``count``)."""

    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    count: int


@dataclass(frozen=True, slots=True)
class NameCount:
    """A span name no stage rule maps (None: a span without a name) and how many spans had it."""

    name: str | None
    count: int


@dataclass(frozen=True, slots=True)
class ServerTokenTotals:
    """Token counts read from the server's spans (a preset's token attributes): how many joined
    requests had a count, the sums, and which attributes were read (``attributes``: the rule's
    description, ``{"match", "prompt", "output"}``)."""

    requests: int
    prompt_tokens: int
    output_tokens: int
    attributes: dict


@dataclass(frozen=True, slots=True)
class Culprit:
    """A stage whose removal would make a share of the exceeding requests fit their server span
    (``resolves_share``, 0-1), with the rules (``sources``) that produce it."""

    stage: str
    sources: list[str]
    resolves_share: float


@dataclass(frozen=True, slots=True)
class OverlappingStages:
    """Two stages that overlap in time in ``requests`` joined requests, with each one's rules."""

    stages: list[str]
    sources: dict[str, list[str]]
    requests: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Consistency:
    """Do each joined request's stages fit in its server span (analyzers/stages/consistency.py):
    requests checked, those whose stage sum exceeds the span by more than ``tolerance`` (relative)
    and ``abs_tolerance_ms``, their share (0-1), the excess (ms; None without such requests), the
    mean stage sum and server span (ms), and the likely culprits; and the requests whose stages
    overlap in time (``overlap_p50_ms``: the overlap's median, ms; None without), with the
    overlapping pairs. The overlap fields came later (an older analysis reads 0 / None / []).
    Keyword-only: the fields are in the order written."""

    overlapping_requests: int = 0
    overlap_p50_ms: float | None = None
    overlapping_stages: list[OverlappingStages] = field(default_factory=list)
    checked_requests: int
    exceeding_requests: int
    exceeding_share: float
    excess_p50_ms: float | None
    excess_max_ms: float | None
    stage_sum_mean_ms: float | None
    server_mean_ms: float | None
    tolerance: float
    abs_tolerance_ms: float
    preset: str | None
    culprits: list[Culprit]


@dataclass(frozen=True, slots=True)
class SlowSplitStage:
    """One stage's mean and P50 (ms; None where a group has no sample) for the slow and the normal
    requests, and how many of each have it."""

    stage: str
    slow_mean_ms: float | None
    normal_mean_ms: float | None
    slow_p50_ms: float | None
    normal_p50_ms: float | None
    slow_count: int
    normal_count: int


@dataclass(frozen=True, slots=True)
class TokenMeans:
    """Mean prompt and output tokens per request of one group (None without counts)."""

    prompt: float | None
    output: float | None


@dataclass(frozen=True, slots=True)
class SplitTokens:
    """Mean token counts of the slow and of the normal requests."""

    slow: TokenMeans
    normal: TokenMeans


@dataclass(frozen=True, slots=True)
class SlowNormal:
    """One measure (ms) for the slow and for the normal requests (None without samples)."""

    slow: float | None
    normal: float | None


@dataclass(frozen=True, slots=True)
class SlowSplit:
    """Stages of the slow requests against the normal ones (analyzers/stages/slow_split.py):
    ``by`` the measures that define slow (``ttft``/``tpot`` in an LLM run, else ``latency``),
    each one's threshold (the run's P99, ms; None where it has none), the group sizes, per-stage
    means, the groups' mean token counts (None without server token counts) and decode time per
    output token (ms; None without a ``decode`` stage and counts)."""

    by: list[str]
    thresholds_ms: dict[str, float | None]
    slow_requests: int
    normal_requests: int
    stages: list[SlowSplitStage]
    tokens: SplitTokens | None
    decode_per_output_token_ms: SlowNormal | None


@dataclass(frozen=True, slots=True)
class ServerMetricRole:
    """A preset's server metric role found in the run's signals: the metric, its series, whether
    it is a gauge or a counter, and its unit."""

    metric: str
    series: list[str]
    kind: Literal["gauge", "counter"]
    unit: str


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """The stage preset's metric map resolved against the run's signals
    (analyzers/stages/server_metrics.py): the roles found and those missing."""

    preset: str | None
    roles: dict[str, ServerMetricRole]
    missing: list[str]


@dataclass(frozen=True, slots=True)
class LateSpanWait:
    """The conductor's wait for late spans after the load (conductor/late_spans.py, the manifest's
    ``late_spans``): seconds waited, why it ended, spans expected and still missing, the limit
    (s), and server spans that arrived after it called the wait complete (absent, None, in
    manifests written before they were counted)."""

    waited_s: float
    ended: Literal["complete", "quiet", "cap", "nothing_expected", "no_spans"]
    expected: int
    missing: int
    wait_s: float
    spans_after_complete: int | None = written_when_set()


@dataclass(frozen=True, slots=True)
class MissingSpans:
    """Successful requests sent for tracing whose server span never joined: those at the end of
    the run (after the last joined one, ``last_joined_end_ns``, epoch ns) and the rest (``never``)."""

    end_of_run: int
    never: int
    last_joined_end_ns: int | None
    wait: LateSpanWait | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StageRule:
    """One stage rule as the analysis applied it: a span rule's ``match`` (the span-name/attribute
    match in words), an event rule's two span events (``between``), or an attribute rule's
    ``match``, span ``attribute`` (in ``unit``) and the stages it is ``minus``. Only the keys of
    the rule's kind are written (None here where absent); keyword-only: in the order written."""

    match: str | None = written_when_set()
    between: list[str] | None = written_when_set()
    stage: str
    attribute: str | None = written_when_set()
    unit: Literal["s", "ms", "us", "ns"] | None = written_when_set()
    minus: list[str] | None = written_when_set()


@dataclass(frozen=True, slots=True)
class StageRulesInfo:
    """The stage rules of the analysis (analyzers/stages/rule_model.py ``StageRules.describe``): the
    preset (None: the span-name map), how many rules came from the scenario, how the server span
    is chosen, the rules in priority order, and the token attributes read (None: none)."""

    preset: str | None
    user_rules: int
    server: str
    rules: list[StageRule]
    tokens: dict | None = None


@dataclass(frozen=True, slots=True)
class ClockAlignment:
    """The client→server clock offset estimated from the joined requests' server spans
    (analyzers/stages/clock_alignment.py): the mode, requests used, whether it was applied, the
    offset to add to server times and its bound (ms; None when not estimated: fewer than 20
    requests). The later fields read None in older analyses."""

    mode: Literal["auto", "on", "off"]
    requests: int
    applied: bool
    offset_ms: float | None
    bound_ms: float | None
    feasible_ms: list[float] | None = None
    tolerance_ms: float | None = None
    consistent: bool | None = None
    violating_share_before: float | None = None
    violating_share_after: float | None = None


@dataclass(frozen=True, slots=True)
class Stages:
    """The stage decomposition: the shares of successful requests joined to a server span and sent
    for tracing (0-1), the joined count, each stage's statistics (in stage order), span names no
    rule maps; then what older analyses may lack (None / empty there): stages named after unmapped
    server-span children, server token counts, the consistency check, missing spans, the rules,
    the clock alignment, the server metric map and the slow/normal split."""

    joined_fraction: float
    traced_fraction: float
    joined_requests: int
    by_stage: dict[str, StageStats]
    unmapped_span_names: list[NameCount]
    span_stages: list[str] = field(default_factory=list)
    server_tokens: ServerTokenTotals | None = None
    consistency: Consistency | None = None
    missing_spans: MissingSpans | None = written_when_set()
    rules: StageRulesInfo | None = written_when_set()
    clock_alignment: ClockAlignment | None = written_when_set()
    server_metrics: ServerMetrics | None = written_when_set()
    slow_split: SlowSplit | None = None

    def occurred(self) -> dict[str, StageStats]:
        """The ``by_stage`` entries of stages that occurred in at least one request (a preset's
        stage the target never has stays out of the tables and charts)."""
        return {name: s for name, s in self.by_stage.items() if s.count}
