"""Service-level objectives: parsing the scenario's SLO lines and judging a run.

Grammar (one objective per string; whitespace is free)::

    [CLASS ":"] METRIC OP NUMBER [UNIT]
    METRIC  p50 | p90 | p95 | p99 | p999   latency (UNIT required: ms | s | us)
          | ttft PCT | itl PCT             streaming: time to first token, inter-token
                                           latency (per token for OpenAI-API classes);
                                           PCT one of the percentiles above (also
                                           written ttft_p99); UNIT required
          | tpot PCT | e2e PCT             OpenAI-API classes: time per output token,
                                           end-to-end latency (UNIT required)
          | output_tokens_per_s            OpenAI-API classes: output tokens of the
                                           successful requests per second of the
                                           load (aggregate; no unit)
          | error_rate                     (UNIT "%", or a fraction in [0, 1])
          | goodput                        share of requests meeting every per-request
                                           SLO (UNIT "%", or a fraction)
          | achieved_rps                   (no unit; requests per second)
    OP      < | <= | > | >=

Examples: ``p99 < 250ms``, ``short: p95 <= 0.1s``, ``error_rate < 1%``,
``error_rate < 0.01``, ``achieved_rps >= 45``, ``ttft p99 < 200ms``,
``chat: itl p99 < 50ms``, ``tpot p90 < 40ms``, ``e2e p99 < 8s``,
``output_tokens_per_s >= 500``, ``goodput >= 95%``. Time thresholds are
stored in ms, error rates and goodput as fractions; ttft/itl/tpot/e2e metrics
are named ``ttft_p99``, ``itl_p50``, ``tpot_p90``, ``e2e_p99``, ...

Where the observations come from (:func:`observe`, on the typed sections of
:class:`SloSources`): latency percentiles from ``summary`` / ``classes``; ``ttft`` and ``itl`` from the ``llm`` section when
its scope (the run, or the class) has OpenAI-API requests, else from
``streaming``; ``tpot``, ``e2e`` and ``output_tokens_per_s`` from ``llm``
only (a run without OpenAI-API requests has no observation: the SLO fails).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.llm import Llm, LlmMetrics
from tailscope.analysis_model.percentiles import Percentile, PercentileSet
from tailscope.analysis_model.streaming import Streaming
from tailscope.analysis_model.summary import RequestSummary, Summary
from tailscope.analysis_model.verdict import SloRow

PERCENTILE_METRICS = ("p50", "p90", "p95", "p99", "p999")
STREAM_METRICS = tuple(f"{kind}_{p}" for kind in ("ttft", "itl") for p in PERCENTILE_METRICS)
#: OpenAI-API classes only (the analysis's ``llm`` section).
TOKEN_METRICS = tuple(f"{kind}_{p}" for kind in ("tpot", "e2e") for p in PERCENTILE_METRICS)
SHARE_METRICS = ("error_rate", "goodput")
RATE_METRICS = ("achieved_rps", "output_tokens_per_s")
METRICS = PERCENTILE_METRICS + STREAM_METRICS + TOKEN_METRICS + SHARE_METRICS + RATE_METRICS
#: Metrics judged per request for goodput (latency, TTFT, ITL, TPOT and e2e thresholds).
PER_REQUEST_METRICS = PERCENTILE_METRICS + STREAM_METRICS + TOKEN_METRICS
_KINDS = ("ttft", "itl", "tpot", "e2e")
_STREAM_METRIC = re.compile(r"^\s*(ttft|itl|tpot|e2e)(?:\s+|_)(p[0-9]+)\b", re.I)
OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
TIME_UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001}

_CLASS = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*:(?!=)\s*(.*)$", re.S)
_BODY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>|==|=|!=)?\s*(.*?)\s*$", re.S)
_NUMBER = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*([A-Za-z%]*)$")


@dataclass(frozen=True)
class Slo:
    """One objective. ``threshold`` is in ms (percentiles), a fraction (error_rate) or rps."""

    text: str
    metric: str
    op: str
    threshold: float
    cls: str | None = None

    def holds(self, observed: float) -> bool:
        return OPERATORS[self.op](observed, self.threshold)


def parse_slo(text: str) -> Slo:
    """Parse one SLO line; raises ValueError naming the part that is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"SLO must be a non-empty string like 'p99 < 250ms', got {text!r}")
    cls, body = None, text
    match = _CLASS.match(text)
    if match:
        cls, body = match.group(1), match.group(2)
    body = _STREAM_METRIC.sub(lambda m: f"{m.group(1).lower()}_{m.group(2).lower()}", body, count=1)
    body_match = _BODY.match(body)
    if not body_match:
        raise ValueError(f"SLO {text!r}: expected METRIC OP NUMBER[UNIT], e.g. 'p99 < 250ms'")
    metric, op, rest = body_match.groups()
    if metric in _KINDS:
        raise ValueError(f"SLO {text!r}: {metric} needs a percentile, e.g. '{metric} p99 < 200ms'")
    if metric not in METRICS:
        raise ValueError(f"SLO {text!r}: unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if op is None:
        raise ValueError(f"SLO {text!r}: missing comparison after {metric!r}; expected one of <, <=, >, >=")
    if op not in OPERATORS:
        raise ValueError(f"SLO {text!r}: unsupported comparison {op!r}; expected one of <, <=, >, >=")
    number_match = _NUMBER.match(rest)
    if not number_match:
        raise ValueError(f"SLO {text!r}: expected a non-negative number after {op!r}, got {rest!r}")
    value = float(rest[: len(rest) - len(number_match.group(2))].strip())
    unit = number_match.group(2)
    return Slo(text.strip(), metric, op, _threshold(text, metric, value, unit), cls)


def _threshold(text: str, metric: str, value: float, unit: str) -> float:
    if metric in PERCENTILE_METRICS or metric in STREAM_METRICS or metric in TOKEN_METRICS:
        if unit not in TIME_UNITS_MS:
            raise ValueError(f"SLO {text!r}: {metric} needs a time unit (ms, s or us), got {unit or 'none'!r}")
        return value * TIME_UNITS_MS[unit]
    if metric in SHARE_METRICS:
        if unit == "%":
            if value > 100:
                raise ValueError(f"SLO {text!r}: {metric} above 100% ({value}%)")
            return value / 100.0
        if unit:
            raise ValueError(f"SLO {text!r}: {metric} takes '%' or a fraction, got unit {unit!r}")
        if value > 1:
            raise ValueError(f"SLO {text!r}: {metric} fraction must be in [0, 1], got {value} (did you mean {value}%?)")
        return value
    if unit:
        what = "requests/s" if metric == "achieved_rps" else "output tokens/s"
        raise ValueError(f"SLO {text!r}: {metric} takes a plain number of {what}, got unit {unit!r}")
    return value


@dataclass(frozen=True, slots=True)
class SloSources:
    """The sections an SLO is observed in (:func:`observe`): the run's ``summary``, each class's
    (``classes``), the ``streaming`` section and the ``llm`` section (None: a run without
    OpenAI-API requests; a TTFT or ITL SLO then reads ``streaming``)."""

    summary: Summary
    classes: dict[str, RequestSummary]
    streaming: Streaming | None
    llm: Llm | None

    @classmethod
    def of(cls, analysis: dict) -> SloSources:
        """The sources decoded from an analysis dict (one :func:`analyze_run` wrote), for a caller
        that holds only that; raises ``AnalysisShapeError`` naming a section of the wrong shape."""
        return cls(summary=decode(Summary, analysis["summary"], "summary"),
                   classes=decode(dict[str, RequestSummary], analysis.get("classes") or {}, "classes"),
                   streaming=decode(Streaming | None, analysis.get("streaming"), "streaming"),
                   llm=decode(Llm | None, analysis.get("llm"), "llm"))


@dataclass(frozen=True, slots=True)
class SloJudgement:
    """Every SLO judged (:func:`evaluate`), before the run's outcome is decided
    (:mod:`tailscope.analyzers.health.outcome`): the rows in the scenario's order; ``failed`` and
    ``unclaimed`` the SLO texts with that status (``failed`` also lists ``aborted: <reason>`` for
    a run an abort rule stopped, :func:`~tailscope.analyzers.health.load_checks.abort_verdict`);
    ``passed`` true only when nothing failed and nothing is unclaimed; ``aborted`` true after an
    abort."""

    passed: bool
    slos: tuple[SloRow, ...]
    failed: tuple[str, ...]
    unclaimed: tuple[str, ...]
    aborted: bool = False


def observe(slo: Slo, sources: SloSources) -> tuple[float | None, bool]:
    """(observed value in the SLO's units, claimed) from the run's sections."""
    observed, claimed, _ = _observation(slo, sources)
    return observed, claimed


def _observation(slo: Slo, sources: SloSources) -> tuple[float | None, bool, Percentile | None]:
    """(observed value, claimed, the percentile entry it came from: None for other metrics)."""
    scope = sources.summary if slo.cls is None else sources.classes.get(slo.cls)
    if scope is None or not scope.requests:
        return None, False, None
    if slo.metric in PERCENTILE_METRICS:
        return _percentile_entry(scope.latency_ms, slo.metric)
    llm = _llm_scope(slo, sources.llm)
    if slo.metric in TOKEN_METRICS or (slo.metric in STREAM_METRICS and llm is not None):
        kind, percentile = slo.metric.split("_", 1)
        return _percentile_entry(getattr(llm, f"{kind}_ms") if llm is not None else None, percentile)
    if slo.metric in STREAM_METRICS:
        return _observe_stream(slo, sources.streaming)
    if slo.metric == "output_tokens_per_s":
        rate = llm.output_tokens_per_s.aggregate if llm is not None else None
        return rate, rate is not None, None
    if slo.metric == "goodput":
        goodput = sources.summary.goodput
        share = (None if goodput is None else goodput.share if slo.cls is None
                 else goodput.by_class[slo.cls].share if slo.cls in goodput.by_class else None)
        return share, share is not None, None
    return getattr(scope, slo.metric), True, None


def _observe_stream(slo: Slo, streaming: Streaming | None) -> tuple[float | None, bool, Percentile | None]:
    """A TTFT or ITL percentile of the class (or of every streamed request)."""
    section = (None if streaming is None else streaming if slo.cls is None
               else streaming.classes.get(slo.cls))
    kind, percentile = slo.metric.split("_", 1)
    return _percentile_entry(getattr(section, f"{kind}_ms") if section is not None else None, percentile)


def _llm_scope(slo: Slo, llm: Llm | None) -> LlmMetrics | None:
    """The ``llm`` section's metrics of the SLO's scope (the run, or its class) when it
    holds OpenAI-API requests, else None."""
    section = None if llm is None else llm if slo.cls is None else llm.classes.get(slo.cls)
    return section if section is not None and section.requests else None


def _percentile_entry(percentiles: PercentileSet | None,
                      percentile: str) -> tuple[float | None, bool, Percentile | None]:
    """(value_ms, claimed, entry) of one entry of a percentile set; (None, False, None) when
    absent or empty."""
    entry = getattr(percentiles, percentile) if percentiles is not None else None
    if entry is None or entry.value_ms is None:
        return None, False, None
    return entry.value_ms, entry.claimed, entry


def judge(slo: Slo, observed: float | None, claimed: bool, entry: Percentile | None) -> str:
    """One SLO's status: ``"pass"``, ``"fail"`` or ``"unclaimed"``.

    No observation fails. A rate, share or count (no percentile ``entry``) passes or fails by
    its value. A percentile whose sample is large enough to claim it (``claimed``: the MLPerf
    early-stopping size of :mod:`.percentiles`, n >= 459 for P99 at 99% confidence) passes or
    fails by its nearest-rank value. An unclaimed percentile is ``"unclaimed"`` — neither a
    pass nor a fail — unless the end of its 95% confidence interval nearest the threshold
    breaches it too (``ci_low_ms`` for ``<``/``<=``, ``ci_high_ms`` for ``>``/``>=``): then the
    breach itself is claimed, and the SLO fails.
    """
    if observed is None:
        return "fail"
    holds = slo.holds(observed)
    if entry is None or claimed:
        return "pass" if holds else "fail"
    if holds:
        return "unclaimed"
    near = entry.ci_low_ms if slo.op in ("<", "<=") else entry.ci_high_ms
    return "fail" if near is not None and not slo.holds(near) else "unclaimed"


def claim_size(metric: str) -> int | None:
    """Samples needed to claim the percentile of a percentile ``metric`` (``p99``, ``ttft_p99``)
    at the claim confidence (:func:`.percentiles.min_samples_for_claim` with no sample above
    the bound); None for a metric that is not a percentile."""
    from tailscope.analyzers.stats.percentiles import STANDARD_PERCENTILES, min_samples_for_claim

    fractions = dict(STANDARD_PERCENTILES)
    name = metric.rsplit("_", 1)[-1]
    if metric not in PER_REQUEST_METRICS or name not in fractions:
        return None
    return min_samples_for_claim(fractions[name], 0)


def evaluate(slos: list[Slo], sources: SloSources) -> SloJudgement:
    """Every SLO judged on the run's sections (:func:`judge`), as a :class:`SloJudgement`: its
    ``passed`` is true only when every row passed (an unclaimed row is not a pass); each
    :class:`~tailscope.analysis_model.verdict.SloRow` carries ``status``, ``passed`` (status is
    "pass"), ``claimed``, ``samples`` (the percentile's sample size; None for other metrics) and
    ``needed_samples`` (the sample size that claims it; None for other metrics). The run's outcome
    word is decided from this by :mod:`tailscope.analyzers.health.outcome`.
    """
    rows = []
    for slo in slos:
        observed, claimed, entry = _observation(slo, sources)
        status = judge(slo, observed, claimed, entry)
        rows.append(SloRow(slo=slo.text, metric=slo.metric, cls=slo.cls, op=slo.op, observed=observed,
                           threshold=slo.threshold, status=status, passed=status == "pass", claimed=claimed,
                           samples=entry.n if entry is not None else None,
                           needed_samples=claim_size(slo.metric)))
    failed = tuple(row.slo for row in rows if row.status == "fail")
    unclaimed = tuple(row.slo for row in rows if row.status == "unclaimed")
    return SloJudgement(passed=not failed and not unclaimed, slos=tuple(rows), failed=failed, unclaimed=unclaimed)
