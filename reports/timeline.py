"""Chart series of everything that shares the time axis: latency, slow requests, bands, signal panels.

x is seconds since the load start. Window percentiles (P50/P90/P99/P99.9,
null where a window has too few samples to claim them) and window maxima are
reduced to at most ``MAX_LINE_POINTS`` (2,000) points each by LTTB, so a
24-hour run of 86,400 windows charts the same shape in a bounded page;
slow-request points come bounded from the analysis (``slow_requests``);
spike, fault and generator-limited bands are capped at ``MAX_BANDS`` each
(the longest kept); spikes are split into headline and minor bands
(:func:`~.cards.minor_flags`), and generator-limited bands are drawn only where
lateness mattered (``generator_limited_windows[].material``, :mod:`lateness
rule <tailscope.analyzers.health.lateness_rule>`; absent means it did). The P99
line is the analysis's ``tail_line`` — a rolling sample of at least 459
requests per point, so every point is claimed — drawn instead of per-window
P99s, which a 1-s window at a few dozen requests/s cannot claim; likewise the
P50 and P90 come from ``rolling_lines`` (at least 7 and 44 requests a point)
where most windows cannot claim their own (:func:`latency_chart`: an LLM at
2 requests/s drew only the max line). A line with no value is not drawn, so
the legend lists only what is drawn. Signal series
are grouped into panels here, at render time: by the report's panels
(:mod:`.signal_panels`), or by a grouping the analysis carries itself
(``signals.panels``: ``[{"title", "series": [names], "unit"?}]``, as analyses written
before the grouping moved to the report did); a series no panel takes gets its own.
"""

from __future__ import annotations

from tailscope.analysis_model.events import Event, Events
from tailscope.analysis_model.health import LimitedBand
from tailscope.analysis_model.records import RollingLine, RollingLines, SlowRequests, TailLine, Window
from tailscope.analysis_model.signals import Signals, SignalSeries
from tailscope.analysis_model.spikes import Spike, SpikeDetection
from tailscope.reports.cards import minor_flags
from tailscope.reports.downsample import lttb
from tailscope.reports.formatting import NS_PER_S
from tailscope.reports.signal_panels import build_panels
from tailscope.support.units import percentile_label

