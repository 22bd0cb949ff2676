"""A cause's evidence as sentences with units, and its series in the units of those sentences.

The detectors write their evidence as JSON (``spikes[].causes[].evidence``):
a ``summary`` sentence, per-signal contrasts (``signals[]``: ``series``,
``spike``, ``baseline``, ``spread``, ``z``, ``material_excess``, ``inside``, ``place``), the latency
split, the confidence factors and other scalars. The report shows none of it
as raw keys: :func:`evidence_sentences` turns it into sentences, and
:func:`series_display` gives the scale, unit and label every number of a
series is shown in — the same for a sentence and for the chart beside it
(:func:`evidence_chart`), so each number of the evidence can be found on its
chart. Values arrive in the units the detector read (a counter as its rate per
second in its own unit; ``docs/analysis-schema.md``).
"""

from __future__ import annotations

import re

from tailscope.analysis_model.evidence import IN_SPIKE, LatencySplit, SignalContrast
from tailscope.analysis_model.spikes import CauseFinding, EvidenceSeries
from tailscope.reports.formatting import NS_PER_S, fmt_number
from tailscope.reports.upgrade import contrasts_of, factors_of, latency_split_of, places_of, weak_findings_of
from tailscope.support.cause_words import cause_title


def _percent(share: float) -> str:
    """A share as a whole percentage, never ``-0%``."""
    return f"{round(100 * share) or 0:.0f}%"


