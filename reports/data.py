"""The report's data: every number the HTML / Markdown shows, pre-formatted.

``build_report_data(analysis)`` reads only the analysis dict, and is the one
function here that takes it: it decodes each section once (reports/upgrade.py
readers), computes the load origin once (``Run.load_origin_ns``) and hands the
typed sections on to the views that draw them. Templates loop and branch over
this dict and do no arithmetic; chart series go to the page as one JSON object
(``charts``), with times in seconds since the load start.
"""

from __future__ import annotations

import json

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.events import Events
from tailscope.analysis_model.llm import Llm
from tailscope.analysis_model.records import Distribution, Window
from tailscope.analysis_model.run import Environment, Run
from tailscope.analysis_model.server import OtherTraffic, ServerLoad
from tailscope.analysis_model.signals import Signals
from tailscope.analysis_model.stages import Stages
from tailscope.analysis_model.summary import Summary
from tailscope.analysis_model.verdict import Verdict
from tailscope.reports import extras, llm_view, loadgen_view, reliability_view, server_view
from tailscope.reports.cards import rank_cards, spike_cards
from tailscope.reports.distribution_view import distribution_charts
from tailscope.reports.findings_view import error_sample_rows, findings_data
from tailscope.reports.formatting import (  # noqa: F401
    NS_PER_S,
    fault_counts_text,
    fmt_count,
    fmt_iso,
    fmt_metric,
    fmt_ms,
    fmt_offset,
    fmt_rate,
    fmt_share,
    percentile_cells,
)
from tailscope.reports.overview_view import detection_text, signals_text, slo_chips, tail_text
from tailscope.reports.signal_view import summarise_panels
from tailscope.reports.timeline import fault_label, timeline_charts
from tailscope.reports.tracing_view import receiver_rows, stage_data
from tailscope.reports.upgrade import (
    analysis_sweep_of,
    distribution_of,
    error_samples_of,
    findings_of,
    generator_of,
    limited_bands_of,
    llm_of,
    other_traffic_of,
    outages_of,
    retention_of,
    rolling_lines_of,
    run_of,
    server_load_of,
    slow_requests_of,
    soak_of,
    spike_detection_of,
    spikes_of,
    stages_of,
    streaming_of,
    tail_line_of,
    token_spikes_of,
    upgrade_analysis,
    warnings_of,
    windows_of,
)
from tailscope.support.units import percentile_label

PERCENTILE_LABELS = tuple((key, percentile_label(key)) for key in ("p50", "p90", "p95", "p99", "p999"))
HEADLINE = ("p50", "p99", "p999")


#: The banner's CSS class of each outcome word (report.css).
OUTCOME_CSS = {"passed": "pass", "failed": "fail", "inconclusive": "inconclusive", "incomplete": "incomplete"}


def verdict_data(verdict: Verdict) -> dict:
    """The report's verdict banner and SLO table. ``label`` is the outcome word (PASSED, FAILED,
    INCONCLUSIVE, INCOMPLETE; NO SLOs for a complete run without any); ``detail`` the covered span
    of an incomplete run or what would make an inconclusive one conclusive (else empty); each row's
    ``result`` is pass, fail or not claimed, its ``css`` pass, fail or unclaimed."""
    rows = [{
        "text": row.slo, "observed": fmt_metric(row.metric, row.observed),
        "threshold": fmt_metric(row.metric, row.threshold), "result": _ROW_RESULTS[row.status], "css": row.status,
        "claimed": "yes" if row.claimed else f"no: {row.unclaimed_note()}",
    } for row in verdict.slos]
    outcome = verdict.outcome
    detail = "" if outcome == "failed" else verdict.detail
    if not rows and outcome == "passed":
        return {"label": "NO SLOs", "css": "none", "rows": [], "failed": [], "other_failures": [], "detail": ""}
    texts = {row["text"] for row in rows}
    return {"label": outcome.upper(), "css": OUTCOME_CSS[outcome], "detail": detail,
            "rows": rows, "failed": list(verdict.failed),
            "other_failures": [f for f in verdict.failed if f not in texts]}


