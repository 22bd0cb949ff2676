"""Report sections that appear only when the analysis carries them.

Keys read (all optional; docs/report.md lists them for the analyzers' authors):

- ``summary.goodput`` — a share in [0, 1], or ``{"share", "rps", "definition"}``;
- ``streaming`` — read as :class:`~tailscope.analysis_model.streaming.Streaming`: TTFT and
  inter-token latency over every streamed request and per class, and the scalar facts (requests,
  chunks, tokens/s...);
- ``generator_limited_windows`` — ``[{"start_ns", "end_ns"}]`` (drawn as grey bands);
- ``sweep`` — read as :class:`~tailscope.analysis_model.sweep.AnalysisSweep` (every key optional):
  ``{"steps": [{"offered_rps", "achieved_rps", "p50_ms", "p99_ms", "error_rate", "passed"}],
  "knee_rps", "max_rate_under_slo_rps", "slo"}``;
- the scenario's ``arrival.process == "closed"`` or ``arrival.concurrency`` — the closed-loop label.
"""

from __future__ import annotations

from tailscope.analysis_model.percentiles import PercentileSet
from tailscope.analysis_model.streaming import Streaming, StreamMetrics
from tailscope.analysis_model.summary import Goodput
from tailscope.analysis_model.sweep import AnalysisSweep
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_rate, fmt_share
from tailscope.support.units import percentile_label

PERCENTILES = tuple((key, percentile_label(key)) for key in ("p50", "p90", "p99", "p999"))
METRIC_LABELS = {"ttft_ms": "time to first token", "itl_ms": "inter-token latency"}


def goodput(value: Goodput | None) -> dict | None:
    """The summary's goodput: ``{"share", "rps", "definition"}`` as text, or None when the analysis
    has none (a class's summary, an analysis written before goodput)."""
    if value is None:
        return None
    return {"share": fmt_share(value.share), "rps": fmt_rate(value.rps), "definition": value.definition}


#: The streamed metrics' scalar facts, in the order the table shows them.
STREAM_FACTS = ("requests", "chunks", "chunks_per_request", "tokens_per_s", "decode_tokens_per_s_p50",
                "decode_tokens_per_s_mean")


def metric_rows(metrics: StreamMetrics | None, scope: str) -> list[dict]:
    """One row per percentile-set metric (TTFT; inter-token latency where measured): scope, metric
    label, P50…P99.9 (ms) and n; none for ``metrics`` None (nothing streamed)."""
    if metrics is None:
        return []
    sets: tuple[tuple[str, PercentileSet | None], ...] = (("ttft_ms", metrics.ttft_ms), ("itl_ms", metrics.itl_ms))
    return [{"scope": scope, "metric": METRIC_LABELS[key],
             **{label: fmt_ms(getattr(value, k).value_ms) for k, label in PERCENTILES},
             "n": fmt_count(value.p50.n)} for key, value in sets if value is not None]


def streaming(section: Streaming | None) -> dict | None:
    """Streaming metrics table (run, then per class) and scalar facts; None when absent or when
    nothing streamed."""
    if section is None:
        return None
    rows = metric_rows(section.overall, "all")
    for cls, metrics in section.classes.items():
        rows += metric_rows(metrics, str(cls))
    facts = [{"key": key, "value": fmt_number(value)} for key in STREAM_FACTS
             if (value := getattr(section, key)) is not None]
    if not rows and not facts:
        return None
    return {"rows": rows, "facts": facts, "labels": [label for _, label in PERCENTILES]}


def sweep(section: AnalysisSweep | None) -> tuple[dict | None, dict | None]:
    """(table data, chart series) of an analysis's own load sweep (rates req/s, latencies ms);
    (None, None) when absent or without steps."""
    steps = (section.steps if section is not None else None) or []
    if not steps:
        return None, None
    rows = [{"offered": fmt_rate(s.offered_rps), "achieved": fmt_rate(s.achieved_rps),
             "p50": fmt_ms(s.p50_ms), "p99": fmt_ms(s.p99_ms),
             "errors": fmt_share(s.error_rate),
             "result": {True: "pass", False: "fail"}.get(s.passed, "—")} for s in steps]
    table = {"rows": rows, "knee": fmt_rate(section.knee_rps),
             "max_under_slo": fmt_rate(section.max_rate_under_slo_rps),
             "slo": str(section.slo or "")}
    chart = {"achieved": [s.achieved_rps for s in steps], "p50": [s.p50_ms for s in steps],
             "p99": [s.p99_ms for s in steps], "offered": [s.offered_rps for s in steps],
             "knee": section.knee_rps, "max_under_slo": section.max_rate_under_slo_rps}
    return table, chart


def loop_label(scenario: dict) -> str | None:
    """The closed-loop caveat, or None for an open-loop run."""
    arrival = (scenario or {}).get("arrival") or {}
    if isinstance(arrival, dict) and arrival.get("concurrency") is not None:
        return (f"closed loop (concurrency mode, {arrival['concurrency']} in flight): each request is sent when "
                "another ends, so latency is measured from the actual send and coordinated omission can hide "
                "stalls; use an open-loop arrival process for tail latency")
    if isinstance(arrival, dict) and arrival.get("process") == "closed":
        return ("closed loop: each user waits for its reply, so latency is measured from the actual send "
                "and coordinated omission can hide stalls; use an open-loop arrival process for tail latency")
    return None
