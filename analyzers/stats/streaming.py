"""Streaming responses: time to first token, inter-token latency, tokens/s.

Pure numpy over ``requests.arrow`` and ``chunks.arrow`` (one row per chunk of
a streamed response; docs/run-format.md). For the successful requests of each
class that received at least one chunk:

- **TTFT** = first chunk − *scheduled* send, ms: like latency, measured from
  the intended send time, so a stalled generator or target cannot hide it;
- **ITL** (inter-token latency), one sample per token, ms, pooled over the
  class's responses: a chunk of ``k`` tokens arriving ``g`` after the previous
  chunk gives ``k`` samples of ``g / k`` (:func:`~.llm_metrics.token_gaps_ns`;
  a chunk's ``tokens`` is null, i.e. 1, for plain ``stream: true`` classes, so
  there every gap between consecutive chunks is one sample);
- **tokens/s**: ``tokens_per_s`` = tokens ÷ load duration (output rate), and
  per response ``(tokens − first chunk's tokens) / (last − first chunk)``
  (decode speed; ``decode_tokens_per_s_p50`` and ``_mean``);
- **TPOT** (OpenAI-API classes, records with ``last_token_ns``):
  ``(last token − first token) / (output tokens − 1)`` per request
  (:func:`~.llm_metrics.tpot_ns_array`), for goodput and the ``llm`` section.

Each percentile carries its CI and early-stopping claim
(:func:`~.percentiles.percentile_set`). :func:`StreamTimes.request_itl_quantile`
gives each request's own ITL quantile for goodput. A run without a chunks file
(e.g. written by an older harness) still gets TTFT and chunk counts; its ITL
is then null. Cost: one O(c log c) sort of the c chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.streaming import Streaming, StreamMetrics
from tailscope.analyzers.inputs.records import NS_PER_MS, NS_PER_S, RequestArrays, int_column
from tailscope.analyzers.stats.llm_metrics import chunk_tokens, token_gaps_ns, tpot_ns_array
from tailscope.analyzers.stats.percentiles import grouped_quantile, typed_percentile_set
from tailscope.rundir import read_stream
from tailscope.rundir import schema as fmt


@dataclass(frozen=True)
class StreamTimes:
    """Per-request stream facts aligned with the request arrays (length n)."""

    ttft_ms: np.ndarray  # float64, NaN where no chunk arrived
    chunks: np.ndarray  # int64 chunk count (0: not streamed)
    gap_sorted_ms: np.ndarray  # all per-token gaps, sorted by (request, gap)
    gap_starts: np.ndarray  # per request: first index into gap_sorted_ms
    gap_counts: np.ndarray  # per request: number of per-token gaps
    decode_rate: np.ndarray  # tokens/s per request, NaN without a token after the first chunk
    has_chunk_file: bool
    #: int64 tokens its chunks carried (null ``tokens``: 1 per chunk; no chunk rows: the chunk count)
    tokens: np.ndarray | None = None
    #: float64 TPOT ms of streamed OpenAI-API requests (NaN: not one, or < 2 output tokens)
    tpot_ms: np.ndarray | None = None
    #: The chunk rows joined to a request, sorted by (request, arrival): the request's index,
    #: the arrival (epoch ns) and the tokens carried (int64, null read as 1).
    chunk_owner: np.ndarray | None = None
    chunk_t_ns: np.ndarray | None = None
    chunk_tokens: np.ndarray | None = None

    def request_itl_quantile(self, q: float) -> np.ndarray:
        """Each request's own ITL q-quantile, ms (NaN with no gap)."""
        return grouped_quantile(self.gap_sorted_ms, self.gap_starts, self.gap_counts, q)


def read_chunks(run_path: str) -> tuple[pa.Table, bool]:
    """(chunks table, whether any chunks file exists) of a run directory."""
    reads = [read_stream(path, fmt.CHUNKS_SCHEMA) for path in fmt.table_files(run_path, fmt.CHUNKS)]
    if not reads:
        return fmt.CHUNKS_SCHEMA.empty_table(), False
    return pa.concat_tables([r.table for r in reads]), True


