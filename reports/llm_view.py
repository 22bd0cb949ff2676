"""The report's LLM section: token-level latencies, tokens, goodput and their course over time.

Each view takes the sections it draws as their types, decoded once by the report's door
(reports/data.py ``build_report_data``): the ``llm`` section as ``tailscope.analysis_model.llm.Llm``
(reports/upgrade.py `llm_of`; its defaults are how an older analysis reads; None for a run without
OpenAI-API requests), the ``windows``, the run's ``load_origin_ns`` (epoch ns) and (for the token
spike cards) the TTFT/TPOT spikes (`token_spikes_of`) and the latency spikes
(docs/analysis-schema.md). :func:`llm_data` is the
section's pre-formatted table data, :func:`llm_charts` its chart series (x in
seconds since ``origin_ns``, the load start): each request's TTFT and TPOT as
points (the analysis's bounded ``llm.points``), the per-window P50/P99 where
claimed (null where a window holds too few requests, as on the latency chart) —
or, where fewer than half the windows claim a P50 (an LLM at a few requests/s),
the rolling P50 and P90 over the requests (:func:`rolling_points`),
the output tokens/s per window, and the TTFT/TPOT spikes as bands.
:func:`llm_headline` is the verdict's compact LLM figures and :func:`token_spike_cards`
the TTFT/TPOT spikes as cards, ranked with the latency spikes' (reports/cards.py).
"""

from __future__ import annotations

import math

from tailscope.analysis_model.llm import Llm, TokenSpike, TokenStats
from tailscope.analysis_model.percentiles import PercentileSet
from tailscope.analysis_model.records import Window
from tailscope.analysis_model.spikes import Spike
from tailscope.reports.cards import MINOR_IMPACT_SHARE, impact, impact_of, is_minor, ratio_text
from tailscope.reports.downsample import lttb
from tailscope.reports.formatting import (
    NS_PER_S,
    fmt_count,
    fmt_ms,
    fmt_number,
    fmt_offset,
    fmt_share,
    fmt_tokens_per_s,
    percentile_cells,
)
from tailscope.reports.kinds_view import kinds_data, kinds_headline
from tailscope.reports.prefix_cache_view import prefix_cache_data, prefix_cache_headline
from tailscope.reports.sessions_view import sessions_data, sessions_headline
from tailscope.support.cause_words import cause_title

#: The percentile-set metrics of the section, in display order: (key, label).
METRICS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL (per token)"),
           ("chunk_gap_ms", "chunk gap"), ("e2e_ms", "end-to-end"))
#: Series charted over time: (key in llm.points and in the window columns, label).
SERIES = (("ttft", "TTFT"), ("tpot", "TPOT"))
MAX_LINE_POINTS = 2000
TPOT_NOTE = ("TPOT = (last token − first token) ÷ (output tokens − 1). When the first chunk carries k tokens, "
             "TPOT reads low by (k − 1) ÷ (output tokens − 1) of the true decode time per token. "
             "ITL is measured from chunk arrivals: a chunk of k tokens arriving g after the previous one counts "
             "k samples of g ÷ k. Its mean is the mean time per token; its percentiles are not the server's "
             "per-token gaps when chunks carry several tokens (a slow token is averaged with the others of its "
             "chunk, which flattens the tail). The chunk gap is g itself, one sample per content chunk: the "
             "longest waits the client saw between pieces of content.")


def _metric_row(label: str, entry: PercentileSet) -> dict:
    p50, p99 = percentile_cells(entry.p50), percentile_cells(entry.p99)
    return {"metric": label, "p50": p50["value"], "p50_ci": p50["ci"], "p90": fmt_ms(entry.p90.value_ms),
            "p99": p99["value"], "p99_ci": p99["ci"], "p99_claimed": p99["claimed"],
            "p999": fmt_ms(entry.p999.value_ms), "n": p50["n"]}


def _token_row(label: str, stats: TokenStats) -> dict:
    return {"what": label, "sum": fmt_count(stats.sum), "mean": fmt_number(stats.mean),
            "p50": fmt_number(stats.p50), "p99": fmt_number(stats.p99)}


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {fmt_count(count)}" for name, count in counts.items()) or "—"


def _spikes(llm: Llm, key: str) -> list[TokenSpike]:
    return llm.spikes.get(key, [])