#: Series name (metric part) → (scale to the shown unit, shown unit, label). Scales follow the
#: detectors' own sentences (throttled time in ms per second, PSI as a share of time, …).
SERIES_DISPLAY = {
    "cgroup.cpu.throttled_ns": (1e-6, "ms/s", "CPU time throttled (CFS quota)"),
    "cgroup.cpu.nr_throttled": (1.0, "periods/s", "throttled CFS periods"),
    "proc.runqueue_wait_ns": (1e-6, "ms/s", "target threads waiting for a CPU"),
    "generator.runqueue_wait_ms": (1.0, "ms/s", "generator waiting for a CPU"),
    "psi.cpu.some_us": (1e-4, "% of time", "CPU pressure (PSI some)"),
    "psi.io.some_us": (1e-4, "% of time", "host I/O pressure (PSI some)"),
    "cgroup.psi.io.some_us": (1e-4, "% of time", "target cgroup I/O pressure (PSI some)"),
    "psi.memory.some_us": (1.0, "µs/s", "memory stall (PSI some)"),
    "others.cpu_cores": (1.0, "cores", "CPU used by other processes"),
    "proc.ctxt.nonvoluntary": (1.0, "/s", "involuntary context switches of the target"),
    "proc.io.bytes": (1e-6, "MB/s", "target storage I/O"),
    "host.disk.flushes": (1.0, "/s", "disk flushes"),
    "host.disk.busy_s": (100.0, "% busy", "disks busy"),
    "host.cpu.iowait_s": (1.0, "cores", "CPU time in iowait"),
    "proc.threads_blocked": (1.0, "threads", "target threads blocked on I/O"),
    "host.vm.pswpin": (1.0, "pages/s", "pages swapped in"),
    "proc.major_faults": (1.0, "/s", "major page faults of the target"),
    "host.vm.pgmajfault": (1.0, "/s", "major page faults of the host"),
    "generator.cpu_percent": (1.0, "% of a core", "generator CPU"),
    "generator.late_share": (100.0, "% of sends", "sends more than 1 ms late"),
    "offered_rps": (1.0, "req/s", "offered load (scheduled sends)"),
    "queue.depth": (1.0, "requests", "queue depth (mean per second)"),
    "gc.pause_ms": (1.0, "ms", "GC pauses of the target (each at its start)"),
    "target.stall_ms": (1.0, "ms", "stalls of the target: no span started or ended (each at its start)"),
    "server.kv_usage": (100.0, "% of the KV cache", "KV-cache usage"),
    "server.preemptions": (1.0, "/s", "preemptions"),
    "server.waiting": (1.0, "requests", "requests waiting on the server"),
    "server.running": (1.0, "requests", "requests running on the server"),
    "server.prompt_tokens": (1.0, "tokens/s", "prompt tokens being prefilled"),
}
#: Seconds per unit of a counted time, for series not listed above: shown as ms per second.
TIME_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
_GPU_EVENT = re.compile(r"^gpu\d+\.clocks_event\.(\w+)$")
_GPU_DROP = re.compile(r"^(gpu\d+\.sm_clock_mhz) \(drop\)$")
#: Scalar evidence keys → (sentence label, formatter). Keys not listed are spelled out from their name.
KNOWN_SCALARS = {
    "slow_requests": ("slow requests (above the baseline P99)", lambda v: f"{v:,}"),
    "slow_overlapping_share": ("slow requests that overlapped a GC pause", lambda v: f"{100 * v:.0f}%"),
    "normal_overlapping_share": ("normal requests that overlapped a GC pause", lambda v: f"{100 * v:.0f}%"),
    "median_overlap_ms": ("median pause time inside a slow request", lambda v: f"{v:.1f} ms"),
    "median_extra_latency_ms": ("median extra latency of a slow request", lambda v: f"{v:.1f} ms"),
    "longest_pause_ms": ("longest GC pause overlapping a slow request", lambda v: f"{v:.0f} ms"),
    "pauses_in_spike": ("GC pauses inside the spike", lambda v: f"{v:,}"),
    "slow_stalled_share": ("slow requests that overlapped a stall of the target", lambda v: f"{100 * v:.0f}%"),
    "normal_stalled_share": ("normal requests that overlapped a stall of the target", lambda v: f"{100 * v:.0f}%"),
    "median_stall_overlap_ms": ("median stall time inside a slow request", lambda v: f"{v:.1f} ms"),
    "stalls_in_spike": ("stalls of the target inside the spike", lambda v: f"{v:,}"),
    "longest_stall_ms": ("longest stall (no span started, ended or recorded an event)", lambda v: f"{v:.0f} ms"),
    "longest_stall_p_value": ("chance of so long a stall at that load", lambda v: f"{v:.0e}"),
    "longest_stall_in_flight": ("requests in flight through the longest stall", lambda v: f"{v:,}"),
    "longest_stall_arrivals": ("requests that arrived during it and waited", lambda v: f"{v:,}"),
    "gc_event_share": ("share of the stall time GC events cover", lambda v: f"{100 * v:.0f}%"),
    "gc_runtime_metrics_share": ("share of the stall time the runtime GC metrics put GC in", lambda v: f"{100 * v:.0f}%"),
    "gc_stalls": ("stalls of the target whose export intervals held GC", lambda v: f"{v:,}"),
    "longest_gc_stall_ms": ("longest of those stalls", lambda v: f"{v:.0f} ms"),
    "outside_server_ms": ("growth of the time outside the server's spans", lambda v: f"{v:+.1f} ms"),
    "outside_server_counted_ms": ("of it counted as the generator's (as far as its own lateness reaches)",
                                  lambda v: f"{v:.1f} ms"),
    "generator_share_of_growth": ("share of the extra latency spent in the generator", lambda v: f"{100 * v:.0f}%"),
    "late_share_slow": ("slow requests sent more than 1 ms late", lambda v: f"{100 * v:.0f}%"),
    "late_share_normal": ("normal requests sent more than 1 ms late", lambda v: f"{100 * v:.0f}%"),
    "queue_share_of_server_growth": ("queue wait's share of the extra server time", lambda v: _percent(v)),
    "queue_growth_ms": ("queue wait growth", lambda v: f"{v:+.1f} ms"),
    "load_ratio": ("offered load vs baseline", lambda v: f"{v:.2f}×"),
    "throughput_ratio": ("throughput vs baseline", lambda v: f"{v:.2f}×"),
    "target_cpu_ratio": ("target CPU use vs baseline", lambda v: f"{v:.2f}×"),
    "offered_load_ratio": ("offered load vs baseline", lambda v: f"{v:.2f}×"),
    "rejected_429_share": ("requests answered 429", lambda v: f"{100 * v:.1f}%"),
    "baseline_429_share": ("429 answers at baseline", lambda v: f"{100 * v:.1f}%"),
    "decode_share_of_server_growth": ("decode's share of the extra server time", lambda v: _percent(v)),
    "decode_growth_ms": ("decode time growth", lambda v: f"{v:+.1f} ms"),
    "compute_growth_ratio": ("compute time growth vs baseline", lambda v: f"{v:+.0%}"),
    "kv_pressure": ("KV-cache pressure found", lambda v: f"{100 * v:.0f}%"),
    "kv_usage_peak": ("highest KV-cache usage reading", lambda v: f"{100 * v:.0f}% of the cache"),
}
#: Evidence keys read in pairs, one sentence each: (spike key, baseline key, label, shown as).
LEVEL_PAIRS = (
    ("kv_usage_spike", "kv_usage_baseline", "KV-cache usage", lambda v: f"{100 * v:.0f}% of the cache"),
    ("preemptions_per_s", "preemptions_baseline_per_s", "Preemptions", lambda v: f"{fmt_number(v)}/s"),
    ("prompt_tokens_per_s", "prompt_tokens_per_s_baseline", "Prompt tokens being prefilled",
     lambda v: f"{fmt_number(v)} tokens/s"),
    ("tpot_slow_ms", "tpot_normal_ms", "Time per output token of the slow streams", lambda v: f"{v:.1f} ms"),
)
#: Words for the second value of a pair.
PAIR_AGAINST = {"tpot_normal_ms": "the normal streams"}
#: Evidence keys shown elsewhere on the card, or only bookkeeping.
SKIPPED = {"summary", "signals", "latency_split", "factors", "decomposition", "detectors_consulted",
           "detectors_without_inputs", "weak_findings", "coverage", "generator_runqueue_wait",
           "longest_pause_generation", "load_measured_by", "places", "top_series", "method", "series", "tpot_ratio",
           "own_prompt_tokens_per_s", "other_traffic_prompt_tokens_per_s", "long_prompts", "server_waiting",
           "meaning", "runtime_metrics"}
