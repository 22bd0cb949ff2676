"""The comparison report: a run against its baseline, as one self-contained HTML page.

``render_comparison(comparison)`` renders the dict that ``tailscope compare``
builds (docs/analyzers/compare.md), answer first: the regression verdict; what
moved (each significant or regressed percentile of all requests, baseline →
current) and whether it is real (the interval of the change excludes 0, and
both runs hold enough requests to claim the percentile); which stage moved;
then the details — the checks, every percentile change with its intervals, both
runs' latency distributions overlaid (histogram and CDF, log axes) and the runs.
Like the run report it embeds plotly (packed), escapes every run string and
needs no network. The comparison is read once, typed (analysis_model/comparison.py), through
reports/upgrade.py ``comparison_of``: an older comparison.json reads with the later fields'
defaults (no title, method, runs per side or environment); one without occupied distributions
renders its tables without the charts.
"""

from __future__ import annotations

from tailscope.analysis_model.comparison import (
    LLM_FIGURE_NAMES,
    METRIC_NAMES,
    Check,
    EnvironmentComparison,
    HostLoad,
    Interval,
    LlmChange,
    LlmComparison,
    Method,
    PercentileChange,
    RunFacts,
    SideFacts,
    StageChange,
)
from tailscope.analysis_model.records import Distribution
from tailscope.analysis_model.run import Environment
from tailscope.reports.distribution_view import distribution_charts
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_rate, fmt_share, fmt_signed_ms
from tailscope.reports.html import render_page
from tailscope.reports.upgrade import comparison_of
from tailscope.support.units import percentile_label

COMPARE_SCRIPTS = ("report_common.js", "compare.js")


def _interval(pair: Interval | None) -> str:
    if pair is None or len(pair) != 2:
        return "—"
    return f"{fmt_ms(pair[0])} – {fmt_ms(pair[1])}"


def _signed_interval(pair: Interval | None) -> str:
    if pair is None or len(pair) != 2:
        return "—"
    return f"{fmt_signed_ms(pair[0])} … {fmt_signed_ms(pair[1])}"


def _relative(value) -> str:
    return "—" if value is None else f"{value:+.1%}"


def _css(change: PercentileChange | LlmChange) -> str:
    return "fail" if change.regressed else ("pass" if change.improved else "none")


def percentile_change_rows(changes: tuple[PercentileChange, ...]) -> list[dict]:
    """One row per compared percentile: values with CIs, change with its interval, judgement."""
    rows = []
    for c in changes:
        judgement = "regressed" if c.regressed else ("improved" if c.improved else
                                                     ("changed" if c.significant else "no significant change"))
        rows.append({
            "scope": c.cls or "all",
            "metric": METRIC_NAMES.get(c.metric, c.metric), "figure": c.figure,
            "percentile": percentile_label(c.percentile),
            "baseline": fmt_ms(c.baseline_ms), "baseline_ci": _interval(c.baseline_ci_ms),
            "current": fmt_ms(c.current_ms), "current_ci": _interval(c.current_ci_ms),
            "change": fmt_signed_ms(c.change_ms), "change_ci": _signed_interval(c.change_ci_ms),
            "relative": _relative(c.relative_change), "judgement": judgement, "css": _css(c),
        })
    return rows


def moved_rows(changes: tuple[PercentileChange, ...]) -> list[dict]:
    """What moved, in words: each latency percentile of all requests that changed significantly or
    regressed, ``{"percentile", "what", "real", "is_real", "css"}``."""
    rows = []
    for c in changes:
        if c.cls or c.metric != "latency_ms" or not (c.significant or c.regressed):
            continue
        name = c.figure
        interval = _signed_interval(c.change_ci_ms)
        real = c.significant and c.claimable
        if real:
            why = f"real: the 95% interval of the change, {interval}, excludes 0"
        elif c.significant:
            why = (f"not established: the interval {interval} excludes 0, but the sides do not both hold "
                   f"enough requests to claim {name}")
        else:
            why = f"not shown to be real: the interval {interval} includes 0"
        rows.append({"percentile": name,
                     "what": f"{name} {fmt_ms(c.baseline_ms)} → {fmt_ms(c.current_ms)} "
                             f"({fmt_signed_ms(c.change_ms)}, {_relative(c.relative_change)})",
                     "real": why, "is_real": real, "css": _css(c)})
    return rows


