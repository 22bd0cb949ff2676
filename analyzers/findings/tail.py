"""``p99_set_by``: why the run's latency P99 is what it is — said for every run, spikes or none.

The requests **above** the run's latency P99 (``summary.latency_ms.p99``, the claimed or
unclaimed value; latency from the scheduled send, ms) are compared with the **others**, and
the first of these that accounts for them is named (the evidence keeps every measure) —
``not_kept`` where none of the kept records lies at or above P99 (a retained run's P99 comes
from its histograms; its records are a sample):

1. ``spikes`` — at least half of them were sent inside the run's latency spikes: the spike
   cards say why;
2. ``gc`` / ``stalls`` — the target's pauses: ``gc_pause`` events it sent, else stalls of its
   process seen in its spans (:mod:`~.inputs.span_stalls`): at least half of the requests above
   P99 overlapped one, at least 30 points more than of the others, and the pause time inside
   them accounts for at least a quarter of their extra mean latency over the others (a train of
   0.3-ms collections overlaps everything and explains nothing); named with their count,
   spacing (median time between them) and median length;
3. ``output_length`` — an LLM run's end-to-end latency: the requests above P99 generated at
   least 1.5× the output tokens of the others while their time per output token rose less than
   1.25× (a long answer is not an incident);
4. ``class`` — at least 80% of them are of one request class that is at most half of all requests;
5. ``stage`` — one stage (the server's stages, or ``outside_server``: the time outside the
   server's spans) holds at least half of their extra mean latency over the others;
6. ``spread`` — none of these: the sentence says so, with the largest stage difference.

Severity ``low``: it explains, it does not accuse. Cost: a few passes over the requests and the
stage matrix, and one over the spans when the target sent no GC pauses.
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.findings.protocol import Finding, FindingCheck, FindingInputs
from tailscope.analyzers.inputs.pauses import Pauses, pauses_of
from tailscope.analyzers.inputs.records import NS_PER_MS
from tailscope.analyzers.stats.llm import llm_arrays

#: Share of the requests above P99 a spike set, a pause set, or a class must hold.
SPIKE_SHARE, PAUSE_SHARE, PAUSE_LIFT, CLASS_SHARE, CLASS_OF_ALL = 0.5, 0.5, 0.3, 0.8, 0.5
#: Output-length rule: tokens ratio at least, per-token time ratio below.
TOKENS_RATIO, PER_TOKEN_FLAT = 1.5, 1.25
#: Share of the above-P99 requests' extra mean latency their mean pause overlap must hold.
PAUSE_ACCOUNTS = 0.25
#: Share of the extra mean latency one stage must hold.
STAGE_SHARE = 0.5
#: Stage names in words.
STAGE_WORDS = {"outside_server": "the time outside the server's spans (network, the server's HTTP layer, the client)"}


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _pause_facts(pauses: Pauses, begin: np.ndarray, end: np.ndarray, above: np.ndarray,
                 latency_ms: np.ndarray) -> dict | None:
    """Overlap of the requests above P99 and of the others with the pauses, and how much of the
    above requests' extra mean latency (ms) their mean pause overlap (ms) covers; None without pauses."""
    if len(pauses) == 0:
        return None
    overlap = pauses.overlap_ms(begin, end)
    hit = overlap > 0
    lengths = (pauses.end_ns - pauses.start_ns) / NS_PER_MS
    spacing = np.diff(pauses.start_ns) / 1e9
    extra = _mean(latency_ms[above]) - _mean(latency_ms[~above]) if (~above).any() else float("nan")
    mean_overlap = _mean(overlap[above])
    return {"count": int(len(pauses)), "above_share": float(hit[above].mean()),
            "others_share": float(hit[~above].mean()) if (~above).any() else 0.0,
            "median_ms": float(np.median(lengths)), "every_s": float(np.median(spacing)) if len(spacing) else None,
            "above_overlap_ms": mean_overlap, "extra_ms": extra,
            "accounts_share": mean_overlap / extra if np.isfinite(extra) and extra > 0 else None}


def _duration_words(seconds: float) -> str:
    """``4.1 s``, ``350 ms``, ``0.3 ms``: two significant figures below 10, whole numbers above."""
    if seconds >= 1:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    ms = seconds * 1e3
    return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"