MAX_SENTENCES = 12


def series_display(name: str, unit: str = "", counter: bool = False) -> tuple[float, str, str]:
    """(scale, shown unit, label) of a series' values as the detector read them."""
    base = str(name).split("{", 1)[0]
    if base in SERIES_DISPLAY:
        return SERIES_DISPLAY[base]
    event = _GPU_EVENT.match(base)
    if event:
        return 100.0, "% of time", f"{base.split('.')[0]} clocks slowed: {event.group(1).replace('_', ' ')}"
    drop = _GPU_DROP.match(base)
    if drop:
        return -1.0, "MHz", f"{drop.group(1)} (SM clock)"
    if counter and unit in TIME_UNITS_MS:
        return TIME_UNITS_MS[unit], "ms/s", base
    if counter:
        return 1.0, f"{unit}/s" if unit else "/s", base
    return 1.0, unit or "", base


def _value(x: float | None, scale: float) -> str:
    return "—" if x is None else fmt_number(float(x) * scale)


def signal_sentence(entry: SignalContrast) -> str:
    """``CPU time throttled (CFS quota): 312 ms/s in the spike vs 0 ms/s at baseline (robust z 41);
    it counts fully from +50 ms/s.`` The level quoted "in the spike" is the one measured inside the
    spike's own window (``inside``); when the level the confidence was judged on (``spike``) lay
    outside it (``place``), that peak follows with its place: ``… 40 ms/s in the spike, peak
    312 ms/s in the 2 s after the spike, vs 0 ms/s at baseline (robust z of the peak 41)``."""
    scale, unit, label = series_display(entry.series, entry.unit or "", True if entry.counter is None else entry.counter)
    place, inside = entry.place, entry.inside
    if place == IN_SPIKE:
        text = f"{label}: {_value(inside if inside is not None else entry.spike, scale)} {unit} in the spike"
    elif inside is None:
        text = f"{label}: {_value(entry.spike, scale)} {unit} {place} (no reading inside the spike)"
    else:
        text = f"{label}: {_value(inside, scale)} {unit} in the spike, peak {_value(entry.spike, scale)} {unit} {place},"
    text += f" vs {_value(entry.baseline, scale)} {unit} at baseline"
    if entry.z is not None:
        of_peak = " of the peak" if place != IN_SPIKE and inside is not None else ""
        text += f" (robust z{of_peak} {fmt_number(entry.z)})"
    if entry.material_excess is not None:
        text += f"; it counts fully from +{_value(entry.material_excess, abs(scale))} {unit}"
    return text + "."