def llm_data(llm: Llm | None, origin_ns: int | None) -> dict | None:
    """The LLM section's tables (every value a string; times as s since ``origin_ns``, epoch ns,
    "—" where it is None); None without an ``llm`` section."""
    if llm is None:
        return None
    rate = llm.output_tokens_per_s
    per_request = rate.per_request
    goodput = llm.goodput
    chunks = llm.tokens_per_chunk
    return {
        "requests": fmt_count(llm.requests), "completed": fmt_count(llm.completed),
        "errors": fmt_count(llm.errors), "streamed": fmt_count(llm.streamed),
        "rows": [_metric_row(label, getattr(llm, key)) for key, label in METRICS if getattr(llm, key) is not None],
        "tokens": [_token_row("prompt", llm.prompt_tokens), _token_row("output", llm.output_tokens),
                   *([{"what": "per content chunk", "sum": f"{fmt_count(chunks.chunks)} chunks",
                       "mean": fmt_number(chunks.mean), "p50": fmt_number(chunks.p50), "p99": fmt_number(chunks.p99)}]
                     if chunks is not None else [])],
        "rate": {"aggregate": fmt_tokens_per_s(rate.aggregate),
                 **{name: fmt_tokens_per_s(getattr(per_request, name)) for name in ("p1", "p10", "p50", "p90", "p99")},
                 "n": fmt_count(per_request.n)},
        "sources": _counts_text(llm.token_counts_from),
        "finish": _counts_text(llm.finish_reasons),
        "goodput": {"share": fmt_share(goodput.share), "good": fmt_count(goodput.good),
                    "total": fmt_count(goodput.total), "definition": goodput.definition},
        "classes": [{
            "name": name, "api": c.api or "—", "model": c.model or "—",
            "requests": fmt_count(c.requests), "errors": fmt_count(c.errors),
            "ttft_p50": fmt_ms(c.ttft_ms.p50.value_ms), "ttft_p99": fmt_ms(c.ttft_ms.p99.value_ms),
            "tpot_p50": fmt_ms(c.tpot_ms.p50.value_ms), "tpot_p99": fmt_ms(c.tpot_ms.p99.value_ms),
            "output": fmt_count(c.output_tokens.sum),
            "rate": fmt_tokens_per_s(c.output_tokens_per_s.aggregate),
            "goodput": fmt_share(c.goodput.share),
        } for name, c in llm.classes.items()],
        "spikes": [{"metric": label, "window": f"{fmt_offset(s.start_ns, origin_ns)} – {fmt_offset(s.end_ns, origin_ns)}",
                    "p99": fmt_ms(s.p99_ms), "baseline": fmt_ms(s.baseline_p99_ms),
                    "requests": fmt_count(s.requests), "slow": fmt_count(s.slow_requests)}
                   for key, label in SERIES for s in _spikes(llm, key)],
        "detection": _detection_text(llm),
        "tpot_note": TPOT_NOTE,
        "prefix_cache": prefix_cache_data(llm, origin_ns),
        "kinds": kinds_data(llm),
        "sessions": sessions_data(llm),
        "has_points": bool(llm.points.scheduled_ns),
    }


def llm_headline(llm: Llm | None, origin_ns: int | None) -> list[dict] | None:
    """The verdict's LLM figures: TTFT and TPOT P99 with their 95% CIs and whether claimed (each only
    when some request has it: unstreamed requests have no TTFT), and goodput (``{"label", "note"}``,
    every value a string; ``origin_ns``, epoch ns, for the prefix cache's reading times); None
    without an ``llm`` section."""
    if llm is None:
        return None
    out = []
    for p99, label in ((llm.ttft_ms.p99, "TTFT"), (llm.tpot_ms.p99, "TPOT")):
        if not p99.n:
            continue
        cells = percentile_cells(p99)
        out.append({"label": f"{label} P99 {cells['value']}", "note": f"95% CI {cells['ci']} · {cells['claimed']}"})
    cache = prefix_cache_headline(llm, origin_ns)
    if cache is not None:  # beside TTFT: a cached prefix is prefill the server skipped
        out.append(cache)
    goodput = llm.goodput
    out.append({"label": f"LLM goodput {fmt_share(goodput.share)}",
                "note": f"{fmt_count(goodput.good)} of {fmt_count(goodput.total)} requests"})
    out.extend(kinds_headline(llm))
    sessions = sessions_headline(llm)
    if sessions is not None:
        out.append(sessions)
    return out