MAX_LINE_POINTS = 2000
MAX_BANDS = 300
#: Window columns drawn as lines (those with at least one value): claimed percentiles and the maximum.
WINDOW_PERCENTILES = tuple((key, percentile_label(key)) for key in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"))


def seconds(values_ns, origin_ns) -> list:
    """Epoch ns → seconds since ``origin_ns`` (µs precision)."""
    return [round((v - origin_ns) / NS_PER_S, 6) for v in values_ns]


def latency_lines(windows: list[Window], origin_ns: int, skip: tuple[str, ...] = ()) -> dict:
    """``{"lines": [{"name", "x", "y"}], "windows": n, "downsampled": bool}``, one line per window
    percentile (those with a value in some window; ``skip``: column keys left out)."""
    mids = [((w.start_ns + w.end_ns) / 2 - origin_ns) / NS_PER_S for w in windows]
    lines = []
    for key, label in WINDOW_PERCENTILES:
        values = [getattr(w, key) for w in windows]
        if key in skip or all(v is None for v in values):
            continue
        if len(windows) <= MAX_LINE_POINTS:
            x, y = mids, values  # every window; nulls stay gaps in the line
        else:
            x, y = lttb(mids, values, MAX_LINE_POINTS)
        lines.append({"name": label, "x": [round(v, 6) for v in x], "y": y})
    return {"lines": lines, "windows": len(windows), "downsampled": len(windows) > MAX_LINE_POINTS}


#: A window percentile line is replaced by its rolling line (``analysis.rolling_lines``) when fewer
#: than this share of the windows that hold requests can claim it.
MIN_CLAIMED_WINDOW_SHARE = 0.5


def latency_chart(windows: list[Window], rolling: RollingLines, origin_ns: int, rolling_p99: bool) -> dict:
    """:func:`latency_lines` of the windows, with the P50 and P90 drawn from their rolling lines
    (each point over at least the requests that claim it: 7 and 44) where fewer than
    MIN_CLAIMED_WINDOW_SHARE of the windows holding requests claim their own — at any rate there
    are P50/P90 lines, and a line with no value is not drawn (so not in the legend).
    ``rolling_p99``: the P99 comes from ``tail_line`` (the window P99 is left out)."""
    held = [w for w in windows if (w.n or 0) > 0]
    swapped: list[tuple[str, str, RollingLine]] = []
    for key, label, line in (("p50_ms", "P50", rolling.p50), ("p90_ms", "P90", rolling.p90)):
        claimed = sum(getattr(w, key) is not None for w in held)
        if line is not None and line.t_ns and claimed < MIN_CLAIMED_WINDOW_SHARE * len(held):
            swapped.append((key, label, line))
    chart = latency_lines(windows, origin_ns, (("p99_ms",) if rolling_p99 else ()) + tuple(k for k, _, _ in swapped))
    for _, label, line in swapped:
        chart["lines"].append({"name": f"{label} (rolling, ≥ {line.min_samples} requests)",
                               "key": label, "rolling": True, "x": seconds(line.t_ns, origin_ns),
                               "y": list(line.values_ms)})
    return chart


def rolling_tail(line: TailLine | None, origin_ns: int) -> dict | None:
    """The rolling P99 line (``analysis.tail_line``): x (s at each point's end), y (ms), its rule as words."""
    if line is None or not line.t_ns:
        return None
    return {"name": "P99 (rolling)", "x": seconds(line.t_ns, origin_ns), "y": list(line.values_ms),
            "min_samples": line.min_samples, "step_s": line.step_s, "span_median_s": line.span_s.median}


def slow_points(slow: SlowRequests | None, origin_ns: int) -> dict:
    """Slow requests as points: x (s), y (ms), class names, trace ids and the counts shown / above
    (none, 0 and no threshold in an analysis without them)."""
    if slow is None:
        slow = SlowRequests(None, 0, 0, [], [], [], [])
    return {
        "x": seconds(slow.t_ns, origin_ns), "y": list(slow.latency_ms),
        "cls": [str(c) if c is not None else "" for c in slow.cls],
        "trace": [str(t) if t is not None else "" for t in slow.trace_id],
        "shown": slow.shown, "above": slow.above_threshold, "threshold_ms": slow.threshold_ms,
    }


def bands(intervals: list[dict], origin_ns: int, label_of) -> list[dict]:
    """At most MAX_BANDS ``{"x0", "x1", "label"}`` (s), the longest kept, in time order."""
    kept = sorted(intervals, key=lambda i: -(i["end_ns"] - i["start_ns"]))[:MAX_BANDS]
    kept.sort(key=lambda i: i["start_ns"])
    return [{"x0": (i["start_ns"] - origin_ns) / NS_PER_S, "x1": (i["end_ns"] - origin_ns) / NS_PER_S,
             "label": str(label_of(i))} for i in kept]


def fault_label(fault: Event) -> str:
    """The fault's name (from its ground truth's free-form attributes, else its kind), marked when
    the ground truth calls it a distraction (another process's trouble)."""
    attributes = fault.attributes
    name = str(attributes.get("name") or attributes.get("fault") or fault.kind or "fault")
    return f"{name} (distraction)" if attributes.get("role") == "distraction" else name


def signal_panels(signals: Signals, origin_ns: int) -> list[dict]:
    """``[{"title", "unit", "series": [{"name", "unit", "x", "y"}]}]`` in panel order (module
    docstring): the report's grouping (:func:`~.signal_panels.build_panels`), or the one an older
    analysis wrote (``signals.panels``)."""
    series = {s.name: s for s in signals.series}
    grouping = ([(p.title, p.unit, p.series) for p in signals.panels] if signals.panels is not None else
                [(p["title"], p["unit"], p["series"]) for p in build_panels(list(series.values()))])

    def chart(s: SignalSeries) -> dict:
        return {"name": s.name, "unit": s.unit, "x": seconds(s.t_ns, origin_ns), "y": s.values}

    panels, used = [], set()
    for title, unit, names in grouping:
        members = [series[name] for name in names if name in series]
        if not members:
            continue
        used.update(s.name for s in members)
        units = sorted({s.unit for s in members})
        panels.append({"title": str(title or ", ".join(s.name for s in members)),
                       "unit": str(unit or " · ".join(u for u in units if u)),
                       "series": [chart(s) for s in members]})
    for name, s in series.items():
        if name not in used:
            panels.append({"title": name, "unit": s.unit, "series": [chart(s)]})
    return panels


def timeline_charts(*, origin_ns: int, duration_s: float, windows: list[Window], rolling: RollingLines,
                    tail: TailLine | None, slow: SlowRequests | None, spikes: list[Spike],
                    detection: SpikeDetection | None, events: Events, limited: list[LimitedBand],
                    signals: Signals) -> dict:
    """Everything drawn against the shared time axis (see the module docstring), from the sections
    it draws as their types: x in s since ``origin_ns`` (epoch ns, the run's ``load_origin_ns``; 0
    where unknown) up to ``duration_s`` (the load's length, s), the ``windows`` and ``rolling_lines``
    (latency chart), ``tail_line``, ``slow_requests``, the ``spikes`` and ``spike_detection`` (bands,
    warm-up), ``events`` (fault bands), ``generator_limited_windows`` and ``signals`` (panels)."""
    faults = [{"start_ns": f.start_ns, "end_ns": f.end_ns, "label": fault_label(f)} for f in events.faults]
    tail_chart = rolling_tail(tail, origin_ns)
    labelled = [{"start_ns": s.start_ns, "end_ns": s.end_ns, "label": f"spike {i}"} for i, s in enumerate(spikes, 1)]
    minor = minor_flags(spikes)
    return {
        "x_title": "seconds since load start",
        "x_range": [0.0, duration_s],
        "latency": latency_chart(windows, rolling, origin_ns, tail_chart is not None),
        "tail": tail_chart,
        "slow": slow_points(slow, origin_ns),
        "spikes": bands([s for s, m in zip(labelled, minor) if not m], origin_ns, lambda s: s["label"]),
        "minor_spikes": bands([s for s, m in zip(labelled, minor) if m], origin_ns, lambda s: s["label"] + " (minor)"),
        "faults": bands(faults, origin_ns, lambda f: f["label"]),
        "limited": bands([{"start_ns": w.start_ns, "end_ns": w.end_ns} for w in limited
                          if w.material], origin_ns, lambda w: "generator-limited"),
        "panels": signal_panels(signals, origin_ns),
        "warmup_s": detection.warmup_s if detection is not None else 0.0,
    }
