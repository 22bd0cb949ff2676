"""The LLM figures of a run against its baseline: TTFT and TPOT P99, output tokens/s, goodput.

For two runs that both hold OpenAI-API requests (analyzers/stats/llm.py), the comparison's ``llm``
section has one row per figure, judged the way latency percentiles are (:mod:`.baseline`):

- ``ttft_ms`` and ``tpot_ms`` at P50 and P99: :func:`~.baseline.compare_percentile` over the
  successful streamed LLM requests' values (ms, from the scheduled send), so the same bootstrap
  intervals, early-stopping claim and threshold apply; *higher is worse*.
- ``output_tokens_per_s``: the output tokens that arrived per second over the load period, its
  interval from bootstrap resamples of the run's 1-s windows (each window's arrived tokens; a
  replicate's rate is the mean of its resampled windows); claimable when both runs have at least
  ``MIN_RATE_WINDOWS`` windows. *Lower is worse.*
- ``goodput``: the share of LLM requests meeting every per-request SLO of the run's own scenario
  (analyzers/stats/goodput.py), its interval from binomial resamples (``Binomial(n, share) / n``);
  claimable when both runs have at least ``MIN_GOODPUT_REQUESTS`` LLM requests. *Lower is worse.*

A row is ``regressed`` when it moved the bad way by more than ``threshold`` (relative) **and** the
change interval excludes 0 on that side **and** it is claimable; ``improved`` symmetrically.
:func:`llm_checks` gives one check per P99 row, output rate and goodput (failed when regressed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.comparison.judge import CompareRules, compare_percentile, interval
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.goodput import good_requests
from tailscope.analyzers.stats.llm import llm_arrays, series, window_columns
from tailscope.analyzers.stats.slo import parse_slo
from tailscope.analyzers.stats.streaming import read_chunks, stream_times
from tailscope.analyzers.stats.summary import load_period_ns
from tailscope.rundir import Run

MIN_RATE_WINDOWS = 10
MIN_GOODPUT_REQUESTS = 100
WINDOW_NS = NS_PER_S
#: (metric, percentile name, quantile) of the per-request rows.
PERCENTILE_ROWS = (("ttft_ms", "p50", 0.50), ("ttft_ms", "p99", 0.99), ("tpot_ms", "p50", 0.50), ("tpot_ms", "p99", 0.99))
LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "output_tokens_per_s": "output tokens/s", "goodput": "goodput"}


@dataclass(frozen=True)
class LlmSide:
    """One run's LLM values: sorted TTFT and TPOT (ms), arrived output tokens per 1-s window, and
    how many LLM requests there were and how many were good."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    window_tokens: np.ndarray
    requests: int
    good: int


def _scenario_slos(scenario: dict) -> list:
    lines = scenario.get("slo") or []
    out = []
    for line in [lines] if isinstance(lines, str) else lines:
        try:
            out.append(parse_slo(line))
        except ValueError:
            continue  # the run's analysis warns about it
    return out


def llm_side(run: Run, req: RequestArrays) -> LlmSide | None:
    """The LLM values of one run (its request arrays ``req``); None when it has no OpenAI-API request."""
    llm = llm_arrays(run.requests)
    if llm is None:
        return None
    times = stream_times(req, run.requests, *read_chunks(run.path))
    values = series(req, llm, times)
    period = load_period_ns(req)
    tokens = np.zeros(0)
    if period:
        starts = np.arange(period[0], period[1], WINDOW_NS, dtype=np.int64)
        columns = window_columns(req, llm, times, {"start_ns": starts, "end_ns": starts + WINDOW_NS})
        tokens = columns["output_tokens"].astype(np.float64) if columns is not None else tokens
    good = good_requests(req, _scenario_slos(run.manifest.get("scenario") or {}), times) & llm.is_llm
    return LlmSide(np.sort(values["ttft"][~np.isnan(values["ttft"])]), np.sort(values["tpot"][~np.isnan(values["tpot"])]),
                   tokens, int(llm.is_llm.sum()), int(good.sum()))


def _judged(base: float, current: float, boot_base: np.ndarray, boot_current: np.ndarray, claimable: bool,
            rules: CompareRules, lower_is_worse: bool) -> dict:
    change_ci = interval(boot_current - boot_base, rules.confidence)
    relative = (current - base) / base if base > 0 else None
    worse = -1.0 if lower_is_worse else 1.0
    bad_side = change_ci[1] < 0 if lower_is_worse else change_ci[0] > 0
    good_side = change_ci[0] > 0 if lower_is_worse else change_ci[1] < 0
    moved = None if relative is None else relative * worse
    return {"baseline": base, "baseline_ci": interval(boot_base, rules.confidence),
            "current": current, "current_ci": interval(boot_current, rules.confidence),
            "change": current - base, "change_ci": change_ci, "relative_change": relative,
            "significant": bool(change_ci[0] > 0 or change_ci[1] < 0),
            "regressed": bool(claimable and bad_side and moved is not None and moved > rules.threshold),
            "improved": bool(claimable and good_side and moved is not None and moved < -rules.threshold),
            "claimable": bool(claimable), "lower_is_worse": lower_is_worse}