_ROW_RESULTS = {"pass": "pass", "fail": "fail", "unclaimed": "not claimed"}


def percentile_rows(summary: Summary) -> list[dict]:
    """The percentile table: P50…P99.9 (value, 95% CI, n, claim, bound; ms) and the maximum, of
    latency and of service time."""
    rows = []
    for metric_label, percentiles in (("latency", summary.latency_ms), ("service time", summary.service_time_ms)):
        for key, label in PERCENTILE_LABELS:
            rows.append({"metric": metric_label, "name": label, **percentile_cells(getattr(percentiles, key))})
        rows.append({"metric": metric_label, "name": "max", "value": fmt_ms(percentiles.max.value_ms),
                     "ci": "", "n": fmt_count(percentiles.p50.n), "claimed": "", "bound": ""})
    return rows


def class_rows(classes: dict[str, Summary]) -> list[dict]:
    """One row per request class: counts, error rate, achieved rate and latency P50…P99.9 (ms), the
    P99's 95% CI and whether it is claimed."""
    return [{
        "name": name, "requests": fmt_count(s.requests), "errors": fmt_count(s.errors),
        "error_rate": fmt_share(s.error_rate), "achieved": fmt_rate(s.achieved_rps),
        "p50": fmt_ms(s.latency_ms.p50.value_ms), "p90": fmt_ms(s.latency_ms.p90.value_ms),
        "p99": fmt_ms(s.latency_ms.p99.value_ms), "p99_ci": percentile_cells(s.latency_ms.p99)["ci"],
        "p999": fmt_ms(s.latency_ms.p999.value_ms),
        "p99_claimed": "claimed" if s.latency_ms.p99.claimed else "not claimed",
    } for name, s in classes.items()]


def _key_values(mapping: dict) -> list[dict]:
    return [{"key": str(k), "value": v if isinstance(v, str) else json.dumps(v)} for k, v in mapping.items()]


def environment_items(env: Environment | None) -> list[dict]:
    """The run's environment as a compact list of ``{"key", "value"}`` (server, model, GPUs, CPU,
    kernel, tailscope, scenario hash); what was not recorded says so. [] for analyses before it."""
    if env is None:
        return []

    def given(value) -> str:
        return "not recorded" if value is None else str(value)

    if env.server_probed is False:
        server = f"{env.server_kind or 'unnamed kind'} (not asked: no OpenAI-API classes or known server preset)"
    else:
        server = " ".join(str(v) for v in (env.server_kind, env.server_version) if v) or "not recorded"
    model = given(env.model) + (f" (max_model_len {env.max_model_len})" if env.max_model_len else "")
    gpus = env.gpus or (f"none ({env.gpu_absent})" if env.gpu_absent else "not recorded")
    if env.gpus and env.gpu_driver:
        gpus += f", driver {env.gpu_driver}"
    sha = env.scenario_sha256
    return [{"key": "server", "value": server}, {"key": "model", "value": model}, {"key": "GPUs", "value": gpus},
            {"key": "CPU", "value": given(env.cpu_model)}, {"key": "kernel", "value": given(env.kernel)},
            {"key": "tailscope", "value": given(env.tailscope_version)},
            {"key": "scenario SHA-256", "value": sha[:12] if sha else "not recorded"}]


def setup_data(run: Run, signals: Signals, window_s: float, receiver: dict) -> dict:
    """The setup tab: the run's facts, scenario, host, environment, signal sources and receiver
    (``receiver``: the section as written, :func:`~.tracing_view.receiver_rows`); ``window_s`` the
    analysis's display window (s)."""
    return {
        "run_rows": [
            {"key": "name", "value": run.name}, {"key": "status", "value": run.status},
            {"key": "path", "value": run.path}, {"key": "target", "value": run.target or "—"},
            {"key": "started", "value": fmt_iso(run.start_ns)}, {"key": "ended", "value": fmt_iso(run.end_ns)},
            {"key": "load duration", "value": f"{run.duration_s:.1f} s"},
            {"key": "format", "value": str(run.format_version)},
            {"key": "tailscope", "value": str(run.tailscope_version)},
            {"key": "window", "value": f"{window_s:g} s"},
        ],
        "scenario_json": json.dumps(run.scenario, indent=2, sort_keys=True, default=str),
        "host_rows": _key_values(run.host),
        "environment": environment_items(run.environment),
        "sources": [{"name": name, "state": "available" if s.available else "unavailable",
                     "reason": s.reason or ""} for name, s in signals.sources.items()],
        "receiver_rows": receiver_rows(receiver),
    }


