"""The ``llm`` section: token-level metrics of a run's OpenAI-API requests.

``properties.llm`` of analyzers/analysis.schema.json with its ``$defs`` ``llm_metrics``,
``token_stats`` and ``llm_goodput``; None (JSON null) in a run without OpenAI-API requests.
Built by analyzers/stats/llm.py (the metrics, per class, ``points``), llm_kinds.py
(``reasoning``, ``tool_calls``, ``images``, ``ranking``), llm_sessions.py (``sessions``) and
llm_prefix_cache.py (``prefix_cache``); its spike tests and their causes are added where the
analysis is assembled (analyzers/analysis.py). Drawn by reports/llm_view.py and the views it
calls (kinds_view.py, sessions_view.py, prefix_cache_view.py). Times are ms unless a name says
``_ns`` (epoch ns) or ``_s``; token counts are the client's.

Fields with a default are the ones older analyses lack, read as None: ``prefix_cache``, the
parts written only when they apply (``sessions``, ``reasoning``, ``tool_calls``, ``images``,
``ranking``), ``chunk_gap_ms`` and ``tokens_per_chunk``, a token spike's ``causes`` and
``decomposition``, and the spike tests' later facts (``baseline_samples``, …).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tailscope.analysis_model.codec import written_when_set
from tailscope.analysis_model.percentiles import PercentileSet
from tailscope.analysis_model.spikes import CauseFinding, Decomposition
from tailscope.analysis_model.summary import GoodputShare

#: What the OpenAI-API class was configured as (``scenario``'s class ``api``; None: not stated).
Api = Literal["openai-chat", "openai-completions", "openai-embeddings", "rerank", "score"]


@dataclass(frozen=True, slots=True)
class TokenStats:
    """``$defs/token_stats``: the sum, mean, P50 and P99 (nearest rank) of a count per request
    (tokens, images, documents, turns); ``sum`` 0 and the rest None without any value."""

    sum: int
    mean: float | None
    p50: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class ChunkTokens:
    """Tokens per content chunk (chunks with at least one token) of the completed streamed
    requests: how many such ``chunks``, and the mean, P50 and P99 (nearest rank; None without)."""

    chunks: int
    mean: float | None
    p50: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class RequestRates:
    """Per-request output rate, tokens/s (output tokens ÷ end-to-end latency) over ``n`` completed
    requests: the mean and the P1…P99 (nearest rank; a slow stream is a *low* rate); None without."""

    n: int
    mean: float | None
    p1: float | None
    p10: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class OutputRate:
    """Output tokens/s: ``aggregate`` (the scope's output tokens ÷ the load period; None for an
    empty period) and ``per_request`` (:class:`RequestRates`)."""

    aggregate: float | None
    per_request: RequestRates


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The completed requests that reasoned (``requests`` ≥ 1): time to the first reasoning and the
    first answer token (``ttfr_ms``, ``ttfa_ms``, from the scheduled send, streamed requests), TPOT
    of each kind (ms per token after the kind's first), their token counts and ``reasoning_share``
    (reasoning ÷ output tokens of the scope, 0–1; None without output tokens)."""

    requests: int
    ttfr_ms: PercentileSet
    ttfa_ms: PercentileSet
    reasoning_tpot_ms: PercentileSet
    answer_tpot_ms: PercentileSet
    reasoning_tokens: TokenStats
    answer_tokens: TokenStats
    reasoning_share: float | None


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """The completed requests that called a tool (``requests`` ≥ 1): tool calls per request and the
    time until the last call was complete (ms from the scheduled send, streamed requests)."""

    requests: int
    calls: TokenStats
    time_to_tool_call_ms: PercentileSet


@dataclass(frozen=True, slots=True)
class Images:
    """The completed requests that sent images (``requests`` ≥ 1): images, pixels and request bytes
    per request, and their TTFT (ms, streamed requests)."""

    requests: int
    images: TokenStats
    pixels: TokenStats
    request_bytes: TokenStats
    ttft_ms: PercentileSet


