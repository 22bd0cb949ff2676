"""The comparison report: a run against its baseline, as one self-contained HTML page.

``render_comparison(comparison)`` renders the dict that ``tailscope compare``
builds (docs/analyzers/compare.md), answer first: the regression verdict; what
moved (each significant or regressed percentile of all requests, baseline →
current) and whether it is real (the interval of the change excludes 0, and
both runs hold enough requests to claim the percentile); which stage moved;
then the details — the checks, every percentile change with its intervals, both
runs' latency distributions overlaid (histogram and CDF, log axes) and the runs.
Like the run report it embeds plotly (packed), escapes every run string and
needs no network. Every key is read defensively: a comparison without
distributions renders its tables without the charts.
"""

from __future__ import annotations

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.records import Distribution
from tailscope.reports.distribution_view import distribution_charts
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_rate, fmt_share, fmt_signed_ms
from tailscope.reports.html import render_page
from tailscope.support.units import percentile_label

COMPARE_SCRIPTS = ("report_common.js", "compare.js")
#: The percentile rows' metrics in words (``latency P50``, ``service time P99``).
METRIC_NAMES = {"latency_ms": "latency", "service_time_ms": "service time"}


def figure_name(change: dict) -> str:
    """A percentile row's figure: its metric and percentile, ``latency P50``, ``service time P99.9``."""
    metric = change.get("metric") or "latency_ms"
    return (f"{METRIC_NAMES.get(metric, str(metric))} "
            f"{percentile_label(str(change.get('percentile')))}")


def _interval(pair) -> str:
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or None in pair:
        return "—"
    return f"{fmt_ms(pair[0])} – {fmt_ms(pair[1])}"


def _signed_interval(pair) -> str:
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or None in pair:
        return "—"
    return f"{fmt_signed_ms(pair[0])} … {fmt_signed_ms(pair[1])}"


def _relative(value) -> str:
    return "—" if value is None else f"{value:+.1%}"


def percentile_change_rows(changes: list[dict]) -> list[dict]:
    """One row per compared percentile: values with CIs, change with its interval, judgement."""
    rows = []
    for c in changes or []:
        judgement = "regressed" if c.get("regressed") else ("improved" if c.get("improved") else
                                                            ("changed" if c.get("significant") else "no significant change"))
        rows.append({
            "scope": str(c.get("cls") or "all"),
            "metric": METRIC_NAMES.get(c.get("metric") or "latency_ms", str(c.get("metric"))), "figure": figure_name(c),
            "percentile": percentile_label(str(c.get("percentile"))),
            "baseline": fmt_ms(c.get("baseline_ms")), "baseline_ci": _interval(c.get("baseline_ci_ms")),
            "current": fmt_ms(c.get("current_ms")), "current_ci": _interval(c.get("current_ci_ms")),
            "change": fmt_signed_ms(c.get("change_ms")), "change_ci": _signed_interval(c.get("change_ci_ms")),
            "relative": _relative(c.get("relative_change")), "judgement": judgement,
            "css": "fail" if c.get("regressed") else ("pass" if c.get("improved") else "none"),
        })
    return rows


def moved_rows(changes: list[dict]) -> list[dict]:
    """What moved, in words: each latency percentile of all requests that changed significantly or
    regressed, ``{"percentile", "what", "real", "is_real", "css"}``."""
    rows = []
    for c in changes or []:
        if c.get("cls") or (c.get("metric") or "latency_ms") != "latency_ms":
            continue
        if not (c.get("significant") or c.get("regressed")):
            continue
        name = figure_name(c)
        interval = _signed_interval(c.get("change_ci_ms"))
        claimable = c.get("claimable", True)
        real = bool(c.get("significant")) and claimable
        if real:
            why = f"real: the 95% interval of the change, {interval}, excludes 0"
        elif c.get("significant"):
            why = (f"not established: the interval {interval} excludes 0, but the sides do not both hold "
                   f"enough requests to claim {name}")
        else:
            why = f"not shown to be real: the interval {interval} includes 0"
        rows.append({"percentile": name,
                     "what": f"{name} {fmt_ms(c.get('baseline_ms'))} → {fmt_ms(c.get('current_ms'))} "
                             f"({fmt_signed_ms(c.get('change_ms'))}, {_relative(c.get('relative_change'))})",
                     "real": why, "is_real": real,
                     "css": "fail" if c.get("regressed") else ("pass" if c.get("improved") else "none")})
    return rows


