"""The report's multi-turn sessions block: TTFT by turn, session duration, tokens per session.

Reads only the analysis's ``llm.sessions`` (analysis_model/llm.py ``Sessions``; docs/analysis-schema.md; analyzers/stats/llm_sessions.py);
None for a run whose load was not sessions. :func:`sessions_data` is the block's pre-formatted
table data (every value a string), :func:`sessions_headline` the verdict's one-line answer.
"""

from __future__ import annotations

from tailscope.analysis_model.llm import Llm
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, percentile_cells


def _ratio_text(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}×"


def sessions_data(llm: Llm) -> dict | None:
    """The sessions block's tables; None without ``llm.sessions``."""
    figures = llm.sessions
    if figures is None:
        return None
    duration = figures.duration_ms
    return {
        "sessions": fmt_count(figures.sessions), "complete": fmt_count(figures.complete),
        "failed": fmt_count(figures.failed), "cut": fmt_count(figures.cut),
        "turns": [{
            "turn": row.label, "requests": fmt_count(row.requests), "completed": fmt_count(row.completed),
            **{f"ttft_{name}": cells["value"] for name, cells in
               (("p50", percentile_cells(row.ttft_ms.p50)), ("p99", percentile_cells(row.ttft_ms.p99)))},
            "ttft_p50_ci": percentile_cells(row.ttft_ms.p50)["ci"],
            "prompt": fmt_number(row.prompt_tokens_mean),
        } for row in figures.by_turn],
        "first_p50": fmt_ms(figures.ttft_first_turn_ms.p50.value_ms),
        "later_p50": fmt_ms(figures.ttft_later_turns_ms.p50.value_ms),
        "ratio": _ratio_text(figures.ttft_later_vs_first),
        "duration": {"p50": fmt_ms(duration.p50.value_ms), "p99": fmt_ms(duration.p99.value_ms),
                     "max": fmt_ms(duration.max.value_ms), "n": fmt_count(duration.max.n)},
        "per_session": [{"what": what, "mean": fmt_number(stats.mean), "p50": fmt_number(stats.p50),
                         "p99": fmt_number(stats.p99), "sum": fmt_count(stats.sum)}
                        for what, stats in (("turns", figures.turns), ("prompt tokens", figures.prompt_tokens),
                                            ("output tokens", figures.output_tokens))],
    }


def sessions_headline(llm: Llm) -> dict | None:
    """The verdict's sessions figure (``{"label", "note"}``): TTFT of later turns against turn 1 and
    the sessions' median duration; None without ``llm.sessions``."""
    figures = llm.sessions
    if figures is None:
        return None
    first = percentile_cells(figures.ttft_first_turn_ms.p50)["value"]
    later = percentile_cells(figures.ttft_later_turns_ms.p50)["value"]
    return {"label": f"{fmt_count(figures.sessions)} sessions · TTFT P50 turn 1 {first}, later {later}",
            "note": (f"later ÷ first {_ratio_text(figures.ttft_later_vs_first)} · session P50 "
                     f"{fmt_ms(figures.duration_ms.p50.value_ms)} over {fmt_count(figures.complete)} "
                     "complete")}
