"""Token-level latency metrics of LLM requests, from the run directory's records.

Pure functions over numbers or numpy arrays (the analysis layer's; the load
generator records raw times and counts and derives nothing). Inputs are what ``requests.arrow`` and ``chunks.arrow``
hold (epoch ns int64, token counts); outputs are in ns unless a name says
otherwise (``_ms``, ``_per_s``). Definitions (as in vLLM's benchmarks and
DistServe, but measured from the *scheduled* send time):

- **TTFT** = first content chunk − scheduled send (``first_byte_ns −
  scheduled_ns`` in an OpenAI-API class's record).
- **E2E latency** = end − scheduled send (``end_ns − scheduled_ns``).
- **TPOT** = (last token − first token) / (output tokens − 1), i.e.
  (latency − TTFT) / (output tokens − 1) with the latency taken to the last
  token (``last_token_ns``; the usage chunk and ``[DONE]`` after it do not
  count). Undefined (NaN / None) with fewer than 2 output tokens.
- **ITL** is measured from chunk *arrivals*, the only times the client sees:
  a chunk of ``k`` tokens arriving ``g`` ns after the previous content chunk
  gives ``k`` samples of ``g / k`` (the chunk's gap divided evenly over its
  tokens). The first chunk gives none (its tokens are the TTFT's), so a
  request gives ``output_tokens − tokens of its first chunk`` samples, and
  their mean is ``(last − first) / (output_tokens − first chunk's tokens)``.
- **Chunk gap** (:func:`chunk_gaps_ns`): the gap itself, one sample per
  content chunk after the first, with the chunk's token count beside it.
- What ITL can and cannot say: its *mean* is the mean per-token gap whatever
  the chunking. Its *percentiles* are not the server's per-token gaps when
  chunks carry several tokens: the tokens of a chunk did not arrive ``g / k``
  apart (the server decoded them at its own pace, then sent them together),
  and dividing evens out a chunk's slow token with its fast ones, so a tail
  is flattened (against the reference LLM server at 1,000 streams: the ITL
  P99 1.95 ms below the server's own per-token P99). The chunk-gap tail is
  what the client saw waiting between content; each ITL sample is at most its
  chunk's gap, and with one token per chunk the two are the same samples.
- TPOT bias: when the first chunk carries ``k0 > 1`` tokens, TPOT is low by a
  factor ``(n − k0) / (n − 1)`` (the first chunk's extra tokens are counted as
  decoded after it though they came with it); the mean per-token ITL,
  ``(last − first) / (n − k0)``, is not (against the reference LLM server with
  3 tokens per chunk: TPOT −11 %, mean ITL within 0.01 ms of the server's).
- A ``chunks.arrow`` row whose ``tokens`` is null (runs before format 1.2,
  and plain ``stream: true`` classes) counts as 1 token.

Cost: O(n) in the chunks or requests given; memory: the outputs.
"""

from __future__ import annotations

import numpy as np

from tailscope.support.units import NS_PER_S


def ttft_ns(scheduled_ns: int, first_token_ns: int | None) -> int | None:
    """Time to first token from the scheduled send, ns (None without a first token)."""
    if first_token_ns is None:
        return None
    return int(first_token_ns) - int(scheduled_ns)