def _stalls(inputs: FindingInputs) -> Pauses:
    from tailscope.analyzers.inputs.span_stalls import find_stalls
    from tailscope.analyzers.stages.decomposition import request_of_span

    spans, req = inputs.run.spans, inputs.req
    span_request = inputs.span_request if inputs.span_request is not None else request_of_span(req, spans)
    if span_request is None:
        return Pauses(*(np.zeros(0, np.int64),) * 3, np.zeros(0))
    return find_stalls(spans, span_request, np.where(req.has_sent, req.sent_ns, req.scheduled_ns)).pauses


def check_p99_set_by(inputs: FindingInputs) -> Finding | None:
    """``p99_set_by`` (module docstring); None only without a latency P99."""
    req = inputs.req
    tau = inputs.summary.latency_ms.p99.value_ms
    if tau is None or req.n == 0:
        return None
    counted = np.flatnonzero(req.in_latency & np.isfinite(req.latency_ms))
    latency = req.latency_ms[counted]
    above = latency > tau
    if not above.any():
        above = latency >= tau  # every value ties at the top
    n_above = int(above.sum())
    head = f"P99 latency ({tau:.1f} ms) is set by"
    evidence: dict = {"p99_ms": float(tau), "above_p99": n_above, "others": int(len(counted) - n_above)}
    if n_above == 0:  # a retained run's P99 (from its histograms) above every record it kept
        summary = (f"{head} requests whose records were not kept: none of the {len(counted):,} kept request "
                   "records lies at or above it (a retained run keeps a sample of them), so which requests set "
                   "it cannot be read here; the latency chart and the spike cards read the histograms.")
        return Finding("p99_set_by", "low", summary, {**evidence, "by": "not_kept"})

    # 1. the spikes
    spikes = inputs.spikes
    if spikes:
        inside = np.zeros(len(counted), bool)
        for spike in spikes:
            inside |= (req.scheduled_ns[counted] >= spike.start_ns) & (req.scheduled_ns[counted] < spike.end_ns)
        evidence["in_spikes_share"] = float(inside[above].mean())
        if evidence["in_spikes_share"] >= SPIKE_SHARE:
            tops = [spike.top_cause.kind if spike.top_cause is not None else None for spike in spikes]
            named = {kind: tops.count(kind) for kind in dict.fromkeys(k for k in tops if k)}
            evidence["spike_causes"] = named
            causes = ", ".join(f"{kind} ×{count}" if count > 1 else kind for kind, count in named.items())
            summary = (f"{head} its {len(spikes)} latency spike{'s' if len(spikes) != 1 else ''}: "
                       f"{evidence['in_spikes_share']:.0%} of the {n_above:,} requests above it were sent during "
                       f"{'them' if len(spikes) != 1 else 'it'} (top cause{'s' if len(named) != 1 else ''}: "
                       f"{causes or 'none'}; the spike cards say why).")
            return Finding("p99_set_by", "low", summary, {**evidence, "by": "spikes"})

    # 2. pauses of the target: its GC pauses, else stalls seen in its spans
    begin = np.where(req.has_sent[counted], req.sent_ns[counted], req.scheduled_ns[counted])
    end = req.end_ns[counted]
    gc = pauses_of(inputs.run.events, "gc_pause")
    source, pauses = ("gc", gc) if len(gc) else ("stalls", _stalls(inputs) if len(inputs.run.spans) else gc)
    facts = _pause_facts(pauses, begin, end, above, latency)
    if facts is not None:
        evidence["pauses"] = {"source": source, **facts}
        if (facts["above_share"] >= PAUSE_SHARE and facts["above_share"] - facts["others_share"] >= PAUSE_LIFT
                and facts["accounts_share"] is not None and facts["accounts_share"] >= PAUSE_ACCOUNTS):
            what = "GC pauses" if source == "gc" else "stalls of its process"
            seen = ("" if source == "gc" else
                    "; seen in its spans: no span started or ended while requests waited, a stop-the-world pause")
            every = f"every ~{_duration_words(facts['every_s'])}, " if facts["every_s"] else ""
            summary = (f"{head} the target's pauses: {facts['above_share']:.0%} of the {n_above:,} requests above "
                       f"it overlapped one of {facts['count']:,} {what} ({every}each "
                       f"~{_duration_words(facts['median_ms'] / 1e3)}{seen}), against {facts['others_share']:.0%} "
                       f"of the others; paused a mean {facts['above_overlap_ms']:.1f} ms of their "
                       f"+{facts['extra_ms']:.1f} ms extra latency.")
            return Finding("p99_set_by", "low", summary, {**evidence, "by": source})

    # 3. an LLM's output length
    llm = llm_arrays(inputs.run.requests)
    if llm is not None:
        tokens = llm.output_tokens[counted]
        has = np.isfinite(tokens) & (tokens > 0)
        if (has & above).any() and (has & ~above).any():
            ratio = _mean(tokens[above & has]) / _mean(tokens[~above & has])
            per_token = latency / np.where(has, tokens, np.nan)
            per_ratio = _mean(per_token[above & has]) / _mean(per_token[~above & has])
            evidence["output_tokens"] = {"above_mean": _mean(tokens[above & has]), "others_mean": _mean(tokens[~above & has]),
                                         "ratio": ratio, "per_token_ratio": per_ratio}
            if ratio >= TOKENS_RATIO and per_ratio < PER_TOKEN_FLAT:
                summary = (f"{head} output length: the {n_above:,} requests above it generated {ratio:.1f}× the "
                           f"output tokens of the others (mean {evidence['output_tokens']['above_mean']:.0f} vs "
                           f"{evidence['output_tokens']['others_mean']:.0f}); time per output token is flat "
                           f"({per_ratio:.2f}×) — long answers, not an incident.")
                return Finding("p99_set_by", "low", summary, {**evidence, "by": "output_length"})

    # 4. a request class
    codes = req.cls_code[counted]
    if len(req.cls_values) > 1 and (codes >= 0).any():
        top = int(np.bincount(codes[above & (codes >= 0)], minlength=len(req.cls_values)).argmax())
        share_above, share_all = float(np.mean(codes[above] == top)), float(np.mean(codes == top))
        evidence["class"] = {"name": str(req.cls_values[top]), "above_share": share_above, "share_of_all": share_all}
        if share_above >= CLASS_SHARE and share_all <= CLASS_OF_ALL:
            summary = (f"{head} its request mix: {share_above:.0%} of the {n_above:,} requests above it are "
                       f"'{req.cls_values[top]}' requests, {share_all:.0%} of all requests (the class table gives "
                       "each class's own percentiles).")
            return Finding("p99_set_by", "low", summary, {**evidence, "by": "class"})

    # 5. one stage
    matrix = inputs.matrix
    stages = [s for s in matrix.stages if s != "server"]
    growth_text = ""
    if len(matrix.request_index) and stages:
        row_above = np.zeros(req.n, bool)
        row_above[counted[above]] = True
        in_above = row_above[matrix.request_index]
        in_others = ~in_above & req.in_latency[matrix.request_index]
        if in_above.any() and in_others.any():
            growth = {s: _mean(matrix.column(s)[in_above]) - _mean(matrix.column(s)[in_others]) for s in stages}
            growth = {s: g for s, g in growth.items() if np.isfinite(g)}
            extra = _mean(req.latency_ms[matrix.request_index][in_above]) - _mean(req.latency_ms[matrix.request_index][in_others])
            if growth and extra > 0:
                stage = max(growth, key=growth.get)
                share = growth[stage] / extra
                before = _mean(matrix.column(stage)[in_others])
                evidence["stage"] = {"name": stage, "growth_ms": growth[stage], "extra_ms": extra, "share": share,
                                     "others_mean_ms": before}
                words = STAGE_WORDS.get(stage, stage)
                growth_text = (f"{words} grew most: mean {before:.1f} → {before + growth[stage]:.1f} ms "
                               f"(+{growth[stage]:.1f} of their +{extra:.1f} ms)")
                if share >= STAGE_SHARE:
                    summary = (f"{head} {words}: the {n_above:,} requests above it spent a mean "
                               f"{before + growth[stage]:.1f} ms there against {before:.1f} ms for the others "
                               f"(+{growth[stage]:.1f} ms of their +{extra:.1f} ms extra latency).")
                    return Finding("p99_set_by", "low", summary, {**evidence, "by": "stage"})

    summary = (f"{head} nothing single: the {n_above:,} requests above it are spread over time, classes and "
               "stages" + (f"; {growth_text}" if growth_text else "") + ".")
    return Finding("p99_set_by", "low", summary, {**evidence, "by": "spread"})


P99_SET_BY = FindingCheck("p99_set_by", check_p99_set_by)