def check_rows(checks: list[dict]) -> list[dict]:
    return [{"name": str(c.get("name", "?")), "result": "pass" if c.get("passed") else "fail",
             "message": str(c.get("message") or "")} for c in checks or []]


def stage_rows(stages: list[dict], changed: str | None) -> list[dict]:
    return [{"stage": str(s.get("stage")), "baseline": fmt_ms(s.get("baseline_ms")),
             "current": fmt_ms(s.get("current_ms")), "change": fmt_signed_ms(s.get("change_ms")),
             "changed": s.get("stage") == changed} for s in stages or []]


def run_facts(run: dict) -> dict:
    """A side (or one of its runs) as text; ``runs``: each run of a side with several."""
    run = run or {}
    runs = run.get("runs") or []
    return {"name": str(run.get("name") or "—"), "path": str(run.get("path") or "—"),
            "requests": fmt_count(run.get("requests")), "achieved": fmt_rate(run.get("achieved_rps")),
            "errors": fmt_share(run.get("error_rate")), "started": str(run.get("started") or "—"),
            "duration": "—" if run.get("duration_s") is None else f"{run['duration_s']:.1f} s",
            "run_count": int(run.get("run_count") or 1),
            "runs": [run_facts(r) for r in runs] if len(runs) > 1 else []}


def method_text(method: dict | None) -> str:
    """How the intervals were resampled, in one sentence (empty for a comparison without ``method``)."""
    if not method:
        return ""
    return (f"Intervals: {method.get('name')} ({method.get('baseline_runs')} baseline run(s), "
            f"{method.get('current_runs')} new run(s)). {method.get('note') or ''}").strip()


#: The LLM rows' figures in words (analyzers/comparison/llm_compare.py).
LLM_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "output_tokens_per_s": "output tokens/s", "goodput": "LLM goodput"}
LLM_LABELS.update({"ttft_first_turn_ms": "TTFT turn 1", "ttft_later_turns_ms": "TTFT later turns",
                   "session_duration_ms": "session duration", "session_tokens": "tokens per session"})
LLM_LABELS["prefix_cache_hit_rate"] = "server prefix-cache hit rate"
LLM_LABELS.update({"ttfa_ms": "time to first answer token", "reasoning_tpot_ms": "reasoning TPOT",
                   "time_to_tool_call_ms": "time to complete tool call",
                   "image_ttft_ms": "TTFT with images", "ranking_e2e_ms": "rerank/score end-to-end"})


def _llm_value(row: dict, value) -> str:
    if value is None:
        return "—"
    if row.get("unit") == "share":
        return f"{100 * value:.1f}%"
    return f"{value:,.1f} {row.get('unit') or ''}".strip()


def _llm_change(row: dict, value) -> str:
    if value is None:
        return "—"
    if row.get("unit") == "share":
        return f"{100 * value:+.1f} points"
    return f"{value:+,.1f} {row.get('unit') or ''}".strip()


def llm_change_rows(section: dict | None) -> list[dict]:
    """The comparison's ``llm`` rows (TTFT/TPOT P50 and P99, output tokens/s, goodput) as text."""
    rows = []
    for r in (section or {}).get("rows") or []:
        low, high = (r.get("change_ci") or [None, None])[:2]
        css = "fail" if r.get("regressed") else "pass" if r.get("improved") else "none"
        judgement = ("shown, not judged (one server-wide ratio per run)" if r.get("judged") is False
                     else "REGRESSED" if r.get("regressed") else "improved" if r.get("improved")
                     else "significant (too few samples)" if r.get("significant") and not r.get("claimable")
                     else "significant, within the threshold" if r.get("significant") else "no significant change")
        rows.append({"metric": LLM_LABELS.get(r.get("metric"), str(r.get("metric"))),
                     "percentile": str(r.get("percentile") or "").upper(),
                     "baseline": _llm_value(r, r.get("baseline")), "current": _llm_value(r, r.get("current")),
                     "change": _llm_change(r, r.get("change")),
                     "change_ci": f"{_llm_change(r, low)} … {_llm_change(r, high)}" if low is not None else "—",
                     "relative": _relative(r.get("relative_change")),
                     "worse": "lower" if r.get("lower_is_worse") else "higher", "judgement": judgement, "css": css})
    return rows