@dataclass(frozen=True, slots=True)
class Ranking:
    """The completed rerank / score requests (``requests`` ≥ 1): documents and document tokens per
    request, end-to-end latency and latency per document (ms)."""

    requests: int
    documents: TokenStats
    document_tokens: TokenStats
    e2e_ms: PercentileSet
    per_document_ms: PercentileSet


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmMetrics:
    """``$defs/llm_metrics``: the metrics of a scope of LLM requests (every one, or one class).
    Counts of requests, those ``completed`` (no error, an end), ``errors`` and ``streamed``; the
    percentile sets (ms, over the completed requests) of TTFT, TPOT, per-token ITL, the chunk gap
    and e2e; token counts, output rates, requests per token-count source and per finish reason; and
    the output kinds, each present only when some completed request had it (format 1.3)."""

    requests: int
    completed: int
    errors: int
    streamed: int
    ttft_ms: PercentileSet
    tpot_ms: PercentileSet
    itl_ms: PercentileSet
    chunk_gap_ms: PercentileSet | None = written_when_set()
    tokens_per_chunk: ChunkTokens | None = written_when_set()
    e2e_ms: PercentileSet
    prompt_tokens: TokenStats
    output_tokens: TokenStats
    output_tokens_per_s: OutputRate
    token_counts_from: dict[str, int]
    finish_reasons: dict[str, int]
    reasoning: Reasoning | None = written_when_set()
    tool_calls: ToolCalls | None = written_when_set()
    images: Images | None = written_when_set()
    ranking: Ranking | None = written_when_set()


@dataclass(frozen=True, kw_only=True)
class _ClassLabels:
    """The class's ``api`` and ``model`` from the manifest's ``llm_classes`` (None: not stated).
    A base of :class:`LlmClass` only so that they come first in its JSON, as written."""

    api: Api | None
    model: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmClass(LlmMetrics, _ClassLabels):
    """One request class's entry of ``llm.classes``: its labels, its :class:`LlmMetrics` and its
    DistServe goodput (``$defs/goodput_share``)."""

    goodput: GoodputShare