def event_data(events: Events, origin_ns) -> dict:
    """The fault table's rows and the GC line (``events``; times as s since ``origin_ns``)."""
    gc = events.gc_pauses
    return {
        "faults": [{"kind": fault_label(f),
                    "source": f.source or "",
                    "window": f"{fmt_offset(f.start_ns, origin_ns)} – {fmt_offset(f.end_ns, origin_ns)}",
                    "duration": fmt_ms(f.duration_ms),
                    "observed": fault_counts_text(f.attributes)} for f in events.faults],
        "gc": f"{gc.count:,} GC pauses, {fmt_ms(gc.total_ms)} in total, longest {fmt_ms(gc.max_ms)}",
    }


def chart_data(timeline: dict, cards: dict, stages: Stages, distribution: Distribution | None,
               sweep_chart: dict | None, llm: Llm | None, windows: list[Window], server_load: ServerLoad | None,
               other: OtherTraffic | None, origin_ns: int) -> tuple[dict, dict]:
    """(series for the page's charts (one JSON block; x in seconds since ``origin_ns``, epoch ns, the
    load start), the :func:`~.signal_view.summarise_panels` of the signal panels, whose drawn panels
    the charts hold); ``timeline``: :func:`.timeline.timeline_charts`, ``cards``:
    :func:`.cards.spike_cards`, ``sweep_chart``: the series of the analysis's own sweep
    (:func:`.extras.sweep`), or None; the rest the sections drawn, as their types."""
    by_stage = stages.occurred()
    signals = summarise_panels(timeline["panels"])
    return {
        **timeline,
        "panels": signals["panels"],
        "stages": {"names": list(by_stage), "p50": [s.p50_ms for s in by_stage.values()],
                   "p99": [s.p99_ms for s in by_stage.values()]},
        "cards": cards["charts"],
        "distribution": distribution_charts(distribution),
        "sweep": sweep_chart,
        "llm": llm_view.llm_charts(llm, windows, origin_ns),
        "server": server_view.server_panels(server_load, other, origin_ns),
        "other": server_view.other_traffic_chart(other, origin_ns),
        "slow_split": server_view.slow_split_chart(stages.slow_split),
    }, signals


