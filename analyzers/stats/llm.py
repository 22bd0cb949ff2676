"""The ``llm`` section of the analysis: token-level metrics of OpenAI-API requests.

Pure numpy over ``requests.arrow`` (format 1.2: ``prompt_tokens``,
``output_tokens``, ``token_count_source``, ``finish_reason``,
``last_token_ns``) and the streamed chunks already joined to their requests
(:class:`~.streaming.StreamTimes`, per-token gaps and TPOT included). A row is
an *LLM request* when its ``prompt_tokens`` is set (the client counts every
OpenAI-API prompt; plain HTTP classes leave it null). A run without any has
no section (``None``).

Per scope (every LLM request, then each class), over its *successful*
requests (no error, an end; failures are counted, never timed):

- ``ttft_ms``: first content chunk − scheduled send (streamed requests);
- ``tpot_ms``: (last token − first token) / (output tokens − 1), streamed
  requests with at least 2 output tokens. Biased low by ``(k0 − 1) / (n − 1)``
  when the first chunk carries ``k0`` of the ``n`` tokens (the server's first
  chunk held tokens decoded before it arrived); ``itl_ms`` is not;
- ``itl_ms``: gaps between content-chunk *arrivals*, divided over the chunk's
  tokens: one sample per token (a chunk of ``k`` tokens after a gap ``g``
  gives ``k`` samples of ``g / k``), pooled. Its mean is the mean per-token
  gap; its percentiles are flattened where chunks carry several tokens (a
  chunk's slow token is averaged with its fast ones: :mod:`.llm_metrics`);
- ``chunk_gap_ms``: the gaps themselves, one sample per content chunk after a
  request's first (what the client waited between pieces of content), pooled;
- ``e2e_ms``: end − scheduled send;

each a :func:`~.percentiles.percentile_set` (value, 95% CI, sample count,
early-stopping claim), as ``summary.latency_ms``. ``prompt_tokens`` and
``output_tokens`` are ``{sum, mean, p50, p99}`` (nearest rank);
``tokens_per_chunk`` is ``{chunks, mean, p50, p99}`` over the content chunks
(those carrying at least one token) of the streamed requests (nearest rank;
a null ``tokens`` column reads as 1 token per chunk);
``output_tokens_per_s`` is ``aggregate`` (the scope's output tokens ÷ the
load period, s) and ``per_request`` (output tokens ÷ e2e, its low and high
percentiles: a slow stream is a *low* rate); ``token_counts_from`` counts the
requests per ``token_count_source``; ``finish_reasons`` per reason; ``goodput``
is DistServe's: the share of the scope's LLM requests without error that met
every per-request SLO (:mod:`.goodput`: TTFT, TPOT, ITL, e2e and latency).
``reasoning``, ``tool_calls``, ``images`` and ``ranking`` (only when some
request reasoned, called a tool, sent images or was a rerank / score request;
format 1.3): the figures of :mod:`.llm_kinds`.
``sessions`` (whole run only, when the run's load was multi-turn sessions;
format 1.3): per-turn TTFT, session duration and tokens per session
(:mod:`.llm_sessions`).

Over time (:func:`window_columns`): per display window, the P50/P99 of TTFT
and TPOT of the LLM requests *scheduled* in it (only where claimed, as the
latency columns: 7 samples for P50, 459 for P99) and the output tokens that
*arrived* in it (each streamed chunk at its arrival; a non-streamed response's
tokens at its end). :func:`series` gives the TTFT and TPOT series that the
latency spike test also runs on (``tailscope.analyzers.spikes.series``; the
analysis hands their ``spike_detection`` and ``spikes`` to :func:`llm_section`, then their causes
and the server's prefix cache to :func:`with_causes_and_cache`).
``points``: at most :data:`MAX_POINTS` requests (an even stride,
deterministic) with their TTFT and TPOT, for the report's chart. The section is built as
``tailscope.analysis_model.llm.Llm`` (:func:`llm_section`); the analysis encodes it once.

Cost: O(n) per scope plus an O(n log n) sort per window column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.llm import (
    ChunkTokens,
    Llm,
    LlmClass,
    LlmGoodput,
    LlmMetrics,
    OutputRate,
    Points,
    PrefixCache,
    RequestRates,
    SeriesDetection,
    TokenSpike,
    TokenStats,
)
from tailscope.analysis_model.records import Window
from tailscope.analysis_model.summary import GoodputShare
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column
from tailscope.analyzers.stats.goodput import goodput_summary
from tailscope.analyzers.stats.llm_kinds import KindArrays, kind_arrays, kinds_metrics
from tailscope.analyzers.stats.llm_metrics import chunk_gaps_ns, output_tokens_per_s
from tailscope.analyzers.stats.llm_sessions import SessionArrays, session_arrays, sessions_section
from tailscope.analyzers.stats.percentiles import nearest_rank, typed_percentile_set
from tailscope.analyzers.stats.slo import Slo
from tailscope.analyzers.stats.streaming import StreamTimes, token_gaps_ms
from tailscope.analyzers.stats.windows import claimed_quantiles, window_index

#: Requests listed in ``points`` at most (for the report's TTFT/TPOT chart).
MAX_POINTS = 2000
#: Per-request output-rate percentiles reported (low ones first: the slow streams).
RATE_PERCENTILES = (("p1", 0.01), ("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


@dataclass(frozen=True)
class LlmArrays:
    """The OpenAI-API columns of the request table, aligned with :class:`RequestArrays`."""

    is_llm: np.ndarray  # bool: prompt_tokens is set
    prompt_tokens: np.ndarray  # float64, NaN when null
    output_tokens: np.ndarray  # float64, NaN when null (embeddings, failures)
    source: np.ndarray  # object: token_count_source or None
    finish_reason: np.ndarray  # object: finish_reason or None
    kinds: KindArrays | None = None  # reasoning and tool-call columns (format 1.3), when any row has them
    sessions: SessionArrays | None = None  # multi-turn session columns (format 1.3), when any row is a turn


def llm_arrays(requests: pa.Table) -> LlmArrays | None:
    """The OpenAI-API columns, or None when no row is an LLM request (or the run predates 1.2)."""
    if "prompt_tokens" not in requests.column_names or not len(requests):
        return None
    is_llm = pc.is_valid(requests.column("prompt_tokens")).to_numpy(zero_copy_only=False)
    if not is_llm.any():
        return None

    def counts(name: str) -> np.ndarray:
        values, present = int_column(requests, name)
        return np.where(present, values.astype(np.float64), np.nan)

    return LlmArrays(
        is_llm=np.asarray(is_llm, dtype=bool),
        prompt_tokens=counts("prompt_tokens"),
        output_tokens=counts("output_tokens"),
        source=requests.column("token_count_source").to_numpy(zero_copy_only=False),
        finish_reason=requests.column("finish_reason").to_numpy(zero_copy_only=False),
        kinds=kind_arrays(requests),
        sessions=session_arrays(requests),
    )


def token_stats(values: np.ndarray) -> TokenStats:
    """Sum, mean, P50 and P99 of token counts (NaN dropped; nearest rank); Nones when empty."""
    values = values[~np.isnan(values)]
    if not len(values):
        return TokenStats(sum=0, mean=None, p50=None, p99=None)
    ordered = np.sort(values)
    return TokenStats(sum=int(values.sum()), mean=float(values.mean()),
                      p50=float(ordered[nearest_rank(len(ordered), 0.50) - 1]),
                      p99=float(ordered[nearest_rank(len(ordered), 0.99) - 1]))


def rate_stats(rates: np.ndarray) -> RequestRates:
    """Per-request output rates (tokens/s): ``n``, ``mean`` and :data:`RATE_PERCENTILES` (nearest rank)."""
    rates = rates[np.isfinite(rates)]
    ordered = np.sort(rates)
    quantiles = {name: float(ordered[nearest_rank(len(ordered), p) - 1]) if len(ordered) else None
                 for name, p in RATE_PERCENTILES}
    return RequestRates(n=int(len(rates)), mean=float(rates.mean()) if len(rates) else None, **quantiles)


def chunk_figures(times: StreamTimes, streamed: np.ndarray) -> tuple[np.ndarray, ChunkTokens]:
    """(gaps between consecutive content chunks, ms; the tokens per content chunk) of the
    requests ``streamed`` selects (module docstring)."""
    if times.chunk_owner is None or not len(times.chunk_owner):
        return np.zeros(0), ChunkTokens(chunks=0, mean=None, p50=None, p99=None)
    rows = streamed[times.chunk_owner]
    owner, t_ns, tokens = times.chunk_owner[rows], times.chunk_t_ns[rows], times.chunk_tokens[rows]
    _, gaps_ns, _ = chunk_gaps_ns(owner, t_ns, tokens)
    content = tokens[tokens > 0].astype(np.float64)
    stats = token_stats(content)
    return gaps_ns / NS_PER_MS, ChunkTokens(chunks=int(len(content)), mean=stats.mean, p50=stats.p50, p99=stats.p99)


def _counts(values: np.ndarray) -> dict[str, int]:
    names, counts = np.unique(np.asarray([v for v in values if v is not None], dtype=object).astype(str),
                              return_counts=True)
    return {str(name): int(count) for name, count in zip(names, counts)}


Scope = TypeVar("Scope", bound=LlmMetrics)


def scope_metrics(req: RequestArrays, llm: LlmArrays, times: StreamTimes, mask: np.ndarray,
                  duration_s: float, into: type[Scope] = LlmMetrics, **extra) -> Scope:
    """The metrics of the LLM requests ``mask`` selects (see the module docstring) as an ``into``
    (:class:`LlmMetrics` or a section that extends it, its other fields given as ``extra``)."""
    mask = mask & llm.is_llm
    ok = mask & req.is_ok
    streamed = ok & (times.chunks > 0)
    ttft = times.ttft_ms[streamed]
    tpot = times.tpot_ms[streamed] if times.tpot_ms is not None else np.zeros(0)
    output = llm.output_tokens[ok]
    total_output = float(np.nansum(output))
    chunk_gaps, per_chunk = chunk_figures(times, streamed)
    return into(
        requests=int(mask.sum()),
        completed=int(ok.sum()),
        errors=int((mask & req.is_error).sum()),
        streamed=int(streamed.sum()),
        ttft_ms=typed_percentile_set(ttft[~np.isnan(ttft)]),
        tpot_ms=typed_percentile_set(tpot[~np.isnan(tpot)]),
        itl_ms=typed_percentile_set(token_gaps_ms(times, streamed)),
        chunk_gap_ms=typed_percentile_set(chunk_gaps),
        tokens_per_chunk=per_chunk,
        e2e_ms=typed_percentile_set(req.latency_ms[ok]),
        prompt_tokens=token_stats(llm.prompt_tokens[ok]),
        output_tokens=token_stats(output),
        output_tokens_per_s=OutputRate(
            aggregate=total_output / duration_s if duration_s > 0 else None,
            per_request=rate_stats(output_tokens_per_s(output, req.latency_ms[ok] * NS_PER_MS)),
        ),
        token_counts_from=_counts(llm.source[mask]),
        finish_reasons=_counts(llm.finish_reason[ok]),
        **kinds_metrics(llm.kinds, req.scheduled_ns, ok, streamed, llm.output_tokens, token_stats, times.ttft_ms,
                        req.latency_ms),
        **extra,
    )


def llm_section(req: RequestArrays, llm: LlmArrays, times: StreamTimes, slos: list[Slo],
                duration_s: float, manifest: dict | None, spike_detection: dict[str, SeriesDetection],
                spikes: dict[str, list[TokenSpike]]) -> Llm:
    """The ``llm`` section (module docstring) of a run with LLM requests (``llm``:
    :func:`llm_arrays`, not None), with the TTFT and TPOT spike tests given (``spike_detection``,
    ``spikes``: :mod:`..spikes.series` over :func:`series`) and no ``prefix_cache`` (the server's
    metrics: :mod:`.llm_prefix_cache`). ``manifest``'s ``llm_classes`` (the classes' api and
    model) label the classes."""
    described = (manifest or {}).get("llm_classes") or {}
    goodput = goodput_summary(req, slos, times, duration_s, where=llm.is_llm)
    classes = {}
    for name in req.class_names(llm.is_llm):
        settings = described.get(name) or {}
        classes[name] = scope_metrics(req, llm, times, req.class_mask(name), duration_s, LlmClass,
                                      api=settings.get("api"), model=settings.get("model"),
                                      goodput=goodput.by_class.get(name) or GoodputShare(None, 0, 0))
    ttft = series(req, llm, times)["ttft"]
    return scope_metrics(
        req, llm, times, np.ones(req.n, dtype=bool), duration_s, Llm,
        sessions=sessions_section(req, llm.sessions, ttft, ~np.isnan(ttft), llm.prompt_tokens, llm.output_tokens),
        goodput=LlmGoodput(share=goodput.share, good=goodput.good, total=goodput.total, rps=goodput.rps,
                           criteria=list(goodput.criteria), definition=goodput.definition),
        classes=classes,
        points=request_points(req, llm, times),
        spike_detection=spike_detection,
        spikes=spikes,
    )


def series_detections(facts: dict[str, dict]) -> dict[str, SeriesDetection]:
    """The TTFT and TPOT spike tests' facts (analyzers/spikes/series.py ``series_spikes``, by
    metric) as :class:`SeriesDetection`, read through the type (a shape that differs from it
    raises ``AnalysisShapeError`` here, where the analysis is written)."""
    return {metric: decode(SeriesDetection, entry, f"llm.spike_detection.{metric}") for metric, entry in facts.items()}


def token_spikes(found: dict[str, list[dict]]) -> dict[str, list[TokenSpike]]:
    """The TTFT and TPOT spikes (analyzers/spikes/series.py, with causes from
    analyzers/spikes/token_causes.py; by metric) as :class:`TokenSpike`, read through the type."""
    return {metric: [decode(TokenSpike, spike, f"llm.spikes.{metric}[{i}]") for i, spike in enumerate(spikes)]
            for metric, spikes in found.items()}


def with_causes_and_cache(section: Llm, spikes: dict[str, list[dict]], prefix_cache: PrefixCache | None) -> Llm:
    """``section`` with its TTFT and TPOT spikes replaced by ``spikes`` (the same, their causes added:
    analyzers/spikes/token_causes.py) and the server's ``prefix_cache`` (:mod:`.llm_prefix_cache`)."""
    return replace(section, spikes=token_spikes(spikes), prefix_cache=prefix_cache)


