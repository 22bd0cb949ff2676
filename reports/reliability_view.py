"""Report data for outages, the soak view and record retention (pre-formatted text).

Draws the analysis sections ``outages``, ``soak`` and ``retention`` as their types
(analysis_model/health.py; read once by reports/data.py through reports/upgrade.py); each function
returns None when its section has nothing to show, so the template can skip it.
"""

from __future__ import annotations

from tailscope.analysis_model.health import Outages, Retention, Soak, TrendVerdict
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_offset, fmt_rate, fmt_share
from tailscope.reports.upgrade import trend_verdict_of

MB = "MB"


def _fmt_seconds(ms) -> str:
    return "—" if ms is None else f"{ms / 1e3:,.1f} s"


def outage_data(section: Outages | None, origin_ns) -> dict | None:
    """Rows of the outage table (the ``outages`` section; times as s since ``origin_ns``), or None when
    the target never went away (or the analysis has no such section)."""
    if section is None or not section.outages:
        return None
    rows = [{
        "kind": o.kind,
        "window": f"{fmt_offset(o.start_ns, origin_ns)} – {fmt_offset(o.end_ns, origin_ns)}",
        "duration": _fmt_seconds(o.duration_ms),
        "requests": fmt_count(o.requests),
        "errors": ", ".join(f"{k} {v:,}" for k, v in o.errors_by_kind.items()) or "—",
        "recovered": "yes" if o.recovered else "no (still down when the load ended)",
        "source": o.source,
    } for o in section.outages]
    return {"count": fmt_count(section.count), "total": _fmt_seconds(section.total_ms), "rows": rows}


def _mb(value) -> str:
    return "—" if value is None else f"{value:,.0f} {MB}"


def _verdict_line(verdict: TrendVerdict | None) -> dict | None:
    """A drift or leak verdict as text (None without one)."""
    if verdict is None:
        return None
    return {"verdict": verdict.verdict, "summary": verdict.summary}


def soak_data(section: Soak | None, origin_ns) -> dict | None:
    """Period rows and verdict lines (the ``soak`` section; times as s since ``origin_ns``), or None
    for a run with fewer than two periods (or an analysis without the section)."""
    if section is None or len(section.periods) < 2 or section.period_s is None:
        return None
    period_s = section.period_s
    label = "hour" if period_s == 3600 else (f"{period_s // 60} min" if period_s >= 60 else f"{period_s} s")
    rows = [{
        "window": f"{fmt_offset(p.start_ns, origin_ns)} – {fmt_offset(p.end_ns, origin_ns)}",
        "requests": fmt_count(p.requests), "errors": fmt_count(p.errors),
        "error_rate": fmt_share(p.error_rate), "achieved": fmt_rate(p.achieved_rps),
        "p50": fmt_ms(p.p50_ms), "p99": fmt_ms(p.p99_ms) + ("" if p.p99_claimed else " *"),
        "target_rss": _mb(p.target_rss_max_mb), "harness_rss": _mb(p.harness_rss_max_mb),
    } for p in section.periods]
    return {"period": label, "rows": rows, "drift": _verdict_line(trend_verdict_of(section.drift, "soak.drift")),
            "leak": _verdict_line(trend_verdict_of(section.leak, "soak.leak")),
            "source": "diagnosis detectors" if section.verdicts_source == "patterns" else "soak analysis"}


def retention_data(section: Retention | None) -> dict | None:
    """Facts about selective record keeping (the ``retention`` section), or None when every record
    was kept (or the analysis has no such section)."""
    if section is None or not section.sampled:
        return None
    budget = section.disk_budget_bytes
    return {
        "kept": f"{fmt_count(section.records_kept)} of {fmt_count(section.requests)} "
                f"({fmt_share(section.kept_share)})",
        "sample_rate": f"{section.sample_rate:g} (configured {section.configured_sample_rate:g})",
        "intervals": fmt_count(len(section.keep_intervals)),
        "around": _fmt_seconds((section.full_records_around_spikes_s or 0) * 1e3),
        "budget": "none" if not budget else f"{budget / 1e6:,.0f} MB",
    }