def build_report_data(analysis: dict) -> dict:
    """The presentation dict of one analysis (see module docstring); an older analysis is read
    with the current names (:func:`upgrade_analysis`)."""
    analysis = upgrade_analysis(analysis)
    summary, run = decode(Summary, analysis["summary"], "summary"), run_of(analysis)
    origin = run.load_origin_ns  # epoch ns; None where the run says neither start
    x_origin = origin or 0  # the charts' x = 0
    latency_spikes, windows, llm = spikes_of(analysis), windows_of(analysis), llm_of(analysis)
    cards = spike_cards(latency_spikes, origin)
    stages, events = stages_of(analysis), decode(Events, analysis["events"], "events")
    signal_section = decode(Signals, analysis["signals"], "signals")
    other = other_traffic_of(analysis)
    streaming, slow, distribution = streaming_of(analysis), slow_requests_of(analysis), distribution_of(analysis)
    detection = spike_detection_of(analysis)
    sweep_table, sweep_chart = extras.sweep(analysis_sweep_of(analysis))
    timeline = timeline_charts(
        origin_ns=x_origin, duration_s=run.duration_s, windows=windows, rolling=rolling_lines_of(analysis),
        tail=tail_line_of(analysis), slow=slow, spikes=latency_spikes, detection=detection, events=events,
        limited=limited_bands_of(analysis), signals=signal_section)
    charts, signals = chart_data(timeline, cards, stages, distribution, sweep_chart, llm, windows,
                                 server_load_of(analysis), other, x_origin)
    verdict_section = decode(Verdict, analysis["verdict"], "verdict")
    verdict = verdict_data(verdict_section)
    classes = decode(dict[str, Summary], analysis["classes"], "classes")
    class_slos = loadgen_view.class_slo_cells(list(classes), summary.goodput, verdict_section)
    # an LLM run's TTFT/TPOT spikes, carded beside latency's
    tokens = llm_view.token_spike_cards(token_spikes_of(analysis), latency_spikes, origin)
    ranked, capped = rank_cards(cards["cards"], tokens["cards"])
    return {
        "title": f"tailscope — {run.name}",
        "run_name": run.name,
        "verdict": verdict,
        "slo_chips": slo_chips(verdict["rows"]),
        "headline": [{"label": label, **percentile_cells(getattr(summary.latency_ms, key))}
                     for key, label in PERCENTILE_LABELS if key in HEADLINE],
        "rates": {"achieved": fmt_rate(summary.achieved_rps), "offered": fmt_rate(summary.offered_rps),
                  "requests": fmt_count(summary.requests), "duration": f"{summary.duration_s:.1f} s"},
        "errors": {"count": fmt_count(summary.errors), "rate": fmt_share(summary.error_rate),
                   "by_kind": [{"kind": k, "count": fmt_count(v)} for k, v in summary.errors_by_kind.items()],
                   "top": [{"message": e.message, "count": fmt_count(e.count)} for e in summary.top_errors]},
        "lateness": {"p50": fmt_ms(summary.lateness_ms.p50_ms), "p99": fmt_ms(summary.lateness_ms.p99_ms),
                     "late_share": fmt_share(summary.lateness_ms.late_share)},
        "warnings": [{"code": w.code, "message": w.message} for w in warnings_of(analysis)],
        "findings": findings_data(findings_of(analysis)),
        "error_samples": error_sample_rows(error_samples_of(analysis)),
        "percentile_rows": percentile_rows(summary),
        "class_rows": [{**row, **class_slos[row["name"]]} for row in class_rows(classes)],
        "generator": loadgen_view.generator_data(generator_of(analysis), summary.lateness_ms, run.load_start_ns),
        "stream_rates": loadgen_view.streaming_rates(streaming),
        "stages": stage_data(stages),
        "spikes": cards["rows"],
        "spike_cards": ranked,
        "minor_spikes": cards["minor"],
        "minor_token_spikes": tokens["minor"],
        "uncarded_spikes": cards["uncarded"] + capped,
        "detection": detection_text(detection, len(cards["rows"]), len(cards["minor"])),
        "tail": tail_text(charts["tail"], len(windows)),
        "signals": {"text": signals_text(signals), "constants": signals["constants"],
                    "panels": len(signals["panels"])},
        "events": event_data(events, origin),
        "outages": reliability_view.outage_data(outages_of(analysis), origin),
        "soak": reliability_view.soak_data(soak_of(analysis), origin),
        "retention": reliability_view.retention_data(retention_of(analysis)),
        "setup": setup_data(run, signal_section, analysis["window_s"], analysis["receiver"]),
        "has_windows": bool(windows),
        "goodput": extras.goodput(summary.goodput),
        "loop": extras.loop_label(run.scenario),
        "streaming": extras.streaming(streaming),
        "llm": llm_view.llm_data(llm, origin),
        "llm_headline": llm_view.llm_headline(llm, origin),
        "server": charts["server"],  # the panels' titles; their series travel in charts
        "other_traffic": server_view.other_traffic_text(other, stages.joined_requests),
        "has_other_chart": charts["other"] is not None,
        "slow_split": server_view.slow_split_data(stages.slow_split),
        "sweep": sweep_table,
        "has_distribution": bool(distribution is not None and distribution.bin_edges_ms),
        "slow_points": {"shown": fmt_count(slow.shown if slow is not None else None),
                        "above": fmt_count(slow.above_threshold if slow is not None else None),
                        "threshold": fmt_ms(slow.threshold_ms if slow is not None else None)},
        "charts": charts,
    }