def environment_rows(environment: dict | None) -> dict | None:
    """The two runs' environments side by side and the differences compare warns about
    (``{"rows": [{"fact", "baseline", "current", "differs"}], "warnings": [message]}``);
    None in comparisons made before environments were recorded."""
    if not environment:
        return None
    before, now = environment.get("baseline") or {}, environment.get("current") or {}
    differing = {d["field"] for d in environment.get("differences") or []}
    labels = (("server_kind", "server kind"), ("server_version", "server version"), ("model", "model"),
              ("max_model_len", "max_model_len"), ("gpus", "GPUs"), ("gpu_driver", "GPU driver"),
              ("cpu_model", "CPU model"), ("kernel", "kernel"), ("tailscope_version", "tailscope"),
              ("scenario_sha256", "scenario SHA-256"))

    def text(env: dict, key: str) -> str:
        value = env.get(key)
        if key == "gpus" and value is None and env.get("gpu_absent"):
            return f"none ({env['gpu_absent']})"
        if key == "scenario_sha256" and value:
            return str(value)[:12]
        return "not recorded" if value is None else str(value)

    return {"rows": [{"fact": label, "baseline": text(before, key), "current": text(now, key),
                      "differs": key in differing} for key, label in labels],
            "warnings": [str(d["message"]) for d in environment.get("differences") or []]}


def build_comparison_data(comparison: dict) -> dict:
    """The presentation dict of a comparison (pre-formatted text + chart series)."""
    verdict = comparison.get("verdict") or {}
    regressed = bool(verdict.get("regressed"))
    changed = comparison.get("changed_stage") or {}
    distributions = comparison.get("distributions") or {}
    charts = {"sets": [s for s in (
        _overlay(distributions.get("baseline"), " (baseline)", "dash"),
        _overlay(distributions.get("current"), " (current)", "solid")) if s]}
    return {
        "title": "tailscope comparison — " + str(comparison.get("title") or (
            f"{run_facts(comparison.get('current'))['name']} vs {run_facts(comparison.get('baseline'))['name']}")),
        "method": method_text(comparison.get("method")),
        "verdict": {"label": "REGRESSION" if regressed else "NO REGRESSION", "css": "fail" if regressed else "pass",
                    "summary": str(verdict.get("summary") or "")},
        "baseline": run_facts(comparison.get("baseline")),
        "current": run_facts(comparison.get("current")),
        "checks": check_rows(comparison.get("checks")),
        "percentiles": percentile_change_rows(comparison.get("percentiles")),
        "moved": moved_rows(comparison.get("percentiles")),
        "llm": llm_change_rows(comparison.get("llm")),
        "changed_stage": {"stage": str(changed.get("stage")), "summary": str(changed.get("summary") or ""),
                          "change": fmt_signed_ms(changed.get("change_ms"))} if changed.get("stage") else None,
        "stages": stage_rows(comparison.get("stages"), changed.get("stage")),
        "has_distributions": bool(charts["sets"]),
        "charts": charts,
        "environment": environment_rows(comparison.get("environment")),
    }


def _overlay(distribution: dict | None, suffix: str, dash: str) -> dict | None:
    curves = distribution_charts(decode(Distribution, distribution, "distributions") if distribution else None)
    if not curves:
        return None
    return {"classes": [c for c in curves["classes"] if c["name"] == "all"] or curves["classes"][:1],
            "suffix": suffix, "dash": dash}


def render_comparison(comparison: dict, compress_plotly: bool = True) -> str:
    """The comparison page (UTF-8 HTML text) of one comparison dict."""
    data = build_comparison_data(comparison)
    return render_page("compare.html", data, data["charts"], COMPARE_SCRIPTS, compress_plotly)
