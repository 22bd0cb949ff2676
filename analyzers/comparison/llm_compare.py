"""The LLM figures of runs against baseline runs: TTFT and TPOT P50/P99, output tokens/s, goodput.

For two sides (:class:`~.baseline.ComparisonSide`, one or more runs each) whose runs all hold
OpenAI-API requests (analyzers/stats/llm.py), the comparison's ``llm`` section has one row per
figure, judged the way latency percentiles are (:mod:`.judge`), with the **same resampling** —
runs, then time blocks within each run, with the side's replicate weights (:mod:`.resampling`):

- ``ttft_ms`` and ``tpot_ms`` at P50 and P99: the successful streamed LLM requests' values (ms,
  from the scheduled send), each in the time block of its scheduled send; the same intervals,
  early-stopping claim and threshold as latency; *higher is worse*.
- ``output_tokens_per_s``: the output tokens that arrived per second over the load periods (each
  run's 1-s windows; a replicate's rate is the tokens of its drawn blocks over their windows);
  claimable when both sides have at least ``MIN_RATE_WINDOWS`` windows. *Lower is worse.*
- ``ttfa_ms`` (time to the first answer token of the requests that reasoned), ``reasoning_tpot_ms``
  (their time per reasoning token after the first),
  ``time_to_tool_call_ms`` (to the complete tool call), ``image_ttft_ms`` (TTFT of the
  requests that sent images) and ``ranking_e2e_ms`` (end-to-end of the rerank / score requests)
  at P50 and P99, from the scheduled send
  (analyzers/stats/llm_kinds.py), resampled as TTFT, only when both sides have such requests;
  *higher is worse*; judged as a family of their own (their P99 rows), apart from the four below.
- ``goodput``: the share of LLM requests meeting every per-request SLO of each run's own scenario
  (analyzers/stats/goodput.py; a replicate's share is the good requests of its drawn blocks over
  their LLM requests); claimable when both sides have at least ``MIN_GOODPUT_REQUESTS`` LLM
  requests. *Lower is worse.*

- multi-turn sessions (only when every run of both sides ran ``arrival.sessions``;
  :mod:`~tailscope.analyzers.stats.llm_sessions`): ``ttft_first_turn_ms`` and
  ``ttft_later_turns_ms`` at P50 (each turn in the time block of its scheduled send),
  ``session_duration_ms`` at P50 and P99 and ``session_tokens`` (prompt + output tokens of a
  session) at P50, over the complete sessions (each in the block of its first turn's scheduled
  send); judged as the percentile rows, but never a check (the P99 of a session's duration
  carries its think times). ``session_tokens`` says whether the two sides ran the same
  conversations: it is shown, never judged a regression or an improvement.

- ``prefix_cache_hit_rate`` (only when the servers of both sides exposed prefix-cache metrics;
  :mod:`~tailscope.analyzers.stats.llm_prefix_cache`): the server's prefix-cache hit rate, a
  side's runs pooled (cached ÷ queried prompt tokens, or the mean of a hit-rate gauge). One
  server-wide ratio per run has no per-request samples to resample: the row is shown with no
  interval and never judged (``judged`` false, never a check).

Under ``CompareRules.method == "request"`` (reference only) the percentiles use the per-request
bootstrap, the rate resamples 1-s windows independently and goodput is a binomial resample.
A row is ``regressed`` when it moved the bad way by more than ``threshold`` (relative) **and** the
change interval excludes 0 on that side **and** it is claimable; ``improved`` symmetrically.
:func:`llm_checks` gives one check per P99 row, output rate and goodput (failed when regressed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tailscope.analysis_model.comparison import Check, LlmChange, LlmComparison
from tailscope.analysis_model.llm import PrefixCacheCounters, PrefixCacheGauge
from tailscope.analyzers.comparison.judge import CompareRules, Figure, Judged, compare_percentiles, judge_change
from tailscope.analyzers.comparison.resampling import ratio_replicates
from tailscope.analyzers.inputs.records import NS_PER_S
from tailscope.analyzers.stats.goodput import good_requests
from tailscope.analyzers.stats.llm import llm_arrays, series, window_columns
from tailscope.analyzers.stats.llm_kinds import kind_series
from tailscope.analyzers.stats.llm_prefix_cache import run_prefix_cache
from tailscope.analyzers.stats.llm_sessions import session_table
from tailscope.analyzers.stats.slo import parse_slo
from tailscope.analyzers.stats.streaming import read_chunks, stream_times
from tailscope.analyzers.stats.summary import load_period_ns

MIN_RATE_WINDOWS = 10
MIN_GOODPUT_REQUESTS = 100
WINDOW_NS = NS_PER_S
#: The LLM checks judged together (TTFT P99, TPOT P99, output tokens/s, goodput): their family size.
LLM_FAMILY = 4
#: (metric, percentile name, quantile) of the per-request rows.
PERCENTILE_ROWS = (("ttft_ms", "p50", 0.50), ("ttft_ms", "p99", 0.99), ("tpot_ms", "p50", 0.50), ("tpot_ms", "p99", 0.99))
#: The multi-turn session rows: (figure, percentile name, quantile, unit); never checks.
SESSION_ROWS = (("ttft_first_turn_ms", "p50", 0.50, "ms"), ("ttft_later_turns_ms", "p50", 0.50, "ms"),
                ("session_duration_ms", "p50", 0.50, "ms"), ("session_duration_ms", "p99", 0.99, "ms"),
                ("session_tokens", "p50", 0.50, "tokens"))
#: Session figures shown but never judged (they describe the workload, not the service).
UNJUDGED = frozenset({"session_tokens"})
#: The output-kind rows (analyzers/stats/llm_kinds.py ``kind_series`` key, metric), when both sides have them.
KIND_ROWS = (("ttfa", "ttfa_ms"), ("reasoning_tpot", "reasoning_tpot_ms"), ("time_to_tool_call", "time_to_tool_call_ms"),
             ("image_ttft", "image_ttft_ms"),
             ("ranking_e2e", "ranking_e2e_ms"))


@dataclass(frozen=True)
class LlmSide:
    """One side's LLM values over all its runs: TTFT and TPOT (ms) with each value's time block;
    per 1-s window the arrived output tokens and the window's block; per LLM request whether it
    was good and its block."""

    ttft_ms: np.ndarray
    ttft_blocks: np.ndarray
    tpot_ms: np.ndarray
    tpot_blocks: np.ndarray
    window_tokens: np.ndarray
    window_blocks: np.ndarray
    good: np.ndarray
    request_blocks: np.ndarray
    blocks: int
    runs: int
    #: Per :data:`KIND_ROWS` metric: (values ms, their time blocks); absent when no run had that kind.
    kinds: dict = field(default_factory=dict)
    #: Multi-turn session figures (:data:`SESSION_ROWS`): ``{figure: (values, blocks)}``; empty
    #: unless every run of the side ran sessions.
    sessions: dict = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return int(len(self.good))


def _scenario_slos(scenario: dict) -> list:
    lines = scenario.get("slo") or []
    out = []
    for line in [lines] if isinstance(lines, str) else lines:
        try:
            out.append(parse_slo(line))
        except ValueError:
            continue  # the run's analysis warns about it
    return out


def llm_side(side) -> LlmSide | None:
    """The LLM values of a comparison side (its runs' request arrays and time blocks); None when
    one of its runs has no OpenAI-API request."""
    parts: dict[str, list] = {k: [] for k in ("ttft", "ttft_b", "tpot", "tpot_b", "tokens", "tokens_b", "good", "good_b",
                                              *(key + tail for key, _ in KIND_ROWS for tail in ("", "_b")))}
    session_parts: dict[str, list] | None = {}
    for index, one in enumerate(side.runs):
        run, req = one.run, one.req
        llm = llm_arrays(run.requests)
        if llm is None:
            return None
        times = stream_times(req, run.requests, *read_chunks(run.path))
        values = series(req, llm, times)
        blocks = side.layout.block_ids(index, req.scheduled_ns)
        values.update(kind_series(llm.kinds, req.scheduled_ns, values["ttft"],
                                  np.where(llm.is_llm & req.is_ok, req.latency_ms, np.nan)))
        for key in ("ttft", "tpot", *(key for key in values if key in dict(KIND_ROWS))):
            keep = ~np.isnan(values[key])
            parts[key].append(values[key][keep])
            parts[key + "_b"].append(blocks[keep])
        period = load_period_ns(req)
        if period:
            starts = np.arange(period[0], period[1], WINDOW_NS, dtype=np.int64)
            columns = window_columns(req, llm, times, {"start_ns": starts, "end_ns": starts + WINDOW_NS})
            if columns is not None:
                parts["tokens"].append(columns["output_tokens"].astype(np.float64))
                parts["tokens_b"].append(side.layout.block_ids(index, starts))
        good = good_requests(req, _scenario_slos(run.manifest.get("scenario") or {}), times)
        parts["good"].append(good[llm.is_llm])
        parts["good_b"].append(blocks[llm.is_llm])
        if session_parts is not None and llm.sessions is not None:
            for figure, (figure_values, at) in _session_figures(req, llm, values["ttft"]).items():
                session_parts.setdefault(figure, []).append((figure_values, side.layout.block_ids(index, at)))
        else:
            session_parts = None

    def joined(key: str, dtype) -> np.ndarray:
        return np.concatenate(parts[key]).astype(dtype) if parts[key] else np.zeros(0, dtype)
    return LlmSide(joined("ttft", np.float64), joined("ttft_b", np.int64), joined("tpot", np.float64),
                   joined("tpot_b", np.int64), joined("tokens", np.float64), joined("tokens_b", np.int64),
                   joined("good", bool), joined("good_b", np.int64), side.layout.total, len(side.runs),
                   {metric: (joined(key, np.float64), joined(key + "_b", np.int64)) for key, metric in KIND_ROWS
                    if parts[key] and sum(len(v) for v in parts[key])},
                   {figure: (np.concatenate([v for v, _ in pieces]), np.concatenate([b for _, b in pieces]))
                    for figure, pieces in (session_parts or {}).items()})


def _session_figures(req, llm, ttft_ms: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One run's session figures: ``{figure: (values, epoch ns each is placed at)}`` — TTFT of turn 1
    and of later turns (ms, at their scheduled send), and per complete session its duration (ms) and
    prompt + output tokens (at its first turn's scheduled send)."""
    sessions = llm.sessions
    has = sessions.is_turn & ~np.isnan(ttft_ms)
    first, later = has & (sessions.turn == 1), has & (sessions.turn > 1)
    table = session_table(req, sessions, llm.prompt_tokens, llm.output_tokens)
    done = table.complete
    return {"ttft_first_turn_ms": (ttft_ms[first], req.scheduled_ns[first]),
            "ttft_later_turns_ms": (ttft_ms[later], req.scheduled_ns[later]),
            "session_duration_ms": ((table.end_ns[done] - table.start_ns[done]) / 1e6, table.start_ns[done]),
            "session_tokens": (table.prompt_tokens[done] + table.output_tokens[done], table.start_ns[done])}


def _change(metric: str, percentile: str | None, unit: str, j: Judged, baseline_n: int, current_n: int, *,
            lower_is_worse: bool, shown_only: bool = False, check: bool | None = None) -> LlmChange:
    """An LLM row from a judged change in ``unit``; ``shown_only``: never regressed or improved."""
    return LlmChange(metric=metric, percentile=percentile, unit=unit, baseline=j.baseline, baseline_ci=j.baseline_ci,
                     current=j.current, current_ci=j.current_ci, change=j.change, change_ci=j.change_ci,
                     gate_ci=j.gate_ci, relative_change=j.relative_change, significant=j.significant,
                     regressed=j.regressed and not shown_only, improved=j.improved and not shown_only,
                     claimable=j.claimable, baseline_n=baseline_n, current_n=current_n, lower_is_worse=lower_is_worse,
                     check=check)


def _runs(before: LlmSide, now: LlmSide, weights: tuple) -> tuple[int, int]:
    """The run counts the gate interval allows for ((1, 1) under the per-request method)."""
    return (1, 1) if weights[0] is None else (before.runs, now.runs)


def _per_block(values: np.ndarray, blocks: np.ndarray, total: int) -> np.ndarray:
    return np.bincount(blocks, weights=values.astype(np.float64), minlength=total)


def _rate_row(before: LlmSide, now: LlmSide, weights: tuple, rules: CompareRules,
              rng: np.random.Generator) -> LlmChange | None:
    a, b = before.window_tokens, now.window_tokens
    if not len(a) or not len(b):
        return None
    window_s = WINDOW_NS / NS_PER_S

    def replicates(side: LlmSide, w: np.ndarray | None) -> np.ndarray:
        tokens = side.window_tokens
        if w is None:  # per-request method: windows independent
            picks = rng.integers(0, len(tokens), size=(rules.resamples, len(tokens)))
            return tokens[picks].mean(axis=1) / window_s
        return ratio_replicates(_per_block(tokens, side.window_blocks, side.blocks),
                                _per_block(np.ones(len(tokens)), side.window_blocks, side.blocks), w) / window_s
    row = judge_change(float(a.mean() / window_s), float(b.mean() / window_s), replicates(before, weights[0]),
                       replicates(now, weights[1]), min(len(a), len(b)) >= MIN_RATE_WINDOWS, rules, lower_is_worse=True,
                       family=LLM_FAMILY, runs=_runs(before, now, weights))
    return _change("output_tokens_per_s", None, "tokens/s", row, int(len(a)), int(len(b)), lower_is_worse=True)


def _goodput_row(before: LlmSide, now: LlmSide, weights: tuple, rules: CompareRules,
                 rng: np.random.Generator) -> LlmChange | None:
    if not before.requests or not now.requests:
        return None

    def replicates(side: LlmSide, w: np.ndarray | None) -> np.ndarray:
        share = side.good.mean()
        if w is None:  # per-request method: a binomial resample
            return rng.binomial(side.requests, share, rules.resamples) / side.requests
        return ratio_replicates(_per_block(side.good, side.request_blocks, side.blocks),
                                _per_block(np.ones(side.requests), side.request_blocks, side.blocks), w)
    row = judge_change(float(before.good.mean()), float(now.good.mean()), replicates(before, weights[0]),
                       replicates(now, weights[1]), min(before.requests, now.requests) >= MIN_GOODPUT_REQUESTS,
                       rules, lower_is_worse=True, family=LLM_FAMILY, runs=_runs(before, now, weights))
    return _change("goodput", None, "share", row, before.requests, now.requests, lower_is_worse=True)


def compare_llm(before, now, weights: tuple, rules: CompareRules) -> LlmComparison | None:
    """The comparison's ``llm`` section: its rows (module docstring) of side ``now``
    against side ``before`` (:class:`~.baseline.ComparisonSide`), resampled with the sides'
    replicate ``weights`` (a pair; None entries under the per-request method); None unless every
    run of both sides holds OpenAI-API requests."""
    a, b = llm_side(before), llm_side(now)
    if a is None or b is None:
        return None
    rng = np.random.default_rng(rules.seed + 1)
    rows = []
    figures = {metric: ((getattr(a, metric), getattr(a, metric.replace("_ms", "_blocks"))),
                        (getattr(b, metric), getattr(b, metric.replace("_ms", "_blocks"))))
               for metric in ("ttft_ms", "tpot_ms")}
    kinds = [metric for _, metric in KIND_ROWS if metric in a.kinds and metric in b.kinds]
    figures.update({metric: (a.kinds[metric], b.kinds[metric]) for metric in kinds})
    plan = [(metric, name, p, LLM_FAMILY) for metric, name, p in PERCENTILE_ROWS]
    plan += [(metric, name, p, len(kinds)) for metric in kinds for name, p in (("p50", 0.50), ("p99", 0.99))]
    for metric, name, p, family in plan:
        (a_values, a_blocks), (b_values, b_blocks) = figures[metric]
        judged = compare_percentiles(Figure(a_values, a_blocks, weights[0]), Figure(b_values, b_blocks, weights[1]),
                                     ((name, p),), rules, rng, family=family, runs=_runs(a, b, weights))
        rows += [_change(metric, name, "ms", row.judged, row.baseline_n, row.current_n, lower_is_worse=False)
                 for row in judged]
    rows += [r for r in (_rate_row(a, b, weights, rules, rng), _goodput_row(a, b, weights, rules, rng)) if r is not None]
    rows += _session_rows(a, b, weights, rules, rng)
    rows += _prefix_cache_rows(before, now)
    return LlmComparison(tuple(rows))


def _pooled_prefix_cache(side) -> tuple[float | None, int]:
    """A side's prefix-cache hit rate over its runs and what it rests on (query tokens, or gauge
    readings); (None, 0) unless every run's server exposed it the same way."""
    sections = [run_prefix_cache(r.run) for r in side.runs]
    if not sections or any(s is None for s in sections):
        return None, 0
    if all(isinstance(s, PrefixCacheGauge) for s in sections):
        readings = sum(s.readings for s in sections)
        return sum(s.hit_rate * s.readings for s in sections) / readings, readings
    if not all(isinstance(s, PrefixCacheCounters) for s in sections):
        return None, 0
    queries = sum(s.query_tokens for s in sections)
    return (sum(s.hit_tokens for s in sections) / queries if queries else None), queries


def _prefix_cache_rows(before, now) -> list[LlmChange]:
    """The ``prefix_cache_hit_rate`` row when both sides' servers reported one ([] otherwise): shown, not judged."""
    (baseline, baseline_n), (current, current_n) = _pooled_prefix_cache(before), _pooled_prefix_cache(now)
    if baseline is None or current is None:
        return []
    return [LlmChange(metric="prefix_cache_hit_rate", percentile=None, unit="share",
                      baseline=baseline, baseline_ci=None, current=current, current_ci=None,
                      change=current - baseline, change_ci=None, gate_ci=None,
                      relative_change=(current - baseline) / baseline if baseline else None,
                      significant=False, regressed=False, improved=False, claimable=False,
                      baseline_n=baseline_n, current_n=current_n, lower_is_worse=True, check=False, judged=False)]


def _session_rows(a: LlmSide, b: LlmSide, weights: tuple, rules: CompareRules,
                  rng: np.random.Generator) -> list[LlmChange]:
    """The :data:`SESSION_ROWS` of two sides that both ran sessions ([] otherwise); ``check`` False."""
    rows = []
    for figure, name, p, unit in SESSION_ROWS:
        if figure not in a.sessions or figure not in b.sessions:
            continue
        judged = compare_percentiles(Figure(*a.sessions[figure], weights[0]), Figure(*b.sessions[figure], weights[1]),
                                     ((name, p),), rules, rng, family=LLM_FAMILY, runs=_runs(a, b, weights))
        rows += [_change(figure, name, unit, row.judged, row.baseline_n, row.current_n, lower_is_worse=False,
                         shown_only=figure in UNJUDGED, check=False) for row in judged]
    return rows


def fmt_value(row: LlmChange, value: float | None) -> str:
    """A row's value in its unit: ``41.2 ms``, ``1,204.5 tokens/s``, ``97.1%``."""
    if value is None:
        return "—"
    if row.unit == "share":
        return f"{100 * value:.1f}%"
    return f"{value:,.1f} {row.unit}"


def llm_checks(section: LlmComparison | None, rules: CompareRules) -> list[Check]:
    """One check per LLM P99 row, output rate and goodput: failed when regressed (JUnit testcases)."""
    checks = []
    for row in section.rows if section else ():
        if not row.is_check:
            continue
        relative = row.relative_change
        low, high = row.change_ci
        unit = "points" if row.unit == "share" else row.unit
        scale = 100.0 if row.unit == "share" else 1.0
        message = (f"{row.figure} {fmt_value(row, row.baseline)} → {fmt_value(row, row.current)} "
                   f"({'—' if relative is None else f'{relative:+.1%}'}; change {rules.confidence:.0%} CI {low * scale:+.1f} … "
                   f"{high * scale:+.1f} {unit})")
        if row.regressed:
            message += f": regression ({'down' if row.lower_is_worse else 'up'} more than {rules.threshold:.0%}, significant)"
        elif not row.claimable:
            message += ": too few samples to judge"
        checks.append(Check(f"LLM {row.figure}", None, not row.regressed, message))
    return checks


def llm_summary(section: LlmComparison | None) -> str:
    """The LLM regressions in words (``""`` when none): ``LLM regression: TTFT P99 41.2 → 96.0 ms (+133%)``."""
    regressed = [r for r in section.rows if r.regressed] if section else []
    if not regressed:
        return ""
    return "LLM regression: " + "; ".join(
        f"{r.figure} {fmt_value(r, r.baseline)} → {fmt_value(r, r.current)} ({r.relative_change:+.0%})"
        for r in regressed)
