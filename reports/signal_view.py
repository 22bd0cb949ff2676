"""The report's "All signals" section: what to plot, what to list as constant, what to fold.

Takes the signal panels as grouped for the report (:func:`~.timeline.signal_panels`:
``[{"title", "unit", "series": [{"name", "unit", "x", "y"}]}]``) and

1. **lists constants instead of plotting them**: a series whose values never
   changed during the run (max − min ≤ 1e-9 × max(1, |max|), or a single
   reading) is not drawn; it becomes a row of the table of constants, in words
   for the known ones (``CPU quota: none``, ``cgroup period: 100 ms``,
   ``swap: none``), else ``name: value unit``;
2. **folds per-CPU series into their sum**: series named ``…cpu<N>.<rest>``
   (same prefix and rest, several N) become one series ``…cpu*.<rest>``, the
   sum over the CPUs (each interpolated onto the first one's times), *unless one
   CPU differs*: its mean over the run lies more than
   max(``CPU_DIFFERS_ABS`` = 0.1, ``CPU_DIFFERS_REL`` = 50% of the median CPU's mean)
   away from the median CPU's mean (for CPU seconds per second: a tenth of a
   core and half the typical CPU's load) — then every CPU of that group is drawn.

Panels left without a series disappear. Everything here is presentation; the
analysis keeps every series as sampled.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.reports.formatting import fmt_number

CONSTANT_TOLERANCE = 1e-9
CPU_DIFFERS_ABS = 0.1
CPU_DIFFERS_REL = 0.5
_PER_CPU = re.compile(r"^(?P<prefix>.*\bcpu)(?P<index>\d+)(?P<rest>\..+)$")
#: A limit at or above this many bytes is "no limit" (cgroup v1 writes 2^63 rounded to pages).
NO_LIMIT_BYTES = 2 ** 60


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} bytes"


def _limit_bytes(value: float) -> str:
    return "none" if value <= 0 or value >= NO_LIMIT_BYTES else _bytes(value)


#: Metric name → (label, value → words) for constants worth a sentence of their own.
CONSTANT_WORDS = {
    "cgroup.cpu.quota_us": ("CPU quota", lambda v: "none" if v <= 0 else f"{v / 1e3:g} ms per period"),
    "cgroup.cpu.period_us": ("cgroup period", lambda v: f"{v / 1e3:g} ms"),
    "cgroup.cpu.limit_cores": ("CPU limit", lambda v: "none" if v <= 0 else f"{v:g} cores"),
    "host.swap.total_bytes": ("swap", lambda v: "none" if v <= 0 else _bytes(v)),
    "host.swap.used_bytes": ("swap in use", lambda v: "none" if v <= 0 else _bytes(v)),
    "cgroup.mem.max_bytes": ("memory limit", _limit_bytes),
    "cgroup.mem.swap_max_bytes": ("swap limit", _limit_bytes),
    "cgroup.mem.swap_current_bytes": ("swap used by the cgroup", lambda v: "none" if v <= 0 else _bytes(v)),
}


def is_constant(values: list) -> bool:
    """True when the series never changed (or has fewer than two readings)."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if len(finite) < 2:
        return True
    low, high = min(finite), max(finite)
    return high - low <= CONSTANT_TOLERANCE * max(1.0, abs(high))


def constant_row(series: dict) -> dict:
    """``{"name", "label", "value"}``: one constant in words."""
    name = series["name"]
    metric = name.split("{", 1)[0]
    finite = [v for v in series.get("y") or [] if v is not None and np.isfinite(v)]
    value = finite[0] if finite else None
    if metric in CONSTANT_WORDS and value is not None:
        label, words = CONSTANT_WORDS[metric]
        return {"name": name, "label": label + name[len(metric):], "value": words(float(value))}
    unit = series.get("unit") or ""
    if value is None:
        shown = "no reading"
    elif unit == "bytes":
        shown = _bytes(float(value))
    else:
        shown = f"{fmt_number(float(value))} {unit}".strip()
    return {"name": name, "label": name, "value": shown}


def _cpu_groups(series: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in series:
        match = _PER_CPU.match(s["name"])
        if match:
            groups.setdefault((match.group("prefix"), match.group("rest")), []).append(s)
    return {key: members for key, members in groups.items() if len(members) > 1}


def differing_cpu(members: list[dict]) -> str | None:
    """Name of a CPU whose mean differs from the median CPU's (module docstring), else None."""
    means = [float(np.mean(m["y"])) if m["y"] else 0.0 for m in members]
    typical = float(np.median(means))
    allowed = max(CPU_DIFFERS_ABS, CPU_DIFFERS_REL * abs(typical))
    worst = int(np.argmax([abs(m - typical) for m in means]))
    return members[worst]["name"] if abs(means[worst] - typical) > allowed else None


def cpu_sum(prefix: str, rest: str, members: list[dict]) -> dict:
    """One series: the sum of the per-CPU series on the first one's times."""
    x = np.asarray(members[0]["x"], dtype=float)
    total = np.zeros(len(x))
    for m in members:
        total += np.interp(x, np.asarray(m["x"], dtype=float), np.asarray(m["y"], dtype=float))
    return {"name": f"{prefix}*{rest} (sum of {len(members)} CPUs)", "unit": members[0].get("unit") or "",
            "x": members[0]["x"], "y": [float(v) for v in total]}


def summarise_panels(panels: list[dict]) -> dict:
    """``{"panels", "constants", "folded", "series_total", "series_plotted"}`` (module docstring);
    ``folded``: one ``{"group", "folded", "cpus", "differs"}`` per per-CPU group."""
    constants, folded, out = [], [], []
    total = sum(len(p["series"]) for p in panels)
    changing = []
    for panel in panels:
        kept = []
        for s in panel["series"]:
            if is_constant(s.get("y") or []):
                constants.append(constant_row(s))
            else:
                kept.append(s)
        changing.append((panel, kept))
    groups = _cpu_groups([s for _, kept in changing for s in kept])
    replaced: dict[str, dict | None] = {}
    for (prefix, rest), members in groups.items():
        differs = differing_cpu(members)
        if differs is not None:
            folded.append({"group": f"{prefix}*{rest}", "folded": False, "cpus": len(members), "differs": differs})
            continue
        summed = cpu_sum(prefix, rest, members)
        folded.append({"group": f"{prefix}*{rest}", "folded": True, "cpus": len(members), "differs": None})
        replaced[members[0]["name"]] = summed
        for m in members[1:]:
            replaced[m["name"]] = None
    for panel, kept in changing:
        series = [replaced.get(s["name"], s) for s in kept]
        series = [s for s in series if s is not None]
        if not series:
            continue
        title = panel["title"]
        if len(panel["series"]) == 1 and series[0]["name"] != panel["series"][0]["name"]:
            title = series[0]["name"]
        elif any(s is not k for s, k in zip(series, kept)) or len(series) < len(kept):
            title += " (per-CPU series summed)"
        out.append({**panel, "title": title, "series": series})
    constants.sort(key=lambda row: (row["label"] == row["name"], row["label"]))
    return {"panels": out, "constants": constants, "folded": folded, "series_total": total,
            "series_plotted": sum(len(p["series"]) for p in out)}