def tpot_ns(first_token_ns: int | None, last_token_ns: int | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first, ns: (last − first) / (output_tokens − 1);
    None with fewer than 2 output tokens or a missing time."""
    if first_token_ns is None or last_token_ns is None or output_tokens is None or output_tokens < 2:
        return None
    return (int(last_token_ns) - int(first_token_ns)) / (int(output_tokens) - 1)


def chunk_tokens(tokens) -> np.ndarray:
    """A ``chunks.arrow`` ``tokens`` column (list, numpy or Arrow; nulls allowed)
    as int64, each null read as 1 token."""
    if isinstance(tokens, np.ndarray) and tokens.dtype.kind in "iu":
        return tokens.astype(np.int64)
    if hasattr(tokens, "to_numpy") and hasattr(tokens, "null_count"):  # an Arrow array or chunked array
        import pyarrow.compute as pc

        return np.asarray(pc.fill_null(tokens, 1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.asarray([1 if t is None else t for t in tokens], dtype=np.int64)


def itl_samples_ns(times_ns, tokens=None) -> np.ndarray:
    """Per-token inter-token latencies of one response, ns (float64): for each
    chunk after the first, ``tokens[i]`` samples of ``(times[i] − times[i−1]) /
    tokens[i]``. ``tokens`` None: one token per chunk. Chunks with 0 tokens
    give no samples (their gap goes to the next chunk that has tokens)."""
    times = np.asarray(times_ns, dtype=np.int64)
    counts = np.ones(len(times), dtype=np.int64) if tokens is None else chunk_tokens(tokens)
    if len(times) == 0:
        return np.empty(0, dtype=np.float64)
    keep = counts > 0
    keep[:1] = True  # the first chunk is the reference, whatever it holds
    times, counts = times[keep], counts[keep]
    if len(times) < 2:
        return np.empty(0, dtype=np.float64)
    gaps = np.diff(times).astype(np.float64)
    k = counts[1:]
    return np.repeat(gaps / k, k)


def itl_samples_by_request_ns(trace_ids, index, times_ns, tokens=None) -> np.ndarray:
    """Per-token ITL samples of many responses at once, ns (float64), from the
    columns of ``chunks.arrow`` (``trace_id``, ``index``, ``t_ns``, ``tokens``;
    any order). Equals concatenating :func:`itl_samples_ns` over the requests.
    O(n log n) for the sort."""
    trace = np.asarray(trace_ids, dtype=object)
    order = np.lexsort((np.asarray(index, dtype=np.int64), trace))
    times = np.asarray(times_ns, dtype=np.int64)[order]
    counts = np.ones(len(times), dtype=np.int64) if tokens is None else chunk_tokens(tokens)[order]
    return token_gaps_ns(trace[order], times, counts)[1]


def chunk_gaps_ns(owner, times_ns, tokens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaps between consecutive content chunks of chunks already grouped by request
    (``owner``: any comparable ids, equal ones adjacent) and in arrival order within a
    request: ``(owner, gap ns int64, tokens int64)``, one entry per chunk with tokens
    after its request's first chunk: the time since the previous kept chunk of the
    same request and the tokens it carried. ``tokens``: int64 per chunk (see
    :func:`chunk_tokens`). A chunk with 0 tokens that is not its request's first is
    skipped (its gap goes to the next chunk with tokens); the first chunk is the
    reference whatever it holds. O(chunks)."""
    owner = np.asarray(owner)
    times = np.asarray(times_ns, dtype=np.int64)
    counts = np.asarray(tokens, dtype=np.int64)
    if len(times) < 2:
        return owner[:0], np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    first = np.ones(len(owner), dtype=bool)
    first[1:] = owner[1:] != owner[:-1]
    keep = (counts > 0) | first  # drop token-less chunks that are not the first of their request
    owner, times, counts, first = owner[keep], times[keep], counts[keep], first[keep]
    same = ~first[1:]
    return owner[1:][same], np.diff(times)[same], counts[1:][same]


def token_gaps_ns(owner, times_ns, tokens) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ITL samples of chunks already grouped by request (``owner``: any
    comparable ids, equal ones adjacent) and in arrival order within a request:
    ``(owner of each sample, sample ns float64)``, the samples of one request
    adjacent and in chunk order: each :func:`chunk_gaps_ns` gap ``g`` of a chunk of
    ``k`` tokens gives ``k`` samples of ``g / k``. O(chunks + samples)."""
    gap_owner, gaps, k = chunk_gaps_ns(owner, times_ns, tokens)
    return np.repeat(gap_owner, k), np.repeat(gaps.astype(np.float64) / k, k)


def tpot_ns_array(first_token_ns, last_token_ns, output_tokens) -> np.ndarray:
    """:func:`tpot_ns` over arrays (float64 ns; NaN where undefined: a missing
    time, fewer than 2 output tokens)."""
    out = _float(output_tokens)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = _difference(last_token_ns, first_token_ns) / (out - 1)
    tpot[~(out >= 2)] = np.nan
    return tpot


def ttft_ns_array(scheduled_ns, first_token_ns) -> np.ndarray:
    """:func:`ttft_ns` over arrays (float64 ns; NaN without a first token)."""
    return _difference(first_token_ns, scheduled_ns)


def output_tokens_per_s(output_tokens, latency_ns) -> np.ndarray:
    """Per-request output rate, tokens/s: output tokens / (end − scheduled)
    (float64; NaN where a value is missing or the latency is not > 0)."""
    out = _float(output_tokens)
    latency = _float(latency_ns)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = out * NS_PER_S / latency
    rate[~(latency > 0)] = np.nan
    return rate


def aggregate_output_tokens_per_s(output_tokens, start_ns: int, end_ns: int) -> float:
    """Output tokens of all requests (nulls as 0) over a span of time, tokens/s
    (0.0 when the span is not > 0)."""
    span = int(end_ns) - int(start_ns)
    if span <= 0:
        return 0.0
    total = float(np.nansum(_float(output_tokens)))
    return total * NS_PER_S / span


def _difference(later, earlier) -> np.ndarray:
    """``later − earlier`` of two epoch-ns columns, float64 ns with NaN where either is
    missing. Subtracted as int64 first: an epoch ns as float64 is off by up to 128 ns."""
    late, late_ok = _int64(later)
    early, early_ok = _int64(earlier)
    out = (late - early).astype(np.float64)
    out[~(late_ok & early_ok)] = np.nan
    return out


def _int64(values) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 for missing, present mask) of integers (None, NaN or Arrow nulls allowed)."""
    if hasattr(values, "to_numpy") and hasattr(values, "null_count"):  # an Arrow array or chunked array
        import pyarrow.compute as pc

        present = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False), dtype=np.int64), present
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64), np.ones(len(values), dtype=bool)
    items = np.atleast_1d(np.asarray(values, dtype=object))
    present = np.array([v is not None and v == v for v in items], dtype=bool)
    return np.array([int(v) if ok else 0 for v, ok in zip(items, present)], dtype=np.int64), present


def _float(values) -> np.ndarray:
    """Numbers (None or Arrow nulls allowed) as float64 with NaN for missing (counts and
    durations; epoch times go through :func:`_difference`)."""
    if hasattr(values, "to_numpy") and hasattr(values, "null_count"):
        import pyarrow as pa
        import pyarrow.compute as pc

        values = pc.cast(values, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=np.float64)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        return values.astype(np.float64)
    return np.asarray([np.nan if v is None else v for v in np.atleast_1d(np.asarray(values, dtype=object))],
                      dtype=np.float64)