def check_rows(checks: tuple[Check, ...]) -> list[dict]:
    return [{"name": c.name, "result": "pass" if c.passed else "fail", "message": c.message} for c in checks]


def stage_rows(stages: tuple[StageChange, ...], changed: str | None) -> list[dict]:
    return [{"stage": s.stage, "baseline": fmt_ms(s.baseline_ms), "current": fmt_ms(s.current_ms),
             "change": fmt_signed_ms(s.change_ms), "changed": s.stage == changed} for s in stages]


def run_facts(run: RunFacts) -> dict:
    """A side (or one of its runs) as text; ``runs``: each run of a side with several."""
    runs = run.runs if isinstance(run, SideFacts) else ()
    return {"name": run.name or "—", "path": run.path or "—",
            "requests": fmt_count(run.requests), "achieved": fmt_rate(run.achieved_rps),
            "errors": fmt_share(run.error_rate), "started": run.started or "—",
            "duration": f"{run.duration_s:.1f} s",
            "run_count": run.run_count if isinstance(run, SideFacts) else 1,
            "runs": [run_facts(r) for r in runs] if len(runs) > 1 else []}


def method_text(method: Method | None) -> str:
    """How the intervals were resampled, in one sentence (empty for a comparison without ``method``)."""
    if method is None:
        return ""
    return (f"Intervals: {method.name} ({method.baseline_runs} baseline run(s), "
            f"{method.current_runs} new run(s)). {method.note}").strip()


#: The LLM table's figure column: the rows' figures in words, goodput named as the LLM one.
LLM_LABELS = {**LLM_FIGURE_NAMES, "goodput": "LLM goodput"}


def _llm_value(row: LlmChange, value: float | None) -> str:
    if value is None:
        return "—"
    if row.unit == "share":
        return f"{100 * value:.1f}%"
    return f"{value:,.1f} {row.unit}"


def _llm_change(row: LlmChange, value: float | None) -> str:
    if value is None:
        return "—"
    if row.unit == "share":
        return f"{100 * value:+.1f} points"
    return f"{value:+,.1f} {row.unit}"


def llm_change_rows(section: LlmComparison | None) -> list[dict]:
    """The comparison's ``llm`` rows (TTFT/TPOT P50 and P99, output tokens/s, goodput) as text."""
    rows = []
    for r in section.rows if section else ():
        low, high = r.change_ci if r.change_ci else (None, None)
        judgement = ("shown, not judged (one server-wide ratio per run)" if r.judged is False
                     else "REGRESSED" if r.regressed else "improved" if r.improved
                     else "significant (too few samples)" if r.significant and not r.claimable
                     else "significant, within the threshold" if r.significant else "no significant change")
        rows.append({"metric": LLM_LABELS.get(r.metric, r.metric),
                     "percentile": (r.percentile or "").upper(),
                     "baseline": _llm_value(r, r.baseline), "current": _llm_value(r, r.current),
                     "change": _llm_change(r, r.change),
                     "change_ci": f"{_llm_change(r, low)} … {_llm_change(r, high)}" if low is not None else "—",
                     "relative": _relative(r.relative_change),
                     "worse": "lower" if r.lower_is_worse else "higher", "judgement": judgement, "css": _css(r)})
    return rows


#: The environment facts shown side by side: (Environment field, words).
ENVIRONMENT_FACTS = (("server_kind", "server kind"), ("server_version", "server version"), ("model", "model"),
                     ("max_model_len", "max_model_len"), ("gpus", "GPUs"), ("gpu_driver", "GPU driver"),
                     ("cpu_model", "CPU model"), ("kernel", "kernel"), ("tailscope_version", "tailscope"),
                     ("scenario_sha256", "scenario SHA-256"))


