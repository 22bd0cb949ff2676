"""The report's data: every number the HTML / Markdown shows, pre-formatted.

``build_report_data(analysis)`` reads only the analysis dict. Templates loop
and branch over this dict and do no arithmetic; chart series go to the page
as one JSON object (``charts``), with times in seconds since the load start.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

NS_PER_S = 1_000_000_000
PERCENTILE_LABELS = (("p50", "P50"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99"), ("p999", "P99.9"))
HEADLINE = ("p50", "p99", "p999")


def fmt_ms(value) -> str:
    """``12.3 ms`` (3 significant figures below 100 ms), ``—`` for None."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f} ms"
    if abs(value) >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def fmt_count(value) -> str:
    return "—" if value is None else f"{int(value):,}"


def fmt_rate(value) -> str:
    return "—" if value is None else f"{value:,.2f} req/s"


def fmt_share(value) -> str:
    return "—" if value is None else f"{value:.2%}"


def fmt_iso(epoch_ns) -> str:
    if epoch_ns is None:
        return "—"
    moment = datetime.fromtimestamp(epoch_ns / NS_PER_S, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fmt_offset(epoch_ns, origin_ns) -> str:
    return "—" if epoch_ns is None or origin_ns is None else f"{(epoch_ns - origin_ns) / NS_PER_S:.1f} s"


def fmt_threshold(row: dict) -> str:
    metric, value = row.get("metric"), row.get("threshold")
    if metric == "error_rate":
        return fmt_share(value)
    if metric == "achieved_rps":
        return fmt_rate(value)
    return fmt_ms(value)


def fmt_observed(row: dict) -> str:
    metric, value = row.get("metric"), row.get("observed")
    if metric == "error_rate":
        return fmt_share(value)
    if metric == "achieved_rps":
        return fmt_rate(value)
    return fmt_ms(value)


def percentile_cells(entry: dict) -> dict:
    """Value, CI text and claim text of one percentile entry."""
    return {
        "value": fmt_ms(entry["value_ms"]),
        "ci": "—" if entry["value_ms"] is None else f"{fmt_ms(entry['ci_low_ms'])} – {fmt_ms(entry['ci_high_ms'])}",
        "n": fmt_count(entry["n"]),
        "claimed": "claimed" if entry["claimed"] else f"not claimed (n = {entry['n']:,})",
        "bound": fmt_ms(entry.get("bound_ms")),
    }


def verdict_data(verdict: dict) -> dict:
    rows = [{
        "text": row["slo"], "observed": fmt_observed(row), "threshold": fmt_threshold(row),
        "result": "pass" if row["passed"] else "fail",
        "claimed": "yes" if row["claimed"] else "no (too few samples)",
    } for row in verdict["slos"]]
    if not rows:
        return {"label": "NO SLOs", "css": "none", "rows": [], "failed": []}
    return {"label": "PASSED" if verdict["passed"] else "FAILED", "css": "pass" if verdict["passed"] else "fail",
            "rows": rows, "failed": list(verdict["failed"])}


def percentile_rows(summary: dict) -> list[dict]:
    rows = []
    for metric_key, metric_label in (("latency_ms", "latency"), ("service_time_ms", "service time")):
        for key, label in PERCENTILE_LABELS:
            rows.append({"metric": metric_label, "name": label, **percentile_cells(summary[metric_key][key])})
        rows.append({"metric": metric_label, "name": "max", "value": fmt_ms(summary[metric_key]["max_ms"]),
                     "ci": "", "n": fmt_count(summary[metric_key]["p50"]["n"]), "claimed": "", "bound": ""})
    return rows


def class_rows(classes: dict) -> list[dict]:
    return [{
        "name": name, "requests": fmt_count(s["requests"]), "errors": fmt_count(s["errors"]),
        "error_rate": fmt_share(s["error_rate"]), "achieved": fmt_rate(s["achieved_rps"]),
        "p50": fmt_ms(s["latency_ms"]["p50"]["value_ms"]), "p99": fmt_ms(s["latency_ms"]["p99"]["value_ms"]),
        "p99_claimed": "claimed" if s["latency_ms"]["p99"]["claimed"] else "not claimed",
    } for name, s in classes.items()]


def stage_data(stages: dict) -> dict:
    return {
        "joined": f"{fmt_share(stages['joined_fraction'])} of successful requests "
                  f"({fmt_count(stages['joined_requests'])}) joined a server span",
        "rows": [{"stage": name, "p50": fmt_ms(s["p50_ms"]), "p99": fmt_ms(s["p99_ms"]),
                  "mean": fmt_ms(s["mean_ms"]), "count": fmt_count(s["count"])}
                 for name, s in stages["by_stage"].items()],
        "unmapped": [{"name": str(u["name"]), "count": fmt_count(u["count"])} for u in stages["unmapped_span_names"]],
    }


def spike_data(spikes: list[dict], origin_ns) -> list[dict]:
    out = []
    for index, spike in enumerate(spikes, 1):
        decomposition = spike["decomposition"]
        out.append({
            "number": index,
            "window": f"{fmt_offset(spike['start_ns'], origin_ns)} – {fmt_offset(spike['end_ns'], origin_ns)}",
            "start": fmt_iso(spike["start_ns"]), "peak": fmt_offset(spike["peak_ns"], origin_ns),
            "p99": fmt_ms(spike["p99_ms"]), "baseline": fmt_ms(spike["baseline_p99_ms"]),
            "excess": fmt_ms(spike["excess_ms"]), "requests": fmt_count(spike["requests"]),
            "dominant": decomposition["dominant_stage"] or "—",
            "summary": decomposition["summary"] or "",
            "slow_requests": fmt_count(decomposition["slow_requests"]),
            "stage_rows": [{"stage": stage, "normal": fmt_ms(v["normal"]["mean_ms"]), "slow": fmt_ms(v["slow"]["mean_ms"]),
                            "growth": fmt_ms(v["growth_ms"]), "dominant": stage == decomposition["dominant_stage"]}
                           for stage, v in decomposition["stages"].items()],
            "causes": [{"kind": c["kind"], "confidence": f"{c['confidence']:.0%}"} for c in spike["causes"]],
        })
    return out


def _key_values(mapping: dict) -> list[dict]:
    return [{"key": str(k), "value": v if isinstance(v, str) else json.dumps(v)} for k, v in mapping.items()]


def setup_data(analysis: dict) -> dict:
    run = analysis["run"]
    return {
        "run_rows": [
            {"key": "name", "value": run["name"]}, {"key": "status", "value": run["status"]},
            {"key": "path", "value": run["path"]}, {"key": "target", "value": run["target"] or "—"},
            {"key": "started", "value": fmt_iso(run["start_ns"])}, {"key": "ended", "value": fmt_iso(run["end_ns"])},
            {"key": "load duration", "value": f"{run['duration_s']:.1f} s"},
            {"key": "format", "value": str(run["format_version"])},
            {"key": "tailscope", "value": str(run["tailscope_version"])},
            {"key": "window", "value": f"{analysis['window_s']:g} s"},
        ],
        "scenario_json": json.dumps(run["scenario"], indent=2, sort_keys=True, default=str),
        "host_rows": _key_values(run["host"]),
        "sources": [{"name": name, "state": "available" if s["available"] else "unavailable",
                     "reason": s["reason"] or ""} for name, s in analysis["signals"]["sources"].items()],
        "receiver_rows": _key_values(analysis["receiver"]),
    }


def event_data(events: dict, origin_ns) -> dict:
    gc = events["gc_pauses"]
    return {
        "faults": [{"kind": str(f["attributes"].get("name", f["kind"])), "source": f["source"] or "",
                    "window": f"{fmt_offset(f['start_ns'], origin_ns)} – {fmt_offset(f['end_ns'], origin_ns)}",
                    "duration": fmt_ms(f["duration_ms"])} for f in events["faults"]],
        "gc": f"{gc['count']:,} GC pauses, {fmt_ms(gc['total_ms'])} in total, longest {fmt_ms(gc['max_ms'])}",
    }


def _seconds(values_ns, origin_ns) -> list:
    return [round((v - origin_ns) / NS_PER_S, 6) for v in values_ns]


def chart_data(analysis: dict) -> dict:
    """Series for the page's charts; x in seconds since the load start."""
    origin = analysis["run"]["load_start_ns"] or analysis["run"]["start_ns"] or 0
    windows = analysis["windows"]
    return {
        "x_title": "seconds since load start",
        "x_range": [0.0, analysis["run"]["duration_s"]],
        "latency": {
            "x": [round(((w["start_ns"] + w["end_ns"]) / 2 - origin) / NS_PER_S, 6) for w in windows],
            "p50": [w["p50_ms"] for w in windows], "p99": [w["p99_ms"] for w in windows],
        },
        "spikes": [{"x0": (s["start_ns"] - origin) / NS_PER_S, "x1": (s["end_ns"] - origin) / NS_PER_S,
                    "label": f"spike {i}"} for i, s in enumerate(analysis["spikes"], 1)],
        "faults": [{"x0": (f["start_ns"] - origin) / NS_PER_S, "x1": (f["end_ns"] - origin) / NS_PER_S,
                    "label": str(f["attributes"].get("name", f["kind"]))} for f in analysis["events"]["faults"]],
        "signals": [{"name": s["name"], "unit": s["unit"], "x": _seconds(s["t_ns"], origin), "y": s["values"]}
                    for s in analysis["signals"]["series"]],
        "stages": {"names": list(analysis["stages"]["by_stage"]),
                   "p50": [s["p50_ms"] for s in analysis["stages"]["by_stage"].values()],
                   "p99": [s["p99_ms"] for s in analysis["stages"]["by_stage"].values()]},
    }


def build_report_data(analysis: dict) -> dict:
    """The presentation dict of one analysis (see module docstring)."""
    summary, run = analysis["summary"], analysis["run"]
    origin = run["load_start_ns"] or run["start_ns"]
    return {
        "title": f"tailscope — {run['name']}",
        "run_name": run["name"],
        "verdict": verdict_data(analysis["verdict"]),
        "headline": [{"label": label, **percentile_cells(summary["latency_ms"][key])}
                     for key, label in PERCENTILE_LABELS if key in HEADLINE],
        "rates": {"achieved": fmt_rate(summary["achieved_rps"]), "offered": fmt_rate(summary["offered_rps"]),
                  "requests": fmt_count(summary["requests"]), "duration": f"{summary['duration_s']:.1f} s"},
        "errors": {"count": fmt_count(summary["errors"]), "rate": fmt_share(summary["error_rate"]),
                   "by_kind": [{"kind": k, "count": fmt_count(v)} for k, v in summary["errors_by_kind"].items()],
                   "top": [{"message": e["message"], "count": fmt_count(e["count"])} for e in summary["top_errors"]]},
        "lateness": {"p50": fmt_ms(summary["lateness_ms"]["p50_ms"]), "p99": fmt_ms(summary["lateness_ms"]["p99_ms"]),
                     "late_share": fmt_share(summary["lateness_ms"]["late_share"])},
        "warnings": [{"code": w["code"], "message": w["message"]} for w in analysis["warnings"]],
        "percentile_rows": percentile_rows(summary),
        "class_rows": class_rows(analysis["classes"]),
        "stages": stage_data(analysis["stages"]),
        "spikes": spike_data(analysis["spikes"], origin),
        "events": event_data(analysis["events"], origin),
        "setup": setup_data(analysis),
        "has_windows": bool(analysis["windows"]),
        "charts": chart_data(analysis),
    }
