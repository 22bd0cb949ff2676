"""Kinds of LLM requests and output: reasoning streams, tool calls, images, rerank and score (the
``reasoning``, ``tool_calls``, ``images`` and ``ranking`` of an ``llm`` scope).

Pure numpy over the request table's output-kind columns (run format 1.3:
``reasoning_tokens``, ``answer_tokens``, ``first_reasoning_ns``,
``last_reasoning_ns``, ``first_answer_ns``, ``last_answer_ns``,
``tool_calls``, ``tool_call_ns``; written by
``tailscope.loadgen.openai_stream.OpenAIReply``). A scope gets

- ``reasoning`` when any of its completed requests reasoned (reasoning
  tokens > 0): over those requests, ``requests``; ``ttfr_ms`` (time to the
  first reasoning token: first chunk with reasoning − scheduled send) and
  ``ttfa_ms`` (time to the first answer token: first answer chunk −
  scheduled send), streamed requests only; ``reasoning_tpot_ms`` and
  ``answer_tpot_ms`` (last − first chunk of the kind ÷ (its tokens − 1),
  requests with at least 2 tokens of the kind); ``reasoning_tokens`` and
  ``answer_tokens`` (``{sum, mean, p50, p99}``); ``reasoning_share`` (the
  scope's reasoning tokens ÷ its output tokens);
- ``tool_calls`` when any completed request called a tool: over those
  requests, ``requests``, ``calls`` (tool calls per request, ``{sum, mean,
  p50, p99}``), ``time_to_tool_call_ms`` (when the last call was complete −
  scheduled send, streamed requests; a non-streamed reply's calls are complete
  at its end);
- ``images`` when any completed request sent images (columns ``images``,
  ``image_pixels``): over those requests, ``requests``, ``images`` (per
  request), ``pixels`` (per request, all its images), ``request_bytes``
  (``bytes_out``: the body with its base64 images), each ``{sum, mean, p50,
  p99}``, and ``ttft_ms`` (TTFT of the streamed ones: the image's prefill is
  in it);
- ``ranking`` when any completed request was a rerank or score request
  (columns ``documents``, ``document_tokens``): over those requests,
  ``requests``, ``documents`` and ``document_tokens`` per request (``{sum,
  mean, p50, p99}``), ``e2e_ms`` (end − scheduled send) and
  ``per_document_ms`` (e2e ÷ the request's documents), percentile sets.

Times are ms from the scheduled send, as TTFT; each a
:func:`~.percentiles.typed_percentile_set`. A run before format 1.3, or whose
requests carry no reasoning, no tool call, no image and no document, adds none of the keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tailscope.analysis_model.llm import Images, Ranking, Reasoning, TokenStats, ToolCalls
from tailscope.analyzers.inputs.records import NS_PER_MS, int_column
from tailscope.analyzers.stats.percentiles import typed_percentile_set

#: The request-table columns read (format 1.3), in ``REQUESTS_SCHEMA`` order.
KIND_COLUMNS = ("reasoning_tokens", "answer_tokens", "first_reasoning_ns", "last_reasoning_ns",
                "first_answer_ns", "last_answer_ns", "tool_calls", "tool_call_ns")
#: The image columns (format 1.3) and the request bytes read with them.
IMAGE_COLUMNS = ("images", "image_pixels", "bytes_out")
#: The rerank / score columns (format 1.3).
RANKING_COLUMNS = ("documents", "document_tokens")


@dataclass(frozen=True)
class KindArrays:
    """The output-kind columns, aligned with the request rows: ``values[name]`` int64 (nulls 0),
    ``present[name]`` bool."""

    values: dict[str, np.ndarray]
    present: dict[str, np.ndarray]

    def tokens(self, name: str) -> np.ndarray:
        """A count column as float64 with NaN where null."""
        return np.where(self.present[name], self.values[name].astype(np.float64), np.nan)


def kind_arrays(requests: pa.Table) -> KindArrays | None:
    """The output-kind and image columns, or None in a run before format 1.3 or when no row has
    reasoning, a tool call or an image."""
    names = KIND_COLUMNS + IMAGE_COLUMNS + RANKING_COLUMNS
    if any(name not in requests.column_names for name in names):
        return None
    values, present = {}, {}
    for name in names:
        values[name], present[name] = int_column(requests, name)
    if not any((values[name] > 0).any() for name in ("reasoning_tokens", "tool_calls", "images", "documents")):
        return None
    return KindArrays(values, present)


def _since_ms(kinds: KindArrays, name: str, scheduled_ns: np.ndarray, rows: np.ndarray) -> np.ndarray:
    rows = rows & kinds.present[name]
    return (kinds.values[name][rows] - scheduled_ns[rows]) / NS_PER_MS


def _tpot_ms(kinds: KindArrays, first: str, last: str, count: str, rows: np.ndarray) -> np.ndarray:
    tokens = kinds.values[count]
    rows = rows & kinds.present[first] & kinds.present[last] & (tokens >= 2)
    return (kinds.values[last][rows] - kinds.values[first][rows]) / (tokens[rows] - 1) / NS_PER_MS


KindMetrics = dict[str, Reasoning | ToolCalls | Images | Ranking]


def kinds_metrics(kinds: KindArrays | None, scheduled_ns: np.ndarray, ok: np.ndarray, streamed: np.ndarray,
                  output_tokens: np.ndarray, token_stats: Callable[[np.ndarray], TokenStats],
                  ttft_ms: np.ndarray | None = None, latency_ms: np.ndarray | None = None) -> KindMetrics:
    """``{"reasoning": Reasoning, "tool_calls": ToolCalls, "images": Images, "ranking": Ranking}``
    (analysis_model/llm.py) of the completed requests ``ok`` (``streamed``: those streamed), each
    key only when some request has that kind (module docstring): the output-kind fields of an
    ``LlmMetrics``. ``output_tokens``: float64 per request (NaN: null); ``token_stats``: the ``llm``
    section's :class:`TokenStats` maker; ``ttft_ms``, ``latency_ms`` (end − scheduled send): per
    request (NaN: none)."""
    if kinds is None:
        return {}
    out: KindMetrics = {}
    reasoned = ok & (kinds.values["reasoning_tokens"] > 0)
    if reasoned.any():
        total_output = float(np.nansum(output_tokens[ok]))
        reasoning_sum = float(kinds.values["reasoning_tokens"][ok].sum())
        out["reasoning"] = Reasoning(
            requests=int(reasoned.sum()),
            ttfr_ms=typed_percentile_set(_since_ms(kinds, "first_reasoning_ns", scheduled_ns, reasoned & streamed)),
            ttfa_ms=typed_percentile_set(_since_ms(kinds, "first_answer_ns", scheduled_ns, reasoned & streamed)),
            reasoning_tpot_ms=typed_percentile_set(_tpot_ms(kinds, "first_reasoning_ns", "last_reasoning_ns",
                                                            "reasoning_tokens", reasoned & streamed)),
            answer_tpot_ms=typed_percentile_set(_tpot_ms(kinds, "first_answer_ns", "last_answer_ns", "answer_tokens",
                                                         reasoned & streamed)),
            reasoning_tokens=token_stats(kinds.tokens("reasoning_tokens")[reasoned]),
            answer_tokens=token_stats(kinds.tokens("answer_tokens")[reasoned]),
            reasoning_share=reasoning_sum / total_output if total_output > 0 else None,
        )
    called = ok & (kinds.values["tool_calls"] > 0)
    if called.any():
        out["tool_calls"] = ToolCalls(
            requests=int(called.sum()),
            calls=token_stats(kinds.tokens("tool_calls")[called]),
            time_to_tool_call_ms=typed_percentile_set(_since_ms(kinds, "tool_call_ns", scheduled_ns, called & streamed)),
        )
    pictured = ok & (kinds.values["images"] > 0)
    if pictured.any():
        ttft = ttft_ms[pictured & streamed] if ttft_ms is not None else np.zeros(0)
        out["images"] = Images(
            requests=int(pictured.sum()),
            images=token_stats(kinds.tokens("images")[pictured]),
            pixels=token_stats(kinds.tokens("image_pixels")[pictured]),
            request_bytes=token_stats(kinds.tokens("bytes_out")[pictured]),
            ttft_ms=typed_percentile_set(ttft[~np.isnan(ttft)]),
        )
    ranked = ok & (kinds.values["documents"] > 0)
    if ranked.any():
        e2e = latency_ms[ranked] if latency_ms is not None else np.zeros(0)
        per_document = e2e / kinds.values["documents"][ranked] if latency_ms is not None else np.zeros(0)
        out["ranking"] = Ranking(
            requests=int(ranked.sum()),
            documents=token_stats(kinds.tokens("documents")[ranked]),
            document_tokens=token_stats(kinds.tokens("document_tokens")[ranked]),
            e2e_ms=typed_percentile_set(e2e[~np.isnan(e2e)]),
            per_document_ms=typed_percentile_set(per_document[~np.isnan(per_document)]),
        )
    return out


def kind_series(kinds: KindArrays | None, scheduled_ns: np.ndarray, ttft_ms: np.ndarray,
                ok_latency_ms: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per request (NaN where it has none) of the requests with a TTFT (``ttft_ms``, NaN: none): ``ttfa``
    (ms to the first answer token, reasoning requests), ``reasoning_tpot`` (ms per reasoning token after
    the first, requests with at least 2), ``time_to_tool_call`` (ms) and ``image_ttft``
    (TTFT of the requests with images); and ``ranking_e2e`` (end − scheduled send of the completed
    rerank / score requests: ``ok_latency_ms``, NaN where not completed), for ``compare``; ``{}`` without kinds."""
    if kinds is None:
        return {}
    keep = ~np.isnan(ttft_ms)
    out = {"image_ttft": np.where(keep & (kinds.values["images"] > 0), ttft_ms, np.nan)}
    if ok_latency_ms is not None:
        out["ranking_e2e"] = np.where(kinds.values["documents"] > 0, ok_latency_ms, np.nan)
    for key, column, has in (("ttfa", "first_answer_ns", kinds.values["reasoning_tokens"] > 0),
                             ("time_to_tool_call", "tool_call_ns", kinds.values["tool_calls"] > 0)):
        rows = keep & has & kinds.present[column]
        values = np.full(len(scheduled_ns), np.nan)
        values[rows] = (kinds.values[column][rows] - scheduled_ns[rows]) / NS_PER_MS
        out[key] = values
    reasoning = keep & kinds.present["first_reasoning_ns"] & kinds.present["last_reasoning_ns"]
    reasoning &= kinds.values["reasoning_tokens"] >= 2
    out["reasoning_tpot"] = np.full(len(scheduled_ns), np.nan)
    out["reasoning_tpot"][reasoning] = _tpot_ms(kinds, "first_reasoning_ns", "last_reasoning_ns", "reasoning_tokens",
                                                reasoning)
    return out
