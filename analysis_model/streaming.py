"""Streamed responses: the ``streaming`` section and ``$defs.stream_metrics``.

analyzers/analysis.schema.json; built by analyzers/stats/streaming.py (``streaming_section``);
drawn by the report's streaming table (reports/data.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.analysis_model.codec import written_when_set, written_with
from tailscope.analysis_model.percentiles import PercentileSet


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamMetrics:
    """The streamed requests of a set (chunks > 0): how many, their chunks in all and per request
    (None without any), time to first token (ms), inter-token gaps (ms; None without a chunk-time
    file), output tokens per s of the load period (chunks where tokens are not counted; None for
    an empty period) and each request's decode rate (tokens/s after the first): median and mean
    (None without a rate). An older analysis lacks ``chunks_per_request`` and the decode rates (None)."""

    requests: int
    chunks: int
    chunks_per_request: float | None = None
    ttft_ms: PercentileSet
    itl_ms: PercentileSet | None
    tokens_per_s: float | None
    decode_tokens_per_s_p50: float | None = None
    decode_tokens_per_s_mean: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Streaming:
    """:class:`StreamMetrics` over every streamed request (the keys are there only when a request
    streamed: all of them then, ``None`` values included), the same per class that streamed, and
    whether inter-token gaps could be measured (``itl_available``: a chunk-time file was written)."""

    requests: int | None = written_when_set()
    chunks: int | None = written_when_set()
    chunks_per_request: float | None = written_with("requests")
    ttft_ms: PercentileSet | None = written_when_set()
    itl_ms: PercentileSet | None = written_with("requests")
    tokens_per_s: float | None = written_with("requests")
    decode_tokens_per_s_p50: float | None = written_with("requests")
    decode_tokens_per_s_mean: float | None = written_with("requests")
    classes: dict[str, StreamMetrics]
    itl_available: bool

    @property
    def overall(self) -> StreamMetrics | None:
        """The top-level metrics as one :class:`StreamMetrics`; None when nothing streamed."""
        if self.requests is None or self.chunks is None or self.ttft_ms is None:
            return None
        return StreamMetrics(requests=self.requests, chunks=self.chunks, chunks_per_request=self.chunks_per_request,
                             ttft_ms=self.ttft_ms, itl_ms=self.itl_ms, tokens_per_s=self.tokens_per_s,
                             decode_tokens_per_s_p50=self.decode_tokens_per_s_p50,
                             decode_tokens_per_s_mean=self.decode_tokens_per_s_mean)
