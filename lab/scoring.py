"""Scoring a diagnosis against the ground truth of injected faults (pure functions).

Per experiment with a fault (ground truth: the window ``[start, end]`` of the
``fault`` event whose ``role`` is ``cause`` — a fault without a role is the
cause — in ``analysis.json``), the *matching spike* is the detected
P99 spike overlapping ``[start, end + LAG_S]`` the most (effects such as a
queue draining outlast the fault a little) among the latency spikes or, where
none overlaps it, in an LLM run among the TTFT spikes, then the TPOT spikes
(``spike_metric`` says which) — the order a report puts them in. A prompt storm
on the real vLLM raised TTFT 2.6× and made no latency spike, since an LLM's
end-to-end latency is set by its answer's length; and where a latency spike
exists, a longer TPOT spike beside it (a queue's or a preempting cache's
streams slowed a while after) does not replace it. Then:

* detected — a matching spike exists;
* AC@1 — the matching spike's top-ranked cause names the fault's kind;
* AC@3 — one of its three top-ranked causes does;
* time to detect — ``spike.start − fault.start`` in s, floored at 0 (a
  spike's first window may begin just before the fault);
* impact — the highest window P99 inside the fault window over the median
  window P99 outside it (a window's maximum stands in for its P99 when it
  has too few requests to claim one): whether the fault really hurt
  (about 1 = no effect);
* distracted — in a run with ``distraction`` faults (another process's
  trouble at the same time, lab/plan.py ``CONFOUNDED_CASES``), the top-ranked
  cause names a distraction's kind instead.

A cause names a fault kind when its ``kind`` is the fault kind or one of
:data:`CAUSE_ALIASES`: the kind of the detector that declares it ``answers``
that fault, or one of that detector's ``aliases`` (detectors elsewhere may use
their own vocabulary). Per control
run, *false alarms* are spikes whose top cause is not ``unexplained``: latency spikes, and an LLM
run's TTFT and TPOT spikes (a control run counts as a false alarm when either names a cause).
Per kind: ``experiments``, ``detection_rate``, ``ac1``, ``ac3`` (shares of
the kind's experiments that scored), ``mean_time_to_detect_s`` (of detected
ones) and ``mean_impact``; controls: ``false_alarm_rate`` (share of control
runs with at least one false alarm, latency or token), ``false_alarms_per_run`` (latency spikes),
``token_false_alarms_per_run`` and the spikes per run of each. The same
runs analysed with the BARO-style baseline ranker (``analyze_run(...,
method="baro")``, which always names a cause) are scored the same way under
``baro``.
"""

from __future__ import annotations

import statistics

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.events import Event, Events
from tailscope.analysis_model.llm import TokenSpike
from tailscope.analysis_model.records import Window
from tailscope.analysis_model.spikes import Spike
from tailscope.analyzers.causes.registry import cause_names_by_fault
from tailscope.reports.upgrade import spikes_of, token_spikes_of, windows_of
from tailscope.support.units import NS_PER_S

#: How long after a fault ends a spike still counts as its effect (s).
LAG_S = 5.0
UNEXPLAINED = "unexplained"

#: Cause kinds that name each fault kind, besides the kind itself: derived from the detectors'
#: declarations (``answers`` and ``aliases``, analyzers/causes/registry.py).
CAUSE_ALIASES: dict[str, frozenset[str]] = cause_names_by_fault()


def names_fault(cause_kind: str, fault_kind: str) -> bool:
    """Whether a diagnosed cause kind names ``fault_kind``."""
    return cause_kind == fault_kind or cause_kind in CAUSE_ALIASES.get(fault_kind, frozenset())


def fault_events(events: Events) -> list[Event]:
    """The ``fault`` events of the run (ground truth), by start."""
    return sorted(events.faults, key=lambda f: f.start_ns)


def role_of(event: Event) -> str:
    """A fault event's ``role``: ``cause`` (also when it records none) or ``distraction``."""
    return str(event.attributes.get("role") or "cause")


def fault_kind_of(event: Event) -> str:
    """The fault kind an event injected (its ``fault`` attribute, else its ``name``, else its kind)."""
    return str(event.attributes.get("fault") or event.attributes.get("name") or event.kind)


def _overlap_ns(spike: Spike, start_ns: int, end_ns: int) -> int:
    return max(0, min(spike.end_ns, end_ns) - max(spike.start_ns, start_ns))


