"""Stages of the slow requests against the normal ones, over the whole run: the ``stages.slow_split`` section.

A request is **slow** when it is among the slowest of one of its measures: above that measure's
run-wide P99 (nearest rank), at least the one slowest request (a run of under 100 requests has no
value above its P99): for a run with OpenAI-API requests the
measures are TTFT and TPOT (an LLM request's end-to-end latency grows with the output it
was asked for, so it does not say which requests suffered), otherwise latency. **Normal**
requests are the other requests that have the measures. Only requests joined to a server
span (rows of the :class:`~.decomposition.StageMatrix`) take part.

Per stage (each stage with a value in either group) the section gives both groups' mean,
P50 and count (:func:`~.decomposition.stage_stats`); for LLM runs also each group's mean
output and prompt tokens, since decode time grows with the output length and prefill with
the prompt, and, when a stage is named ``decode``, each group's mean decode time per output token.
Cost: one nearest-rank quantile per measure and one pass over the stage matrix.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.stages import SlowNormal, SlowSplit, SlowSplitStage, SplitTokens, TokenMeans
from tailscope.analyzers.stages.decomposition import StageMatrix, stage_stats
from tailscope.analyzers.stats.percentiles import nearest_rank


def slow_mask(measures: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict[str, float | None]]:
    """(slow, measured, thresholds): per request, among the slowest of some measure (the
    ``max(1, n − r)`` largest of its n values, r the nearest rank of P99: the ones above the P99,
    at least one; ties broken by position); has every measure (NaN-free); and per measure the
    smallest value counted slow (ms; None when no request has it)."""
    n = len(next(iter(measures.values())))
    slow, measured, thresholds = np.zeros(n, bool), np.ones(n, bool), {}
    for name, values in measures.items():
        has = np.flatnonzero(~np.isnan(values))
        measured[np.isnan(values)] = False
        if not len(has):
            thresholds[name] = None
            continue
        top = max(1, len(has) - nearest_rank(len(has), 0.99))
        chosen = has[np.argsort(values[has], kind="stable")[-top:]]
        slow[chosen] = True
        thresholds[name] = float(values[chosen].min())
    return slow, measured, thresholds


def _mean(values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if len(finite) else None


def slow_split(matrix: StageMatrix, measures: dict[str, np.ndarray],
               tokens: dict[str, np.ndarray] | None = None) -> SlowSplit | None:
    """The ``stages.slow_split`` section (module docstring); None without joined requests.

    ``measures``: name → per-request values (ms, NaN where a request has none), aligned with the
    request table; ``tokens``: ``{"prompt", "output"}`` per request (LLM runs), else None."""
    rows = matrix.request_index
    if not len(rows):
        return None
    slow, measured, thresholds = slow_mask(measures)
    in_slow, in_normal = slow[rows], measured[rows] & ~slow[rows]
    stages = []
    for j, stage in enumerate(matrix.stages):
        a, b = stage_stats(matrix.ms[in_slow, j]), stage_stats(matrix.ms[in_normal, j])
        if a.count or b.count:
            stages.append(SlowSplitStage(stage, a.mean_ms, b.mean_ms, a.p50_ms, b.p50_ms, a.count, b.count))
    means, per_output_token = None, None
    if tokens is not None:
        means = SplitTokens(*(TokenMeans(_mean(tokens["prompt"][rows][mask]), _mean(tokens["output"][rows][mask]))
                              for mask in (in_slow, in_normal)))
        if "decode" in matrix.stages:  # decode time grows with the output: also per output token
            with np.errstate(invalid="ignore", divide="ignore"):
                per_token = matrix.column("decode") / np.where(tokens["output"][rows] > 0, tokens["output"][rows], np.nan)
            per_output_token = SlowNormal(_mean(per_token[in_slow]), _mean(per_token[in_normal]))
    return SlowSplit(list(measures), thresholds, int(in_slow.sum()), int(in_normal.sum()), stages, means,
                     per_output_token)