def split_sentence(split: LatencySplit | None) -> str | None:
    """Where the slow requests' extra latency went, from ``latency_split`` (None without one)."""
    if split is None:
        return None
    parts = [f"{label} {value:+.1f} ms" for label, value in (
        ("server", split.server_growth_ms), ("outside the server", split.outside_server_growth_ms),
        ("send lateness", split.lateness_growth_ms)) if value is not None]
    return (f"Extra latency of the slow requests: {split.latency_growth_ms:+.1f} ms on average"
            + (f" — {', '.join(parts)}." if parts else "."))


def factors_sentence(factors: dict[str, float]) -> str | None:
    """``Confidence is the product of: overlap lift 100%, server side 47%.``"""
    shown = [f"{name.replace('_', ' ')} {100 * value:.0f}%" for name, value in factors.items()]
    return f"Confidence is the product of: {', '.join(shown)}." if shown else None


def scalar_sentence(key: str, value, place: str | None = None) -> str | None:
    """One scalar of the evidence as words with its unit; None for absent or structured values.
    ``place``: where the figure was measured when not inside the spike (the evidence's ``places``)."""
    if value is None or isinstance(value, (dict, list)):
        return None
    where = f" ({place})" if place else ""
    if key in KNOWN_SCALARS and isinstance(value, (int, float)) and not isinstance(value, bool):
        label, fmt = KNOWN_SCALARS[key]
        return f"{label[0].upper()}{label[1:]}: {fmt(value)}{where}."
    label = str(key).replace("_", " ")
    if isinstance(value, bool):
        shown = "yes" if value else "no"
    elif isinstance(value, (int, float)):
        shown = fmt_number(value)
        for suffix, unit in (("_ms", " ms"), ("_share", ""), ("_bytes", " bytes"), ("_s", " s")):
            if key.endswith(suffix):
                label = str(key)[: -len(suffix)].replace("_", " ")
                shown = f"{100 * value:.1f}%" if suffix == "_share" else f"{fmt_number(value)}{unit}"
                break
    else:
        shown = str(value)
    return f"{label[0].upper()}{label[1:]}: {shown}{where}."


def pair_sentences(evidence: dict) -> list[str]:
    """The LLM causes' levels as sentences: ``KV-cache usage: 99% of the cache in the spike vs 45% of the
    cache at baseline.``, the prompt tokens split into ours and the other traffic's, the long prompts
    that overlapped the slow streams, and the requests waiting on the server."""
    out = []
    where = places_of(evidence)
    for spike_key, base_key, label, shown in LEVEL_PAIRS:
        spike, base = evidence.get(spike_key), evidence.get(base_key)
        if not isinstance(spike, (int, float)):
            continue
        against = PAIR_AGAINST.get(base_key, "at baseline")
        text = (f"{label}: {shown(spike)} {where.get(spike_key, 'in the spike')}" if against == "at baseline"
                else f"{label}: {shown(spike)}")
        if isinstance(base, (int, float)):
            text += f" vs {shown(base)} {'at baseline' if against == 'at baseline' else 'for ' + against}"
        if spike_key == "tpot_slow_ms" and isinstance(evidence.get("tpot_ratio"), (int, float)):
            text += f" ({evidence['tpot_ratio']:.1f}×)"
        if spike_key == "prompt_tokens_per_s":
            parts = [f"{who} {fmt_number(evidence[key])}/s" for who, key in (
                ("ours", "own_prompt_tokens_per_s"), ("other traffic", "other_traffic_prompt_tokens_per_s"))
                if isinstance(evidence.get(key), (int, float))]
            text += f" ({', '.join(parts)})" if parts else ""
        out.append(text + ".")
    long = evidence.get("long_prompts")
    if isinstance(long, dict) and long.get("count"):
        largest = [p.get("prompt_tokens") for p in long.get("largest") or [] if isinstance(p, dict)]
        text = (f"{long['count']:,} long prompts (over {fmt_number(long.get('threshold_tokens'))} tokens"
                + (f", sent {long['sent']}" if long.get("sent") else "") + ") were being prefilled while the slow streams decoded")
        if largest:
            text += "; the largest " + ", ".join(fmt_number(v) for v in largest if v is not None) + " tokens"
        if isinstance(long.get("chance"), (int, float)) and long.get("requests"):
            text += (f"; {long['count']:,} of {long['requests']:,} requests sent then, a chance of "
                     f"{long['chance']:.2g} under the baseline's prompts")
        out.append(text + ".")
    waiting = evidence.get("server_waiting")
    if isinstance(waiting, dict) and waiting.get("spike") is not None:
        out.append(f"Requests waiting on the server: {fmt_number(waiting['spike'])} in the spike vs "
                   f"{fmt_number(waiting.get('baseline'))} at baseline.")
    return out


