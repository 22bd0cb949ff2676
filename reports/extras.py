"""Report sections that appear only when the analysis carries them.

Keys read (all optional; docs/report.md lists them for the analyzers' authors):

- ``summary.goodput`` — a share in [0, 1], or ``{"share", "rps", "definition"}``;
- ``streaming`` — ``{metric: percentile_set}`` for the run (e.g. ``ttft_ms``,
  ``itl_ms``, ``tpot_ms``), optionally ``classes: {cls: {metric: percentile_set}}``
  and scalar facts (``streams``, ``tokens_per_s``...);
- ``generator_limited_windows`` — ``[{"start_ns", "end_ns"}]`` (drawn as grey bands);
- ``sweep`` — ``{"steps": [{"offered_rps", "achieved_rps", "p50_ms", "p99_ms",
  "error_rate", "passed"}], "knee_rps", "max_rate_under_slo_rps", "slo"}``;
- the scenario's ``arrival.process == "closed"`` or ``arrival.concurrency`` — the closed-loop label.
"""

from __future__ import annotations

from tailscope.analysis_model.summary import Goodput
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_rate, fmt_share
from tailscope.support.units import percentile_label

PERCENTILES = tuple((key, percentile_label(key)) for key in ("p50", "p90", "p99", "p999"))
METRIC_LABELS = {"ttft_ms": "time to first token", "itl_ms": "inter-token latency",
                 "tpot_ms": "time per output token", "e2e_ms": "end-to-end"}


def goodput(value: Goodput | None) -> dict | None:
    """The summary's goodput: ``{"share", "rps", "definition"}`` as text, or None when the analysis
    has none (a class's summary, an analysis written before goodput)."""
    if value is None:
        return None
    return {"share": fmt_share(value.share), "rps": fmt_rate(value.rps), "definition": value.definition}


def _percentile_value(entry) -> str:
    if isinstance(entry, dict):
        return fmt_ms(entry.get("value_ms", entry.get("value")))
    return fmt_ms(entry) if isinstance(entry, (int, float)) else "—"


def _is_percentile_set(value) -> bool:
    return isinstance(value, dict) and any(key in value for key, _ in PERCENTILES)


def metric_rows(metrics: dict, scope: str) -> list[dict]:
    """One row per percentile-set metric of a mapping: scope, metric label, P50…P99.9, n."""
    rows = []
    for key, value in (metrics or {}).items():
        if not _is_percentile_set(value):
            continue
        p50 = value.get("p50") if isinstance(value.get("p50"), dict) else {}
        rows.append({"scope": scope, "metric": METRIC_LABELS.get(key, key),
                     **{label: _percentile_value(value.get(k)) for k, label in PERCENTILES},
                     "n": fmt_count(p50.get("n"))})
    return rows


def streaming(section: dict | None) -> dict | None:
    """Streaming metrics table (run, then per class) and scalar facts; None when absent."""
    if not section:
        return None
    rows = metric_rows(section, "all")
    for cls, metrics in (section.get("classes") or {}).items():
        rows += metric_rows(metrics, str(cls))
    facts = [{"key": str(k), "value": fmt_number(v)} for k, v in section.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not rows and not facts:
        return None
    return {"rows": rows, "facts": facts, "labels": [label for _, label in PERCENTILES]}


def sweep(section: dict | None) -> tuple[dict | None, dict | None]:
    """(table data, chart series) of a load sweep; (None, None) when absent."""
    steps = (section or {}).get("steps") or []
    if not steps:
        return None, None
    rows = [{"offered": fmt_rate(s.get("offered_rps")), "achieved": fmt_rate(s.get("achieved_rps")),
             "p50": fmt_ms(s.get("p50_ms")), "p99": fmt_ms(s.get("p99_ms")),
             "errors": fmt_share(s.get("error_rate")),
             "result": {True: "pass", False: "fail"}.get(s.get("passed"), "—")} for s in steps]
    table = {"rows": rows, "knee": fmt_rate(section.get("knee_rps")),
             "max_under_slo": fmt_rate(section.get("max_rate_under_slo_rps")),
             "slo": str(section.get("slo") or "")}
    chart = {"achieved": [s.get("achieved_rps") for s in steps], "p50": [s.get("p50_ms") for s in steps],
             "p99": [s.get("p99_ms") for s in steps], "offered": [s.get("offered_rps") for s in steps],
             "knee": section.get("knee_rps"), "max_under_slo": section.get("max_rate_under_slo_rps")}
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