def _rate_row(before: LlmSide, now: LlmSide, rules: CompareRules, rng: np.random.Generator) -> dict | None:
    a, b = before.window_tokens, now.window_tokens
    if not len(a) or not len(b):
        return None
    window_s = WINDOW_NS / NS_PER_S

    def replicates(tokens: np.ndarray) -> np.ndarray:
        picks = rng.integers(0, len(tokens), size=(rules.resamples, len(tokens)))
        return tokens[picks].mean(axis=1) / window_s
    row = _judged(float(a.mean() / window_s), float(b.mean() / window_s), replicates(a), replicates(b),
                  min(len(a), len(b)) >= MIN_RATE_WINDOWS, rules, lower_is_worse=True)
    return {"metric": "output_tokens_per_s", "percentile": None, "unit": "tokens/s", **row,
            "baseline_n": int(len(a)), "current_n": int(len(b))}


def _goodput_row(before: LlmSide, now: LlmSide, rules: CompareRules, rng: np.random.Generator) -> dict | None:
    if not before.requests or not now.requests:
        return None
    p, q = before.good / before.requests, now.good / now.requests
    row = _judged(p, q, rng.binomial(before.requests, p, rules.resamples) / before.requests,
                  rng.binomial(now.requests, q, rules.resamples) / now.requests,
                  min(before.requests, now.requests) >= MIN_GOODPUT_REQUESTS, rules, lower_is_worse=True)
    return {"metric": "goodput", "percentile": None, "unit": "share", **row,
            "baseline_n": before.requests, "current_n": now.requests}


def compare_llm(before: tuple[Run, RequestArrays], now: tuple[Run, RequestArrays], rules: CompareRules) -> dict | None:
    """The comparison's ``llm`` section: ``{"rows": [...]}`` (module docstring) of ``now`` against
    ``before`` (each a run and its request arrays); None unless both hold OpenAI-API requests."""
    a, b = llm_side(*before), llm_side(*now)
    if a is None or b is None:
        return None
    rng = np.random.default_rng(rules.seed + 1)
    rows = []
    for metric, name, p in PERCENTILE_ROWS:
        row = compare_percentile(getattr(a, metric), getattr(b, metric), p, rules, rng)
        if row is None:
            continue
        rows.append({"metric": metric, "percentile": name, "unit": "ms",
                     "baseline": row["baseline_ms"], "baseline_ci": row["baseline_ci_ms"],
                     "current": row["current_ms"], "current_ci": row["current_ci_ms"],
                     "change": row["change_ms"], "change_ci": row["change_ci_ms"],
                     **{k: row[k] for k in ("relative_change", "significant", "regressed", "improved", "claimable",
                                            "baseline_n", "current_n")}, "lower_is_worse": False})
    rows += [r for r in (_rate_row(a, b, rules, rng), _goodput_row(a, b, rules, rng)) if r is not None]
    return {"rows": rows}


def row_label(row: dict) -> str:
    """``TTFT P99``, ``output tokens/s``, ``LLM goodput``."""
    label = LABELS.get(row["metric"], row["metric"])
    return f"{label} {row['percentile'].upper()}" if row.get("percentile") else label


def fmt_value(row: dict, value: float | None) -> str:
    """A row's value in its unit: ``41.2 ms``, ``1,204.5 tokens/s``, ``97.1%``."""
    if value is None:
        return "—"
    if row["unit"] == "share":
        return f"{100 * value:.1f}%"
    return f"{value:,.1f} {row['unit']}"


def llm_checks(section: dict | None, rules: CompareRules) -> list[dict]:
    """One check per LLM P99 row, output rate and goodput: failed when regressed (JUnit testcases)."""
    checks = []
    for row in (section or {}).get("rows", []):
        if row.get("percentile") == "p50":
            continue
        relative = row["relative_change"]
        low, high = row["change_ci"]
        unit = "points" if row["unit"] == "share" else row["unit"]
        scale = 100.0 if row["unit"] == "share" else 1.0
        message = (f"{row_label(row)} {fmt_value(row, row['baseline'])} → {fmt_value(row, row['current'])} "
                   f"({'—' if relative is None else f'{relative:+.1%}'}; change 95% CI {low * scale:+.1f} … "
                   f"{high * scale:+.1f} {unit})")
        if row["regressed"]:
            message += f": regression ({'down' if row['lower_is_worse'] else 'up'} more than {rules.threshold:.0%}, significant)"
        elif not row["claimable"]:
            message += ": too few samples to judge"
        checks.append({"name": f"LLM {row_label(row)}", "cls": None, "passed": not row["regressed"], "message": message})
    return checks


def llm_summary(section: dict | None) -> str:
    """The LLM regressions in words (``""`` when none): ``LLM regression: TTFT P99 41.2 → 96.0 ms (+133%)``."""
    regressed = [r for r in (section or {}).get("rows", []) if r["regressed"]]
    if not regressed:
        return ""
    return "LLM regression: " + "; ".join(
        f"{row_label(r)} {fmt_value(r, r['baseline'])} → {fmt_value(r, r['current'])} ({r['relative_change']:+.0%})"
        for r in regressed)