@dataclass(frozen=True, slots=True)
class LlmGoodput:
    """``$defs/llm_goodput``: DistServe's goodput of the LLM requests: ``good`` of ``total``
    (``share`` 0–1, None without requests), ``rps`` good requests per second of load (None for an
    empty period), the per-request SLO texts applied (``criteria``) and the ``definition`` in words."""

    share: float | None
    good: int
    total: int
    rps: float | None
    criteria: list[str]
    definition: str


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn index of ``sessions.by_turn`` (``label`` ``"20+"`` on the row that pools the later
    turns): turns sent, those completed, their TTFT (ms) and mean prompt tokens (None without)."""

    turn: int
    label: str
    requests: int
    completed: int
    ttft_ms: PercentileSet
    prompt_tokens_mean: float | None


@dataclass(frozen=True, slots=True)
class Sessions:
    """Multi-turn sessions (analyzers/stats/llm_sessions.py): distinct ``sessions``, those
    ``complete``, ``failed`` and ``cut``; TTFT by turn, of turn 1 and of the later turns pooled
    (ms), ``ttft_later_vs_first`` (later P50 ÷ turn-1 P50; None unless both are claimed); over the
    complete sessions their duration (ms) and turns, prompt and output tokens per session."""

    sessions: int
    complete: int
    failed: int
    cut: int
    by_turn: list[TurnRow]
    ttft_first_turn_ms: PercentileSet
    ttft_later_turns_ms: PercentileSet
    ttft_later_vs_first: float | None
    duration_ms: PercentileSet
    turns: TokenStats
    prompt_tokens: TokenStats
    output_tokens: TokenStats


@dataclass(frozen=True, slots=True)
class CacheMetrics:
    """The server metrics a counters hit rate was read from: prompt tokens looked up, and found."""

    queries: str
    hits: str


@dataclass(frozen=True, slots=True)
class PrefixCacheCounters:
    """The prefix-cache hit rate from the server's counters: ``hit_tokens`` ÷ ``query_tokens``
    (0–1; None when no prompt token was looked up), summed over ``series`` label sets between the
    first and the last reading (epoch ns); ``covers_load``: whether those readings bracket the load
    period (None without one)."""

    source: Literal["counters"]
    hit_rate: float | None
    hit_tokens: int
    query_tokens: int
    metrics: CacheMetrics
    series: int
    first_reading_ns: int
    last_reading_ns: int
    covers_load: bool | None


@dataclass(frozen=True, slots=True)
class PrefixCacheGauge:
    """The prefix-cache hit rate as the mean (0–1) of the server's own gauge ``metric`` over the
    load period (``readings`` reading times)."""

    source: Literal["gauge"]
    hit_rate: float
    metric: str
    readings: int


#: ``llm.prefix_cache``: from the counters or the gauge; None when the server exposes neither.
PrefixCache = PrefixCacheCounters | PrefixCacheGauge


@dataclass(frozen=True, slots=True)
class Points:
    """At most 2,000 successful streamed LLM requests (an even stride by scheduled time), as
    columns: scheduled send (epoch ns), TTFT and TPOT (ms; TPOT None with fewer than 2 tokens) and
    request class."""

    scheduled_ns: list[int]
    ttft_ms: list[float | None]
    tpot_ms: list[float | None]
    cls: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesDetection:
    """How the latency spike test ran on one series (TTFT or TPOT): ``performed`` or not (too few
    requests), its window (s), τ (``baseline_p99_ms``) and the quiet samples' quantile it is (None
    when not performed), ``tests`` windows tested, ``warmup_s`` left out; the rest as the top-level
    ``spike_detection``'s (analyzers/spikes/detection.py ``detection_facts``), absent in older
    analyses."""

    performed: bool
    detection_window_s: float | None
    baseline_p99_ms: float | None
    baseline_quantile: float | None = None
    baseline_samples: int | None = written_when_set()
    expected_slow_share: float | None = written_when_set()
    alpha: float | None = written_when_set()
    tests: int
    iterations: int | None = written_when_set()
    warmup_s: float
    too_short: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenSpike:
    """A TTFT or TPOT spike (analyzers/spikes/series.py): its window (epoch ns), the P99 in it
    (ms; ``p99_claimed``: enough samples to claim it), τ and its quantile, the excess (ms), the
    requests in it and those above τ (``slow_share`` 0–1); its stage ``decomposition`` and
    ``causes`` (``$defs/decomposition``, ``$defs/finding``; analyzers/spikes/token_causes.py),
    absent in analyses before 1.0."""

    start_ns: int
    end_ns: int
    p99_ms: float
    p99_claimed: bool
    baseline_p99_ms: float
    baseline_quantile: float | None = None
    excess_ms: float
    requests: int
    slow_requests: int
    slow_share: float
    decomposition: Decomposition | None = written_when_set()
    causes: list[CauseFinding] | None = written_when_set()

    @property
    def top_cause(self) -> CauseFinding | None:
        """The highest-ranked cause (None: an analysis before token spikes had causes)."""
        return self.causes[0] if self.causes else None

    @property
    def unexplained(self) -> bool:
        """No known cause explains the spike: its top cause is ``unexplained``, or it has none."""
        return not self.causes or self.causes[0].kind == "unexplained"

    def judged_p99(self) -> tuple[float, float]:
        """(P99, baseline) in ms the spike was judged on (as a latency spike's ``judged_p99``)."""
        return self.p99_ms, self.baseline_p99_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class Llm(LlmMetrics):
    """The ``llm`` section: the :class:`LlmMetrics` of every LLM request, ``sessions`` (only when
    the load was multi-turn sessions), goodput, the metrics per class, the charted ``points``, the
    TTFT and TPOT spike tests and spikes (keyed ``"ttft"``, ``"tpot"``) and the server's prefix
    cache (None when it exposes none, and in analyses before format 1.3)."""

    sessions: Sessions | None = written_when_set()
    goodput: LlmGoodput
    classes: dict[str, LlmClass]
    points: Points
    spike_detection: dict[str, SeriesDetection]
    spikes: dict[str, list[TokenSpike]]
    prefix_cache: PrefixCache | None = None