def stream_times(req: RequestArrays, requests: pa.Table, chunks: pa.Table, has_file: bool) -> StreamTimes:
    """Join the chunk rows to their requests (by trace id) and derive the per-request facts."""
    first_byte, has_first = int_column(requests, "first_byte_ns")
    counts = pc.fill_null(requests.column("chunks"), 0).to_numpy().astype(np.int64)
    streamed = (counts > 0) & has_first & req.is_ok
    ttft = np.full(req.n, np.nan)
    ttft[streamed] = (first_byte[streamed] - req.scheduled_ns[streamed]) / NS_PER_MS
    index = np.full(len(chunks), -1, dtype=np.int64)
    if len(chunks) and req.n:
        found = pc.index_in(chunks.column("trace_id"), value_set=requests.column("trace_id"))
        index = pc.fill_null(found, -1).to_numpy().astype(np.int64)
    keep = index >= 0
    owner = index[keep]
    t_ns, _ = int_column(chunks, "t_ns")
    order = np.lexsort((t_ns[keep], owner))
    owner, times = owner[order], t_ns[keep][order]
    tokens = chunk_tokens(chunks.column("tokens"))[keep][order] if len(owner) else np.zeros(0, np.int64)
    same = owner[1:] == owner[:-1] if len(owner) else np.zeros(0, bool)
    gap_owner, gaps_ns = token_gaps_ns(owner, times, tokens)
    gaps = gaps_ns / NS_PER_MS
    gap_order = np.lexsort((gaps, gap_owner))
    gap_counts = np.bincount(gap_owner, minlength=req.n)[: req.n]
    gap_counts = gap_counts * streamed  # failed or unstreamed requests do not count
    gaps_sorted = gaps[gap_order]
    valid_gap = streamed[gap_owner[gap_order]] if len(gap_owner) else np.zeros(0, bool)
    gaps_sorted = gaps_sorted[valid_gap]
    gap_starts = np.concatenate(([0], np.cumsum(gap_counts)[:-1])).astype(np.int64)
    first = np.full(req.n, np.nan)
    last = np.full(req.n, np.nan)
    total = np.where(streamed, counts, 0).astype(np.int64)
    after_first = np.zeros(req.n, dtype=np.int64)
    if len(owner):
        boundaries = np.flatnonzero(np.r_[True, ~same])
        ends = np.r_[boundaries[1:] - 1, len(owner) - 1]
        first[owner[boundaries]] = times[boundaries]
        last[owner[ends]] = times[ends]
        carried = np.bincount(owner, weights=tokens, minlength=req.n)[: req.n].astype(np.int64)
        has_rows = np.bincount(owner, minlength=req.n)[: req.n] > 0
        total = np.where(streamed & has_rows, carried, total)
        after_first[owner[boundaries]] = carried[owner[boundaries]] - tokens[boundaries]
    with np.errstate(invalid="ignore", divide="ignore"):
        span_s = (last - first) / NS_PER_S
        decode = np.where(streamed & (after_first > 0) & (span_s > 0), after_first / span_s, np.nan)
    return StreamTimes(ttft, np.where(streamed, counts, 0), gaps_sorted, gap_starts, gap_counts, decode,
                       has_file, total, _tpot_ms(requests, streamed), owner, times, tokens)


def _tpot_ms(requests: pa.Table, streamed: np.ndarray) -> np.ndarray:
    """Per-request TPOT, ms, of the streamed requests whose record has ``last_token_ns``
    (OpenAI-API classes, format 1.2); NaN elsewhere."""
    if "last_token_ns" not in requests.column_names or not len(requests):
        return np.full(len(streamed), np.nan)
    tpot = tpot_ns_array(requests.column("first_byte_ns"), requests.column("last_token_ns"),
                         requests.column("output_tokens")) / NS_PER_MS
    tpot[~streamed] = np.nan
    return tpot


def _class_metrics(times: StreamTimes, mask: np.ndarray, duration_s: float) -> StreamMetrics:
    streamed = mask & (times.chunks > 0)
    gaps = token_gaps_ms(times, streamed)
    decode = times.decode_rate[streamed]
    decode = decode[np.isfinite(decode)]
    total_chunks = int(times.chunks[streamed].sum())
    total_tokens = int((times.tokens if times.tokens is not None else times.chunks)[streamed].sum())
    return StreamMetrics(
        requests=int(streamed.sum()),
        chunks=total_chunks,
        chunks_per_request=float(total_chunks / streamed.sum()) if streamed.any() else None,
        ttft_ms=typed_percentile_set(times.ttft_ms[streamed]),
        itl_ms=typed_percentile_set(gaps) if times.has_chunk_file else None,
        tokens_per_s=total_tokens / duration_s if duration_s > 0 else None,
        decode_tokens_per_s_p50=float(np.median(decode)) if len(decode) else None,
        decode_tokens_per_s_mean=float(decode.mean()) if len(decode) else None,
    )


def token_gaps_ms(times: StreamTimes, mask: np.ndarray) -> np.ndarray:
    """All per-token gaps (ms) of the requests selected by ``mask``."""
    selected = np.flatnonzero(mask & (times.gap_counts > 0))
    if not len(selected):
        return np.zeros(0)
    pieces = [times.gap_sorted_ms[s:s + c] for s, c in zip(times.gap_starts[selected], times.gap_counts[selected])]
    return np.concatenate(pieces)


def streaming_section(req: RequestArrays, times: StreamTimes, duration_s: float) -> Streaming:
    """The metrics over every streamed request (top level), ``classes`` (per class
    that streamed) and ``itl_available``; only the last two when nothing streamed."""
    names = req.class_names(times.chunks > 0)
    classes = {name: _class_metrics(times, req.class_mask(name), duration_s) for name in names}
    if not names:
        return Streaming(classes=classes, itl_available=times.has_chunk_file)
    overall = _class_metrics(times, np.ones(req.n, bool), duration_s)
    return Streaming(**{f.name: getattr(overall, f.name) for f in fields(overall)},
                     classes=classes, itl_available=times.has_chunk_file)
