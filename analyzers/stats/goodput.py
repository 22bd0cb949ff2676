"""Goodput: the share of requests that met every per-request objective.

Pure numpy. A request is *good* when it did not fail (no ``error_kind``) and,
for every SLO of the scenario that can be judged on one request and applies
to its class (unprefixed SLOs apply to all classes):

- a latency percentile SLO (``p99 < 250ms``): its latency (from the scheduled
  send) meets the threshold;
- a TTFT SLO (``ttft p99 < 200ms``): its time to first token meets it (a
  streamed request without any token does not);
- an ITL SLO (``itl p99 < 50ms``): its own inter-token gaps' same percentile
  meets it (fewer than two tokens: met; per token for OpenAI-API classes);
- a TPOT SLO (``tpot p99 < 40ms``): its time per output token meets it
  (fewer than two output tokens, or not streamed: met — nothing to judge);
- an end-to-end SLO (``e2e p99 < 8s``): its latency from the scheduled send
  meets it (like a latency SLO, kept as its own kind).

Per metric (latency, TTFT, ITL, TPOT, e2e) and class scope, the SLO with the highest
percentile sets the per-request threshold ("p99 < 250ms": a request slower
than 250 ms is outside the objective); a lower percentile ("p50 < 50ms")
describes the typical request, not each one, and is not applied per request.
Rate-like SLOs (``error_rate``, ``achieved_rps``, ``goodput``) are not judged
per request. With no per-request SLO, goodput is the share of requests that
did not fail (``criteria`` is then empty). As DistServe and vLLM's benchmark
define it: goodput = share of requests meeting every SLO (TTFT, TPOT/ITL,
end-to-end); :func:`goodput_summary`'s ``where`` restricts it to some
requests (the ``llm`` section: the OpenAI-API ones).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.summary import Goodput, GoodputShare
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.stats.slo import OPERATORS, PER_REQUEST_METRICS, PERCENTILE_METRICS, Slo
from tailscope.analyzers.stats.streaming import StreamTimes

_QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}


def per_request_slos(slos: list[Slo]) -> list[Slo]:
    """The SLOs a single request is judged by: per (metric kind, class), the one
    with the highest percentile (then the lowest threshold); only ``<``/``<=``."""
    chosen: dict[tuple, Slo] = {}
    for slo in slos:
        if slo.metric not in PER_REQUEST_METRICS or slo.op not in ("<", "<="):
            continue
        kind, _, percentile = slo.metric.rpartition("_")
        key = (kind or "latency", slo.cls)
        rank = (_QUANTILES[percentile], -slo.threshold)
        current = chosen.get(key)
        if current is None or rank > _rank(current):
            chosen[key] = slo
    return [s for s in slos if s in chosen.values()]


def _rank(slo: Slo) -> tuple[float, float]:
    return _QUANTILES[slo.metric.rpartition("_")[2]], -slo.threshold


def _values(slo: Slo, req: RequestArrays, times: StreamTimes | None) -> np.ndarray:
    """Each request's value for ``slo`` (ms); NaN where it has none."""
    if slo.metric in PERCENTILE_METRICS:
        return req.latency_ms
    kind, percentile = slo.metric.split("_", 1)
    if kind == "e2e":
        return req.latency_ms
    if times is None:
        return np.full(req.n, np.nan)
    if kind == "ttft":
        return times.ttft_ms
    if kind == "tpot":
        return times.tpot_ms if times.tpot_ms is not None else np.full(req.n, np.nan)
    return times.request_itl_quantile(_QUANTILES[percentile])


def good_requests(req: RequestArrays, slos: list[Slo], times: StreamTimes | None) -> np.ndarray:
    """Boolean per request: no error and every applicable per-request SLO met."""
    good = ~req.is_error & req.has_end
    for slo in per_request_slos(slos):
        applies = np.ones(req.n, bool) if slo.cls is None else req.class_mask(slo.cls)
        values = _values(slo, req, times)
        with np.errstate(invalid="ignore"):
            met = OPERATORS[slo.op](values, slo.threshold)
        if slo.metric.startswith(("itl_", "tpot_")):
            met = met | np.isnan(values)  # fewer than two tokens: no gap to miss
        good &= ~applies | met
    return good


def goodput_summary(req: RequestArrays, slos: list[Slo], times: StreamTimes | None,
                    duration_s: float = 0.0, where: np.ndarray | None = None) -> Goodput:
    """The :class:`~tailscope.analysis_model.summary.Goodput` of the requests ``where`` selects
    (default all): ``share`` 0–1 (None with no request), ``good`` of ``total``, ``rps`` = good
    requests ÷ ``duration_s`` (s; None when it is 0), the per-request SLOs applied (``criteria``,
    :func:`per_request_slos`), the ``definition`` in words and the same per request class."""
    selected = np.ones(req.n, dtype=bool) if where is None else where
    good = good_requests(req, slos, times) & selected
    criteria = tuple(s.text for s in per_request_slos(slos))
    by_class = {}
    for name in req.class_names(selected):
        mask = req.class_mask(name) & selected
        count = int(mask.sum())
        by_class[name] = GoodputShare(share=float(good[mask].mean()) if count else None,
                                      good=int(good[mask].sum()), total=count)
    total = int(selected.sum())
    return Goodput(
        share=float(good.sum() / total) if total else None,
        good=int(good.sum()),
        total=total,
        rps=int(good.sum()) / duration_s if duration_s > 0 else None,
        criteria=criteria,
        definition=("share of requests without error that met " + ", ".join(criteria) if criteria
                    else "share of requests without error (no per-request SLO)"),
        by_class=by_class,
    )
