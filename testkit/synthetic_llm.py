"""Seeded synthetic runs of OpenAI-API (LLM) requests with known token timings: the ``llm`` analysis's fixtures.

``write_synthetic_llm_run`` writes ``requests.arrow`` (format 1.2 token
columns), ``chunks.arrow`` (several tokens per chunk) and a manifest with the
scenario's SLOs and ``llm_classes``, as the harness would for streamed
``openai-chat`` classes. Arrivals are Poisson at ``rate`` requests/s. Each
request ``i`` has, by construction:

- a TTFT of ``ttft_ms[i]`` (lognormal around ``ttft_median_ms``; plus
  ``extra_ms`` when scheduled inside the ``ttft_spike``), so its first
  content chunk arrives at ``scheduled + ttft``;
- ``n[i]`` output tokens (uniform in ``output_tokens``) decoded one every
  ``decode_ms[i]`` (lognormal around ``decode_median_ms``), sent
  ``tokens_per_chunk`` to a chunk (the last chunk holds the rest): chunk
  ``j`` arrives when its last token is decoded, so every per-token ITL
  sample of the request is exactly ``decode_ms[i]`` and its TPOT is
  ``(n − k0) · decode_ms / (n − 1)`` (``k0``: the first chunk's tokens);
- an end ``END_AFTER_LAST_MS`` after its last token (the usage chunk);
- with probability ``error_share``, an HTTP 500 instead (no chunk, no output).

The returned dict holds that ground truth per request (``ttft_ms``,
``tpot_ms``, ``decode_ms``, ``latency_ms``, ``output_tokens``,
``prompt_tokens``, ``ok``, ``cls``) so tests compute expected values without
the analyzers' code.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from tailscope.rundir import schema as fmt
from tailscope.rundir.manifest import RunWriter
from tailscope.support.units import NS_PER_MS, NS_PER_S
from tailscope.testkit.synthetic import StreamFile, constant_strings, hex_ids

#: Time from the last token to the response's end (the usage chunk and [DONE]), ms.
END_AFTER_LAST_MS = 1.0
MODEL = "synthetic-llm"


def write_synthetic_llm_run(path, *, duration_s: float = 60, rate: float = 20, seed: int = 0,
                            classes: Sequence[str] = ("chat",), ttft_median_ms: float = 80.0,
                            decode_median_ms: float = 20.0, sigma: float = 0.3,
                            output_tokens: tuple[int, int] = (8, 64), prompt_tokens: tuple[int, int] = (16, 512),
                            tokens_per_chunk: int = 3, error_share: float = 0.0,
                            ttft_spike: dict | None = None, slo: Sequence[str] = (),
                            output_burst: dict | None = None, decode_spike: dict | None = None,
                            name: str = "synthetic-llm") -> dict:
    """Write the run into ``path`` (created); return its ground truth (module docstring).

    ``ttft_spike``: ``{"at_s", "duration_s", "extra_ms"}`` added to the TTFT of the requests
    scheduled in ``[at_s, at_s + duration_s)`` after the first arrival; ``output_burst``
    ``{"at_s", "duration_s", "factor"}`` multiplies those requests' output tokens (longer answers, same
    per-token time), ``decode_spike`` (same keys) their time per output token (a real slowdown)."""
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    start_ns = 1_700_000_000 * NS_PER_S + seed * NS_PER_S
    gaps = rng.exponential(1.0 / rate, size=int(duration_s * rate * 1.5) + 16)
    offsets = np.cumsum(gaps)
    offsets = offsets[offsets < duration_s]
    n = len(offsets)
    scheduled = start_ns + (offsets * NS_PER_S).astype(np.int64)
    sent = scheduled + rng.integers(20_000, 200_000, size=n)
    cls_index = rng.integers(0, len(classes), size=n)
    ttft = ttft_median_ms * rng.lognormal(0.0, sigma, size=n)
    if ttft_spike is not None:
        lo = ttft_spike["at_s"] * NS_PER_S + start_ns
        hi = lo + ttft_spike["duration_s"] * NS_PER_S
        ttft = ttft + np.where((scheduled >= lo) & (scheduled < hi), ttft_spike["extra_ms"], 0.0)
    decode = decode_median_ms * rng.lognormal(0.0, sigma, size=n)
    outputs = rng.integers(output_tokens[0], output_tokens[1] + 1, size=n)
    for burst, values in ((output_burst, "outputs"), (decode_spike, "decode")):
        if burst is not None:
            lo = burst["at_s"] * NS_PER_S + start_ns
            hit = (scheduled >= lo) & (scheduled < lo + burst["duration_s"] * NS_PER_S)
            if values == "outputs":
                outputs = np.where(hit, np.round(outputs * burst["factor"]).astype(outputs.dtype), outputs)
            else:
                decode = np.where(hit, decode * burst["factor"], decode)
    prompts = rng.integers(prompt_tokens[0], prompt_tokens[1] + 1, size=n)
    ok = rng.random(n) >= error_share
    first_ns = scheduled + np.round(ttft * NS_PER_MS).astype(np.int64)
    k0 = np.minimum(tokens_per_chunk, outputs)
    last_ns = first_ns + np.round((outputs - k0) * decode * NS_PER_MS).astype(np.int64)
    end_ns = np.where(ok, last_ns + int(END_AFTER_LAST_MS * NS_PER_MS), sent + 2 * NS_PER_MS)
    trace_ids = hex_ids(rng, n, 16)
    chunk_counts = np.where(ok, -(-outputs // tokens_per_chunk), 0)

    # chunks: per ok request, chunk j holds min(tokens_per_chunk, rest) tokens and arrives when its
    # last token is decoded (first chunk at the first token)
    owner = np.repeat(np.arange(n), chunk_counts)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(chunk_counts) - chunk_counts, chunk_counts)
    carried = np.minimum(tokens_per_chunk, outputs[owner] - index * tokens_per_chunk)
    through = np.minimum((index + 1) * tokens_per_chunk, outputs[owner])  # tokens up to this chunk's end
    chunk_t = first_ns[owner] + np.round((through - k0[owner]) * decode[owner] * NS_PER_MS).astype(np.int64)
    chunk_t = np.where(index == 0, first_ns[owner], chunk_t)
    tpot = np.where(outputs >= 2, (last_ns - first_ns) / NS_PER_MS / np.maximum(outputs - 1, 1), np.nan)

    manifest = {
        "name": name, "start_ns": start_ns, "target": "http://127.0.0.1:8000", "seed": seed, "synthetic": True,
        "options": {"duration_s": duration_s, "timeout_s": 60.0, "trace_sample_rate": 1.0},
        "scenario": {"name": name, "duration": f"{duration_s}s", "arrival": {"process": "poisson", "rate": rate},
                     "classes": [{"name": c, "api": "openai-chat", "model": MODEL} for c in classes],
                     "slo": list(slo)},
        "llm_classes": {c: {"api": "openai-chat", "model": MODEL, "stream": True} for c in classes},
    }
    writer = RunWriter(path, manifest)
    try:
        writer.requests.close()  # empty streams; the bulk writers below replace them
        writer.chunks.close()
        requests = StreamFile(os.path.join(path, fmt.REQUESTS), fmt.REQUESTS_SCHEMA)
        try:
            requests.write({
                "scheduled_ns": scheduled, "sent_ns": sent, "end_ns": end_ns,
                "first_byte_ns": pa.array(np.where(ok, first_ns, sent + NS_PER_MS), pa.int64()),
                "cls": constant_strings(list(classes), cls_index), "status": np.where(ok, 200, 500),
                "bytes_out": 100 + 6 * prompts, "bytes_in": np.where(ok, 200 * chunk_counts, 90),
                "trace_id": trace_ids,
                "error_kind": pa.array([None if good else "http" for good in ok], pa.string()),
                "error": pa.array([None if good else "HTTP 500" for good in ok], pa.string()),
                "chunks": chunk_counts, "max_gap_ns": None, "worker": np.zeros(n, np.int32),
                "prompt_tokens": prompts,
                "output_tokens": pa.array(np.where(ok, outputs, 0), pa.int32(), mask=~ok),
                "token_count_source": pa.array(["usage" if good else None for good in ok], pa.string()),
                "finish_reason": pa.array(["length" if good else None for good in ok], pa.string()),
                "last_token_ns": pa.array(last_ns, pa.int64(), mask=~ok),
            })
        finally:
            requests.close()
        chunks = StreamFile(os.path.join(path, fmt.CHUNKS), fmt.CHUNKS_SCHEMA)
        try:
            chunks.write({"trace_id": trace_ids.take(pa.array(owner)), "index": index, "t_ns": chunk_t,
                          "tokens": carried})
        finally:
            chunks.close()
    finally:
        writer.close(status="complete")
    writer.update(end_ns=int(end_ns.max()) if n else start_ns)
    return {
        "path": str(path), "start_ns": start_ns, "requests": n, "ok": ok,
        "cls": np.asarray(classes, dtype=object)[cls_index], "scheduled_ns": scheduled,
        "ttft_ms": np.where(ok, (first_ns - scheduled) / NS_PER_MS, np.nan),
        "tpot_ms": np.where(ok, tpot, np.nan), "decode_ms": np.where(ok, decode, np.nan),
        "latency_ms": (end_ns - scheduled) / NS_PER_MS,
        "output_tokens": np.where(ok, outputs, 0), "prompt_tokens": prompts, "chunks": int(len(owner)),
    }