def matching_spike(spikes: list[Spike | TokenSpike], start_ns: int, end_ns: int) -> Spike | TokenSpike | None:
    """The spike overlapping ``[start_ns, end_ns + LAG_S]`` most (ties: the earlier, then the one
    listed first), or None."""
    horizon = end_ns + int(LAG_S * NS_PER_S)
    best, best_overlap = None, 0
    for spike in sorted(spikes, key=lambda s: s.start_ns):
        overlap = _overlap_ns(spike, start_ns, horizon)
        if overlap > best_overlap:
            best, best_overlap = spike, overlap
    return best


def _tail_ms(window: Window) -> float | None:
    """A window's P99, or its maximum when it has too few requests to claim a P99."""
    return window.p99_ms if window.p99_ms is not None else window.max_ms


def impact(windows: list[Window], start_ns: int, end_ns: int) -> float | None:
    """Highest window P99 inside the fault over the median window P99 outside it (None: no data)."""
    tails = [(w, _tail_ms(w)) for w in windows]
    inside = [tail for w, tail in tails if tail is not None and w.end_ns > start_ns and w.start_ns < end_ns]
    outside = [tail for w, tail in tails if tail is not None
               and (w.end_ns <= start_ns or w.start_ns >= end_ns + int(LAG_S * NS_PER_S))]
    if not inside or not outside or statistics.median(outside) <= 0:
        return None
    return max(inside) / statistics.median(outside)


def _cause_kinds(spike: Spike | TokenSpike | None) -> list[str]:
    """A spike's cause kinds, highest ranked first (none without a spike or causes)."""
    return [] if spike is None else [c.kind for c in spike.causes or ()]


#: The metrics a fault's matching spike is looked for in, in turn (the report's order).
SPIKE_METRICS = ("latency", "ttft", "tpot")


def spikes_by_metric(analysis: dict) -> list[tuple[str, Spike | TokenSpike]]:
    """(metric, spike) of every latency, TTFT and TPOT spike, in :data:`SPIKE_METRICS` order."""
    tokens = token_spikes_of(analysis)
    return ([("latency", s) for s in spikes_of(analysis)]
            + [(metric, s) for metric in SPIKE_METRICS[1:] for s in tokens.get(metric, [])])


def first_matching_spike(candidates: list[tuple[str, Spike | TokenSpike]], start_ns: int, end_ns: int
                         ) -> tuple[str | None, Spike | TokenSpike | None]:
    """(metric, spike): the :func:`matching_spike` among the first of :data:`SPIKE_METRICS` whose
    spikes overlap the fault; (None, None) when none does."""
    for metric in SPIKE_METRICS:
        spike = matching_spike([s for m, s in candidates if m == metric], start_ns, end_ns)
        if spike is not None:
            return metric, spike
    return None, None


def score_fault_run(analysis: dict) -> dict:
    """The scores of one fault experiment (see the module docstring) from its analysis (the
    ``events``, ``spikes`` and ``windows`` sections, each read once through its type)."""
    events = fault_events(decode(Events, analysis["events"], "events"))
    faults = [f for f in events if role_of(f) != "distraction"]
    if not faults:
        return {"ground_truth": False, "detected": False, "ac1": False, "ac3": False,
                "time_to_detect_s": None, "impact": None, "top_causes": [], "fault_window_ns": None}
    fault = faults[0]
    kind = fault_kind_of(fault)
    distractions = [f for f in events if role_of(f) == "distraction"]
    candidates = spikes_by_metric(analysis)
    metric, spike = first_matching_spike(candidates, fault.start_ns, fault.end_ns)
    causes = _cause_kinds(spike)
    return {
        "ground_truth": True,
        "fault_kind": kind,
        "fault_window_ns": [fault.start_ns, fault.end_ns],
        "fault_error": fault.attributes.get("error"),
        "fault_attributes": fault.attributes,
        "detected": spike is not None,
        "spike_metric": metric,
        "ac1": bool(causes) and names_fault(causes[0], kind),
        "ac3": any(names_fault(c, kind) for c in causes[:3]),
        "time_to_detect_s": (max(0.0, (spike.start_ns - fault.start_ns) / NS_PER_S) if spike else None),
        "impact": impact(windows_of(analysis), fault.start_ns, fault.end_ns),
        "top_causes": causes[:3],
        "spikes": sum(1 for m, _ in candidates if m == "latency"),
        "token_spikes": sum(1 for m, _ in candidates if m != "latency"),
        "distractions": [fault_kind_of(f) for f in distractions],
        "distracted": bool(causes) and any(names_fault(causes[0], fault_kind_of(d)) for d in distractions),
        "distraction_errors": [f.attributes["error"] for f in distractions if f.attributes.get("error")],
    }