def evidence_sentences(cause: CauseFinding) -> list[str]:
    """Every part of a cause's evidence as a sentence with units (bounded), the summary first. The
    evidence is each detector's own dict (its keys differ per detector): the parts the detector kit
    writes in one shape (signal contrasts, latency split, factors, places, weak findings) are read
    through their types (reports/upgrade.py; a part a plug-in wrote in another shape is left out),
    the rest defensively."""
    evidence = cause.evidence
    sentences = []
    if isinstance(evidence.get("summary"), str):
        sentences.append(evidence["summary"])
    sentences += [signal_sentence(e) for e in sorted(contrasts_of(evidence), key=lambda e: -e.confidence)]
    sentences += pair_sentences(evidence)
    paired = {key for pair in LEVEL_PAIRS for key in pair[:2]}
    places = places_of(evidence)
    for key, value in evidence.items():
        if key not in SKIPPED and key not in paired:
            made = scalar_sentence(str(key), value, places.get(key))
            if made:
                sentences.append(made)
    weak = weak_findings_of(evidence)
    if weak:
        ranked = sorted(weak, key=lambda w: -w.confidence)
        sentences.append("Findings below the threshold: " + "; ".join(
            f"{cause_title(w.kind)} {100 * w.confidence:.0f}%" for w in ranked) + ".")
    for made in (split_sentence(latency_split_of(evidence)), factors_sentence(factors_of(evidence))):
        if made:
            sentences.append(made)
    return sentences[:MAX_SENTENCES]


def evidence_chart(entry: EvidenceSeries, origin_ns: int) -> dict:
    """One evidence series for the page: x (s since ``origin_ns``), y and its levels in shown units."""
    scale, unit, label = series_display(entry.name, entry.unit, entry.counter)

    def scaled(x):
        return None if x is None else float(x) * scale

    spread = entry.spread
    baseline = scaled(entry.baseline)
    band = None
    if baseline is not None and spread is not None:
        low, high = sorted((baseline - abs(spread * scale), baseline + abs(spread * scale)))
        band = [low, high]
    spike = scaled(entry.spike)
    return {"title": label, "unit": unit, "kind": entry.kind,
            "x": [round((t - origin_ns) / NS_PER_S, 3) for t in entry.t_ns],
            "y": [float(v) * scale for v in entry.values],
            "baseline": baseline, "band": band, "spike": spike,
            "spike_text": (f"{'longest' if entry.kind == 'events' else 'spike level'} "
                           f"{fmt_number(spike)} {unit}" + (f" ({entry.place})" if entry.place not in (None, "in the spike") else "")
                           if spike is not None else ""),
            "baseline_text": f"baseline {fmt_number(baseline)} {unit}" if baseline is not None else "",
            "marks": [{"y": scaled(m.value), "text": f"{m.label} {fmt_number(scaled(m.value))}"}
                      for m in entry.marks if m.value is not None]}
