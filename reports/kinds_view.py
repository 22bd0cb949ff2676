"""The report's reasoning, tool-call, image and rerank/score block: time to the first reasoning and
answer token, TPOT per kind, reasoning tokens, time to the complete tool call, TTFT and sizes of
image requests, rerank/score latency per request and per document.

Reads only the analysis's ``llm.reasoning``, ``llm.tool_calls``, ``llm.images`` and ``llm.ranking``
(analysis_model/llm.py; docs/analysis-schema.md; analyzers/stats/llm_kinds.py); None for a run with none of them. :func:`kinds_data` is the
block's pre-formatted table data (every value a string), :func:`kinds_headline` the verdict's answers.
"""

from __future__ import annotations

from tailscope.analysis_model.llm import Llm, TokenStats
from tailscope.analysis_model.percentiles import PercentileSet
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_share, percentile_cells

#: The percentile-set rows of the block: (section, key, label).
ROWS = (("reasoning", "ttfr_ms", "time to first reasoning token"),
        ("reasoning", "ttfa_ms", "time to first answer token"),
        ("reasoning", "reasoning_tpot_ms", "TPOT, reasoning"),
        ("reasoning", "answer_tpot_ms", "TPOT, answer"),
        ("tool_calls", "time_to_tool_call_ms", "time to complete tool call"),
        ("images", "ttft_ms", "TTFT with images"),
        ("ranking", "e2e_ms", "rerank/score end-to-end"),
        ("ranking", "per_document_ms", "rerank/score per document"))


def fmt_bytes(value: float | None) -> str:
    """``812 KiB``, ``3.1 MiB``: a byte count in binary units (``—`` for None)."""
    if value is None:
        return "—"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def _row(label: str, entry: PercentileSet) -> dict:
    p50, p99 = percentile_cells(entry.p50), percentile_cells(entry.p99)
    return {"metric": label, "p50": p50["value"], "p50_ci": p50["ci"], "p99": p99["value"], "p99_ci": p99["ci"],
            "p99_claimed": p99["claimed"], "max": fmt_ms(entry.max.value_ms), "n": p50["n"]}


def _tokens(label: str, stats: TokenStats) -> dict:
    return {"what": label, "sum": fmt_count(stats.sum), "mean": fmt_number(stats.mean),
            "p50": fmt_number(stats.p50), "p99": fmt_number(stats.p99)}


def kinds_data(llm: Llm) -> dict | None:
    """The block's tables; None without ``llm.reasoning``, ``llm.tool_calls``, ``llm.images`` and ``llm.ranking``."""
    reasoning, tools, images, ranking = llm.reasoning, llm.tool_calls, llm.images, llm.ranking
    if not reasoning and not tools and not images and not ranking:
        return None
    figures = {"reasoning": reasoning, "tool_calls": tools, "images": images, "ranking": ranking}
    tokens = []
    if reasoning:
        tokens += [_tokens("reasoning tokens", reasoning.reasoning_tokens),
                   _tokens("answer tokens", reasoning.answer_tokens)]
    if tools:
        tokens.append(_tokens("tool calls per request", tools.calls))
    if images:
        tokens += [_tokens("images per request", images.images), _tokens("pixels per request", images.pixels),
                   _tokens("request bytes (with images)", images.request_bytes)]
    if ranking:
        tokens += [_tokens("documents per request", ranking.documents),
                   _tokens("document tokens per request", ranking.document_tokens)]
    return {
        "reasoning_requests": fmt_count(reasoning.requests) if reasoning else None,
        "reasoning_share": fmt_share(reasoning.reasoning_share) if reasoning else None,
        "tool_requests": fmt_count(tools.requests) if tools else None,
        "image_requests": fmt_count(images.requests) if images else None,
        "image_bytes_p50": fmt_bytes(images.request_bytes.p50) if images else None,
        "ranking_requests": fmt_count(ranking.requests) if ranking else None,
        "rows": [_row(label, getattr(figures[section], key)) for section, key, label in ROWS if figures[section]],
        "tokens": tokens,
    }


def kinds_headline(llm: Llm) -> list[dict]:
    """The verdict's reasoning, tool-call and image figures (``{"label", "note"}``, strings): time to
    the first answer token P99 of the reasoning requests, time to the complete tool call P99, TTFT
    P99 of the requests with images; ``[]`` without."""
    out = []
    reasoning, tools, images, ranking = llm.reasoning, llm.tool_calls, llm.images, llm.ranking
    if reasoning and reasoning.ttfa_ms.p99.n:
        cells = percentile_cells(reasoning.ttfa_ms.p99)
        out.append({"label": f"time to first answer token P99 {cells['value']}",
                    "note": (f"{fmt_count(reasoning.requests)} reasoning requests · "
                             f"{fmt_share(reasoning.reasoning_share)} of output tokens reasoning · "
                             f"95% CI {cells['ci']} · {cells['claimed']}")})
    if tools and tools.time_to_tool_call_ms.p99.n:
        cells = percentile_cells(tools.time_to_tool_call_ms.p99)
        out.append({"label": f"time to complete tool call P99 {cells['value']}",
                    "note": f"{fmt_count(tools.requests)} requests called tools · 95% CI {cells['ci']} · "
                            f"{cells['claimed']}"})
    if images and images.ttft_ms.p99.n:
        cells = percentile_cells(images.ttft_ms.p99)
        out.append({"label": f"TTFT with images P99 {cells['value']}",
                    "note": (f"{fmt_count(images.requests)} requests sent images, request P50 "
                             f"{fmt_bytes(images.request_bytes.p50)} · 95% CI {cells['ci']} · {cells['claimed']}")})
    if ranking and ranking.e2e_ms.p99.n:
        cells = percentile_cells(ranking.e2e_ms.p99)
        out.append({"label": f"rerank/score P99 {cells['value']}",
                    "note": (f"{fmt_count(ranking.requests)} requests of {fmt_number(ranking.documents.mean)} "
                             f"documents on average, per document P50 "
                             f"{fmt_ms(ranking.per_document_ms.p50.value_ms)} · 95% CI {cells['ci']} · "
                             f"{cells['claimed']}")})
    return out