def score_control_run(analysis: dict) -> dict:
    """False alarms of one control run: latency spikes whose top cause is named (``false_alarms``),
    and the same among an LLM run's TTFT and TPOT spikes (``token_false_alarms``; ``token_spikes``
    counts them, 0 for a run without them); ``false_alarm_causes`` lists every named top cause,
    the latency spikes' first."""
    candidates = spikes_by_metric(analysis)
    spikes = [s for m, s in candidates if m == "latency"]
    tokens = [s for m, s in candidates if m != "latency"]
    named = [s for s in spikes if not s.unexplained]
    named_tokens = [s for s in tokens if not s.unexplained]
    return {"spikes": len(spikes), "false_alarms": len(named),
            "token_spikes": len(tokens), "token_false_alarms": len(named_tokens),
            "false_alarm_causes": [s.causes[0].kind for s in named + named_tokens]}


def _alarmed(control: dict) -> bool:
    """Whether a control run named any cause, for a latency spike or a TTFT/TPOT spike (a score
    written before token spikes were scored has no ``token_false_alarms``: 0)."""
    return control["false_alarms"] > 0 or control.get("token_false_alarms", 0) > 0


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _mean(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def aggregate(results: list[dict]) -> dict:
    """Per-kind scores and control false alarms from experiment results.

    Each result has ``kind`` (a fault kind or ``control``), ``status``
    (``ok`` when scored) and ``score`` (from score_fault_run / score_control_run).
    """
    kinds: dict[str, dict] = {}
    for kind in sorted({r["kind"] for r in results if r["kind"] != "control"}):
        mine = [r for r in results if r["kind"] == kind]
        scored = [r["score"] for r in mine if r["status"] == "ok" and r["score"].get("ground_truth")]
        kinds[kind] = {
            "experiments": len(mine),
            "scored": len(scored),
            "detection_rate": _share([s["detected"] for s in scored]),
            "ac1": _share([s["ac1"] for s in scored]),
            "ac3": _share([s["ac3"] for s in scored]),
            "mean_time_to_detect_s": _mean([s["time_to_detect_s"] for s in scored if s["detected"]]),
            "mean_impact": _mean([s["impact"] for s in scored]),
        }
    controls = [r["score"] for r in results if r["kind"] == "control" and r["status"] == "ok"]
    control = {
        "runs": len([r for r in results if r["kind"] == "control"]),
        "scored": len(controls),
        "false_alarm_rate": _share([_alarmed(c) for c in controls]),
        "false_alarms_per_run": _mean([c["false_alarms"] for c in controls]),
        "spikes_per_run": _mean([c["spikes"] for c in controls]),
        "token_false_alarms_per_run": _mean([c.get("token_false_alarms", 0) for c in controls]),
        "token_spikes_per_run": _mean([c.get("token_spikes", 0) for c in controls]),
    }
    scored_all = [k for k in kinds.values() if k["scored"]]
    overall = {
        "ac1": _mean([k["ac1"] for k in scored_all]),
        "ac3": _mean([k["ac3"] for k in scored_all]),
        "detection_rate": _mean([k["detection_rate"] for k in scored_all]),
    }
    return {"kinds": kinds, "control": control, "overall": overall, "baro": aggregate_baro(results)}


def aggregate_baro(results: list[dict]) -> dict:
    """The BARO-style baseline's scores over the same runs (results' ``baro_score``, when present):
    per kind ``scored``, ``detection_rate``, ``ac1``, ``ac3``; controls ``false_alarm_rate``."""
    kinds = {}
    for kind in sorted({r["kind"] for r in results if r["kind"] != "control"}):
        scored = [r["baro_score"] for r in results if r["kind"] == kind and r["status"] == "ok"
                  and (r.get("baro_score") or {}).get("ground_truth")]
        kinds[kind] = {"scored": len(scored), "detection_rate": _share([s["detected"] for s in scored]),
                       "ac1": _share([s["ac1"] for s in scored]), "ac3": _share([s["ac3"] for s in scored])}
    controls = [r["baro_score"] for r in results if r["kind"] == "control" and r["status"] == "ok"
                and r.get("baro_score") is not None]
    return {"kinds": kinds, "control": {"scored": len(controls),
                                        "false_alarm_rate": _share([_alarmed(c) for c in controls])}}