#: Per series: what a request above the baseline P99 did, in words.
SLOW_WORDS = {"ttft": "waited longer than the baseline P99 for their first token",
              "tpot": "took longer per output token than the baseline P99"}


def _overlap_text(spike: TokenSpike, latency_spikes: list[Spike]) -> str:
    for number, other in enumerate(latency_spikes, 1):
        if other.start_ns < spike.end_ns and spike.start_ns < other.end_ns:
            kind = other.top_cause.kind if other.top_cause is not None else "unexplained"
            return f"it overlaps latency spike {number}, whose top cause is: {cause_title(kind)}."
    return "no latency spike overlaps it, and a token-level spike is given no cause of its own."


def token_spike_cards(spikes: dict[str, list[TokenSpike]], latency: list[Spike], origin_ns: int | None) -> dict:
    """The TTFT/TPOT spikes (``llm.spikes``, keyed ``"ttft"``, ``"tpot"``) as spike cards beside the
    ``latency`` spikes (windows as s since ``origin_ns``, epoch ns): ``{"cards": [...], "minor": [...]}``.

    Each card has the keys the report's card template reads (``token`` True, ``key``, ``metric``,
    ``number`` per series, ``window``, ``p99``, ``baseline``, ``ratio``, ``excess``, ``requests``,
    ``slow_requests``, ``top_title``, ``top_sentence``: its one-line description) and ``impact``
    (reports/cards.py ``impact_of``, so it ranks with the latency spikes). The card names the metric that
    rose, by how much, and its top cause with that cause's sentence (``causes``, analyzers/spikes/
    token_causes.py; an analysis from before token spikes had causes says which latency spike overlaps
    it instead). It is **minor** by the latency spikes' rule (unexplained with its P99 below twice the
    baseline P99, or its impact under a tenth of the largest spike's, latency spikes included)."""
    found = [(key, label, number, s) for key, label in SERIES for number, s in enumerate(spikes.get(key, []), 1)]
    impacts = {id(s): impact_of(s.excess_ms, s.slow_requests, s.requests) for *_, s in found}
    largest = max([impact(s) for s in latency] + list(impacts.values()), default=0.0)
    cards, minor = [], []
    for key, label, number, s in found:
        window = f"{fmt_offset(s.start_ns, origin_ns)} – {fmt_offset(s.end_ns, origin_ns)}"
        ratio = ratio_text(s.p99_ms, s.baseline_p99_ms)
        rose = (f"{label} P99 rose to {fmt_ms(s.p99_ms)} against a {fmt_ms(s.baseline_p99_ms)} "
                f"baseline ({ratio}) in {window}: {fmt_count(s.slow_requests)} of "
                f"{fmt_count(s.requests)} requests {SLOW_WORDS[key]}; ")
        top = s.top_cause
        card = {
            "token": True, "key": key, "metric": label, "number": number, "window": window,
            "p99": fmt_ms(s.p99_ms), "baseline": fmt_ms(s.baseline_p99_ms), "ratio": ratio,
            "excess": fmt_ms(s.excess_ms), "requests": fmt_count(s.requests),
            "slow_requests": fmt_count(s.slow_requests), "impact": impacts[id(s)],
            "top_title": (f"{label} spike: {cause_title(top.kind)}" if top is not None
                          else f"{label} spike: no cause attributed"),
            "top_sentence": rose + (f"why: {top.evidence.get('summary') or cause_title(top.kind)}"
                                    if top is not None else _overlap_text(s, latency)),
        }
        small = s.unexplained and card["impact"] < MINOR_IMPACT_SHARE * largest  # a named cause is never minor
        (minor if is_minor(s) or small else cards).append(card)
    return {"cards": cards, "minor": minor}


def _detection_text(llm: Llm) -> str:
    """One sentence on the TTFT/TPOT spike tests: performed or why not, against which baseline."""
    parts = []
    for key, label in SERIES:
        facts = llm.spike_detection.get(key)
        if facts is not None and facts.performed:
            parts.append(f"{label}: {facts.detection_window_s:g}-s windows against a baseline P99 of "
                         f"{fmt_ms(facts.baseline_p99_ms)}")
        else:
            parts.append(f"{label}: not tested (too few requests)")
    return ("TTFT and TPOT spikes are found with the latency spike test (the tail-share test after the warm-up); "
            + "; ".join(parts) + ".")


