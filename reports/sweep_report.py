"""The sweep report: ``sweep.json`` → a self-contained ``sweep.html``.

:func:`sweep_report_data` turns the sweep dict (analyzers/patterns/load_sweep.py) into
pre-formatted strings and chart series; the template (templates/sweep.html)
only loops over them, and templates/sweep.js draws the throughput–latency
curve with plotly's bundled JS (embedded like the run report's; no network). Every string from the run is
escaped by jinja2 or set as text by the page's JS.
"""

from __future__ import annotations

from tailscope.reports.formatting import fmt_ms, fmt_rate, fmt_share
from tailscope.reports.html import render_page

#: The sweep page's scripts (after report_common.js's helpers).
SWEEP_SCRIPTS = ("report_common.js", "sweep.js")


def _ci(entry: dict) -> str:
    if entry["value_ms"] is None:
        return "—"
    return f"{fmt_ms(entry['ci_low_ms'])} – {fmt_ms(entry['ci_high_ms'])}"


def _verdict(passed) -> str:
    return {True: "pass", False: "fail", None: "—"}[passed]


def step_rows(sweep: dict) -> list[dict]:
    knee = (sweep.get("knee") or {}).get("index")
    return [{
        "rate": fmt_rate(s["rate"]), "offered": fmt_rate(s["offered_rps"]), "achieved": fmt_rate(s["achieved_rps"]),
        "p50": fmt_ms(s["p50"]["value_ms"]), "p50_ci": _ci(s["p50"]),
        "p99": fmt_ms(s["p99"]["value_ms"]), "p99_ci": _ci(s["p99"]),
        "p99_claimed": "claimed" if s["p99"]["claimed"] else f"not claimed (n = {s['p99']['n'] or 0:,})",
        "errors": fmt_share(s["error_rate"]), "result": _verdict(s["passed"]),
        "failed": ", ".join(s["failed_slos"]), "generator_limited": "generator-limited" if s["generator_limited"] else "",
        "run_dir": s["run_dir"], "best": s["index"] == sweep.get("max_rate_step"), "knee": s["index"] == knee,
    } for s in sweep["steps"]]


def chart_data(sweep: dict) -> dict:
    """Series for the curve: x = achieved req/s, y = latency ms (CI as error bars)."""
    steps = sweep["steps"]

    def series(key: str) -> dict:
        ys = [s[key]["value_ms"] for s in steps]
        return {"y": ys,
                "plus": [None if v is None else s[key]["ci_high_ms"] - v for s, v in zip(steps, ys)],
                "minus": [None if v is None else v - s[key]["ci_low_ms"] for s, v in zip(steps, ys)]}

    knee = sweep.get("knee")
    return {
        "achieved": [s["achieved_rps"] for s in steps], "offered": [s["offered_rps"] for s in steps],
        "rate": [s["rate"] for s in steps], "passed": [s["passed"] for s in steps],
        "p50": series("p50"), "p99": series("p99"),
        "knee": None if knee is None else {"x": knee["achieved_rps"], "y": knee["p99_ms"]},
        "max_rate": sweep.get("max_rate_under_slo"),
    }


def search_text(search: dict | None) -> str | None:
    """One sentence describing a peak search; None for a rate list."""
    if search is None:
        return None
    passing, failing = search["passing_rate"], search["failing_rate"]
    bracket = (f"passes at {fmt_rate(passing)}" if passing is not None else "nothing passed") + (
        f", fails at {fmt_rate(failing)}" if failing is not None else ", the upper bound passed")
    return (f"Peak search between {fmt_rate(search['low'])} and {fmt_rate(search['high'])} "
            f"(tolerance {fmt_rate(search['tolerance_rps'])}): {search['steps']} of at most "
            f"{search['max_steps']} steps; {bracket}.")


def sweep_report_data(sweep: dict) -> dict:
    best = sweep.get("max_rate_under_slo")
    knee, sat = sweep.get("knee"), sweep.get("saturation")
    if sweep.get("passed") is None:
        banner = {"label": "NO SLOs", "css": "none"}
    else:
        banner = {"label": "PASSED" if sweep["passed"] else "FAILED", "css": "pass" if sweep["passed"] else "fail"}
    return {
        "title": f"tailscope sweep — {sweep['name']}",
        "banner": banner,
        "max_rate": fmt_rate(best) if best is not None else "no step met the SLOs" if sweep["slos"] else "—",
        "knee": "—" if knee is None else f"{fmt_rate(knee['rate'])} offered (P99 {fmt_ms(knee['p99_ms'])})",
        "saturation": "—" if sat is None else f"{fmt_rate(sat['rate'])} offered, {fmt_rate(sat['achieved_rps'])} achieved",
        "mode": sweep["mode"], "slos": list(sweep["slos"]),
        "search": search_text(sweep.get("search")),
        "warnings": [{"code": w["code"], "message": w["message"]} for w in sweep["warnings"]],
        "rows": step_rows(sweep),
        "charts": chart_data(sweep),
    }


def render_sweep_html(sweep: dict, compress_plotly: bool = True) -> str:
    """The sweep page (one self-contained HTML file) for a ``sweep.json`` dict."""
    data = sweep_report_data(sweep)
    return render_page("sweep.html", data, data["charts"], SWEEP_SCRIPTS, compress_plotly)