def series(req: RequestArrays, llm: LlmArrays, times: StreamTimes) -> dict[str, np.ndarray]:
    """``{"ttft", "tpot"}``: per request (length n, NaN where it has none) the successful
    streamed LLM requests' TTFT and TPOT, ms."""
    keep = llm.is_llm & req.is_ok & (times.chunks > 0)
    ttft = np.where(keep, times.ttft_ms, np.nan)
    tpot = np.where(keep, times.tpot_ms, np.nan) if times.tpot_ms is not None else np.full(req.n, np.nan)
    return {"ttft": ttft, "tpot": tpot}


def request_points(req: RequestArrays, llm: LlmArrays, times: StreamTimes) -> Points:
    """The scheduled send, TTFT, TPOT (None where undefined) and class of at most :data:`MAX_POINTS`
    successful streamed LLM requests (every k-th by scheduled time, k the smallest stride that fits)."""
    values = series(req, llm, times)
    rows = np.flatnonzero(~np.isnan(values["ttft"]))
    rows = rows[np.argsort(req.scheduled_ns[rows], kind="stable")]
    if len(rows) > MAX_POINTS:
        rows = rows[:: -(-len(rows) // MAX_POINTS)]
    return Points(scheduled_ns=req.scheduled_ns[rows].tolist(),
                  ttft_ms=_none_for_nan(values["ttft"][rows]),
                  tpot_ms=_none_for_nan(values["tpot"][rows]),
                  cls=[str(c) for c in req.cls[rows]])


def _none_for_nan(values: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else v for v in values.tolist()]


def window_columns(req: RequestArrays, llm: LlmArrays, times: StreamTimes,
                   windows: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Per window of the window table: ``llm_requests`` (LLM requests scheduled in it),
    ``ttft_p50_ms``, ``ttft_p99_ms``, ``tpot_p50_ms``, ``tpot_p99_ms`` (NaN where not claimed)
    and ``output_tokens`` (tokens that arrived in it); None without windows."""
    if not len(windows["start_ns"]):
        return None
    origin = int(windows["start_ns"][0])
    window_ns = int(windows["end_ns"][0] - windows["start_ns"][0])
    m = len(windows["start_ns"])

    def index_of(times_ns: np.ndarray) -> np.ndarray:
        return window_index(times_ns, origin, window_ns).clip(0, m - 1)

    out = {"llm_requests": np.bincount(index_of(req.scheduled_ns[llm.is_llm]), minlength=m)}
    for metric, values in series(req, llm, times).items():
        has = ~np.isnan(values)
        index = index_of(req.scheduled_ns[has])
        order = np.lexsort((values[has], index))
        counts = np.bincount(index, minlength=m)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        quantiles = claimed_quantiles(values[has][order], starts, counts)
        out[f"{metric}_p50_ms"] = quantiles["p50_ms"]
        out[f"{metric}_p99_ms"] = quantiles["p99_ms"]
    ok_llm = llm.is_llm & req.is_ok
    tokens = np.zeros(m)
    if times.chunk_owner is not None and len(times.chunk_owner):
        from_chunks = ok_llm[times.chunk_owner]
        tokens += np.bincount(index_of(times.chunk_t_ns[from_chunks]), weights=times.chunk_tokens[from_chunks],
                              minlength=m)
    whole = ok_llm & (times.chunks == 0) & ~np.isnan(llm.output_tokens)
    tokens += np.bincount(index_of(req.end_ns[whole]), weights=llm.output_tokens[whole], minlength=m)
    out["output_tokens"] = tokens.astype(np.int64)
    return out


def add_window_columns(records: list[Window], columns: dict[str, np.ndarray] | None, window_s: float) -> list[Window]:
    """``records`` (:func:`~.windows.windows_as_records`) with the LLM columns added and
    ``output_tokens_per_s`` (the window's arrived tokens ÷ its length); unchanged without columns."""
    if columns is None:
        return records
    out = []
    for i, record in enumerate(records):
        extra = {name: (None if np.isnan(float(values[i])) else float(values[i]))
                 for name, values in columns.items() if name.endswith("_ms")}
        tokens = int(columns["output_tokens"][i])
        out.append(replace(record, llm_requests=int(columns["llm_requests"][i]), **extra, output_tokens=tokens,
                           output_tokens_per_s=tokens / window_s if window_s > 0 else None))
    return out