def _seconds(values_ns, origin_ns) -> list:
    return [round((v - origin_ns) / NS_PER_S, 6) for v in values_ns]


def _line(windows: list[Window], field: str, origin_ns: int) -> dict | None:
    """A window column (``field`` of :class:`Window`, e.g. ``ttft_p99_ms``) at each window's middle
    (s since ``origin_ns``), thinned by LTTB past MAX_LINE_POINTS; None when no window has a value."""
    values = [getattr(w, field) for w in windows]
    if all(v is None for v in values):
        return None
    mids = [((w.start_ns + w.end_ns) / 2 - origin_ns) / NS_PER_S for w in windows]
    x, y = (mids, values) if len(windows) <= MAX_LINE_POINTS else lttb(mids, values, MAX_LINE_POINTS)
    return {"x": [round(v, 6) for v in x], "y": y}


def rolling_points(x: list, y: list, q: float, need: int) -> dict | None:
    """The rolling ``q``-quantile of the charted requests (x s ascending, y ms; None values left
    out): at each request, the nearest-rank quantile of it and the ``need`` − 1 before it (7 for a
    P50, 44 for a P90: the fewest that claim it), at most MAX_LINE_POINTS points; None when fewer
    than ``need`` requests have a value. ``llm.points`` holds every request up to 2,000 (else every
    k-th), so at the rates this is drawn at (most windows cannot claim their own) it is exact."""
    pairs = [(a, b) for a, b in zip(x, y) if b is not None]
    if len(pairs) < need:
        return None
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    rank = max(1, math.ceil(need * q - 1e-9))  # nearest rank
    step = max(1, (len(pairs) - need + 1) // MAX_LINE_POINTS)
    out_x, out_y = [], []
    for i in range(need - 1, len(pairs), step):
        out_x.append(round(xs[i], 6))
        out_y.append(sorted(ys[i - need + 1:i + 1])[rank - 1])
    return {"x": out_x, "y": out_y, "rolling": True}


#: As the latency chart (reports/timeline.py): rolling lines replace the window P50/P99 when fewer
#: than this share of the windows holding requests claim a TTFT (TPOT) P50.
MIN_CLAIMED_WINDOW_SHARE = 0.5


def llm_charts(llm: Llm | None, windows: list[Window], origin_ns: int) -> dict | None:
    """``{"ttft": {...}, "tpot": {...}, "tokens": line}``: per series its points (``x``, ``y``,
    ``cls``), window ``lines`` (``P50``/``P99`` where claimed) and spike ``bands`` (``x0``, ``x1``);
    ``tokens`` the output tokens/s per window (the analysis's ``windows``); x in s since ``origin_ns``
    (epoch ns). None without an ``llm`` section."""
    if llm is None:
        return None
    points = llm.points
    x = _seconds(points.scheduled_ns, origin_ns)
    y_of = {"ttft": points.ttft_ms, "tpot": points.tpot_ms}
    out = {}
    held = [w for w in windows if (w.n or 0) > 0]
    for key, _ in SERIES:
        lines = {label: _line(windows, f"{key}_{p}_ms", origin_ns) for p, label in (("p50", "P50"), ("p99", "P99"))}
        claimed = sum(getattr(w, f"{key}_p50_ms") is not None for w in held)
        if claimed < MIN_CLAIMED_WINDOW_SHARE * len(held):  # too few requests a window: rolling lines instead
            lines = {f"{label} (rolling, ≥ {need} requests)": rolling_points(x, y_of[key], q, need)
                     for q, need, label in ((0.5, 7, "P50"), (0.9, 44, "P90"))}
        out[key] = {
            "x": x, "y": y_of[key], "cls": points.cls,
            "lines": [{"name": name, "key": name.split(" ")[0], **line} for name, line in lines.items()
                      if line is not None],
            "bands": [{"x0": (s.start_ns - origin_ns) / NS_PER_S, "x1": (s.end_ns - origin_ns) / NS_PER_S}
                      for s in _spikes(llm, key)],
        }
    out["tokens"] = _line(windows, "output_tokens_per_s", origin_ns)
    return out