def environment_rows(environment: EnvironmentComparison | None) -> dict | None:
    """The two runs' environments side by side and the differences compare warns about
    (``{"rows": [{"fact", "baseline", "current", "differs"}], "warnings": [message]}``);
    None in comparisons made before environments were recorded."""
    if environment is None:
        return None
    differing = {d.field for d in environment.differences}

    def text(env: Environment, key: str) -> str:
        value = getattr(env, key)
        if key == "gpus" and value is None and env.gpu_absent:
            return f"none ({env.gpu_absent})"
        if key == "scenario_sha256" and value:
            return str(value)[:12]
        return "not recorded" if value is None else str(value)

    return {"rows": [{"fact": label, "baseline": text(environment.baseline, key),
                      "current": text(environment.current, key), "differs": key in differing}
                     for key, label in ENVIRONMENT_FACTS],
            "warnings": [d.message for d in environment.differences]}


def host_load_row(host: HostLoad | None) -> dict | None:
    """The environment table's row of other processes' CPU on each side's host (mean cores over
    the side's runs, each run's after it when there are several); None in comparisons before it."""
    if host is None:
        return None

    def text(mean: float | None, runs: tuple[float | None, ...]) -> str:
        if mean is None:
            return "not recorded"
        each = f" ({', '.join('—' if v is None else f'{v:.2f}' for v in runs)})" if len(runs) > 1 else ""
        return f"{mean:.2f} cores{each}"

    return {"fact": "other processes' CPU", "baseline": text(host.baseline_cores, host.baseline_runs),
            "current": text(host.current_cores, host.current_runs), "differs": host.busier is not None}


def build_comparison_data(comparison: dict) -> dict:
    """The presentation dict of a comparison (pre-formatted text + chart series) from its JSON
    (read through reports/upgrade.py ``comparison_of``: AnalysisShapeError when malformed)."""
    c = comparison_of(comparison)
    regressed = c.verdict.regressed
    changed = c.changed_stage
    charts = {"sets": [s for s in (_overlay(c.distributions.baseline, " (baseline)", "dash"),
                                   _overlay(c.distributions.current, " (current)", "solid")) if s]}
    return {
        "title": f"tailscope comparison — {c.title}",
        "method": method_text(c.method),
        "verdict": {"label": c.verdict.label,
                    "css": "inconclusive" if c.verdict.inconclusive else "fail" if regressed else "pass",
                    "summary": c.verdict.summary},
        "baseline": run_facts(c.baseline),
        "current": run_facts(c.current),
        "checks": check_rows(c.checks),
        "percentiles": percentile_change_rows(c.percentiles),
        "moved": moved_rows(c.percentiles),
        "llm": llm_change_rows(c.llm),
        "changed_stage": {"stage": changed.stage, "summary": changed.summary,
                          "change": fmt_signed_ms(changed.change_ms)} if changed else None,
        "stages": stage_rows(c.stages, changed.stage if changed else None),
        "has_distributions": bool(charts["sets"]),
        "charts": charts,
        "environment": _with_host_load(environment_rows(c.environment), host_load_row(c.host_load)),
    }


def _with_host_load(environment: dict | None, host: dict | None) -> dict | None:
    """The environment table with the host-load row last (where the comparison has one)."""
    if host is None:
        return environment
    environment = environment or {"rows": [], "warnings": []}
    return {**environment, "rows": [*environment["rows"], host]}


def _overlay(distribution: Distribution, suffix: str, dash: str) -> dict | None:
    curves = distribution_charts(distribution)
    if not curves:
        return None
    return {"classes": [c for c in curves["classes"] if c["name"] == "all"] or curves["classes"][:1],
            "suffix": suffix, "dash": dash}


def render_comparison(comparison: dict, compress_plotly: bool = True) -> str:
    """The comparison page (UTF-8 HTML text) of one comparison dict."""
    data = build_comparison_data(comparison)
    return render_page("compare.html", data, data["charts"], COMPARE_SCRIPTS, compress_plotly)
