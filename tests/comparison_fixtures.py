"""Hand-made comparison documents (comparison.json) for report and terminal tests: whole ones, as
``tailscope compare`` writes them, with what a test states filled in and the rest neutral."""

from __future__ import annotations

EMPTY_DISTRIBUTION = {"unit": "ms", "bin_edges_ms": [], "classes": {"all": {"n": 0, "counts": []}}}


def side(name: str = "run", path: str = "/runs/run", **facts) -> dict:
    """A side of one run: ``facts`` override the neutral figures."""
    one = {"name": name, "path": path, "requests": 0, "achieved_rps": None, "error_rate": 0.0, "duration_s": 0.0,
           "started": None, **{k: v for k, v in facts.items() if k not in ("run_count", "runs")}}
    return {**one, "run_count": facts.get("run_count", 1), "runs": facts.get("runs", [one])}


def percentile_row(percentile: str = "p99", **values) -> dict:
    """A percentile row of all requests' latency (no change, judged nothing) with ``values`` set."""
    row = {"metric": "latency_ms", "cls": None, "percentile": percentile, "baseline_ms": 0.0,
           "baseline_ci_ms": [0.0, 0.0], "current_ms": 0.0, "current_ci_ms": [0.0, 0.0], "change_ms": 0.0,
           "change_ci_ms": [0.0, 0.0], "gate_ci_ms": [0.0, 0.0], "relative_change": None, "significant": False,
           "regressed": False, "improved": False, "claimable": True, "baseline_n": 0, "current_n": 0}
    return {**row, **values}


def llm_row(metric: str, percentile: str | None, unit: str, **values) -> dict:
    """An LLM row (no change, judged nothing) with ``values`` set."""
    row = {"metric": metric, "percentile": percentile, "unit": unit, "baseline": 0.0, "baseline_ci": [0.0, 0.0],
           "current": 0.0, "current_ci": [0.0, 0.0], "change": 0.0, "change_ci": [0.0, 0.0], "gate_ci": [0.0, 0.0],
           "relative_change": None, "significant": False, "regressed": False, "improved": False, "claimable": True,
           "baseline_n": 0, "current_n": 0, "lower_is_worse": False}
    return {**row, **values}


def stage_row(stage: str, baseline_ms: float, current_ms: float, change_ms: float) -> dict:
    """A stage's tail means (ms), at P99."""
    return {"stage": stage, "baseline_ms": baseline_ms, "current_ms": current_ms, "change_ms": change_ms,
            "change_ci_ms": [change_ms, change_ms], "tail_percentile": "p99", "baseline_tail_requests": 0,
            "current_tail_requests": 0}


def check(name: str, passed: bool, message: str, cls: str | None = None) -> dict:
    return {"name": name, "cls": cls, "passed": passed, "message": message}


def comparison_document(**keys) -> dict:
    """A whole format-1.1 comparison: ``keys`` (top-level keys) set, the rest neutral: no checks,
    rows or stages, empty distributions, no LLM figures, no environment."""
    document = {
        "format_version": "1.1", "title": None, "baseline": side("base", "/runs/base"),
        "current": side("new", "/runs/new"), "threshold": 0.10, "confidence": 0.95, "resamples": 4000,
        "gate_confidence": 0.95, "checks_judged_together": 1, "method": None,
        "verdict": {"regressed": False, "summary": "no regression above 10%"},
        "checks": [], "percentiles": [], "stages": [], "changed_stage": None, "llm": None,
        "error_rate": {"baseline": 0.0, "current": 0.0, "change": 0.0, "p_value": 1.0},
        "classes_compared": [], "classes_only_in_one": [],
        "distributions": {"baseline": EMPTY_DISTRIBUTION, "current": EMPTY_DISTRIBUTION}, "environment": None,
    }
    return {**document, **keys}
