"""The report's signal panels: which series are drawn together, under which title and
unit, aligned with latency on the shared time axis (docs/signals.md "Report panels").

Applied at render time to the analysis's ``signals.series`` (tailscope.reports.timeline).
A panel is ``{"id", "title", "unit", "series": [names]}`` (names of ``signals.series``
entries, in drawing order); a panel is emitted only when at least one of its series
exists. Series are matched by their metric name (the part before ``{``), so a remote
agent's ``host.cpu.user_s{host="H"}`` lands in the same panel as the harness's own.
0/1 flag series that never became 1 (GPU clocks-event reasons that never fired) are
left out of their panel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tailscope.analysis_model.signals import SignalSeries


@dataclass(frozen=True)
class PanelSpec:
    """One panel: id, title, unit, and the metric-name patterns (regexes, full match) it draws."""

    id: str
    title: str
    unit: str
    patterns: tuple[str, ...]


#: The report's signal panels, in page order (docs/signals.md "Report panels").
PANELS = (
    PanelSpec("generator", "Generator lateness & its own GC pauses", "ms", (
        r"generator\.lateness_(p99|max)_ms", r"generator\.gc_pause_ms")),
    PanelSpec("generator_cpu", "Generator CPU", "% of one core", (r"generator\.cpu_percent",)),
    PanelSpec("cpu", "CPU in use", "cores", (
        r"host\.cpu\.(user|system|iowait|steal)_s", r"proc\.cpu\.(user|system)_s", r"cgroup\.cpu\.usage_ns",
        r"cgroup\.cpu\.limit_cores")),
    PanelSpec("cpu_per_core", "CPU busy per core", "cores", (r"host\.cpu\d+\.busy_s",)),
    PanelSpec("throttling", "CPU throttling (CFS quota)", "share of time / of periods", (
        r"cgroup\.cpu\.throttled_ns", r"cgroup\.cpu\.throttled_period_share")),
    PanelSpec("runqueue_psi", "Run-queue wait & pressure stall (PSI)", "s/s", (
        r"proc\.runqueue_wait_ns", r"psi\.(cpu|memory|io)\.(some|full)_us", r"cgroup\.psi\.(cpu|memory|io)\.(some|full)_us")),
    PanelSpec("load", "Runnable and blocked tasks", "tasks", (
        r"host\.procs_(running|blocked)", r"host\.load\.1m", r"proc\.threads_blocked")),
    PanelSpec("ctxt", "Context switches", "/s", (r"proc\.ctxt\.(voluntary|nonvoluntary)", r"host\.ctxt")),
    PanelSpec("memory", "Memory & swap in use", "bytes", (
        r"host\.mem\.used_bytes", r"host\.swap\.used_bytes", r"proc\.rss_bytes",
        r"cgroup\.mem\.(current|max|swap_current|swap_max)_bytes")),
    PanelSpec("paging", "Swap I/O, major faults & memory-limit events", "/s", (
        r"host\.vm\.(pswpin|pswpout|pgmajfault|oom_kill)", r"proc\.major_faults", r"cgroup\.mem\.failcnt",
        r"cgroup\.mem\.events\.\w+")),
    PanelSpec("disk_bytes", "Disk & target storage I/O", "bytes/s", (
        r"host\.disk\.(read|write)_bytes", r"proc\.io\.(read|write)_bytes")),
    PanelSpec("disk_requests", "Disk requests & cache flushes", "/s", (r"host\.disk\.(reads|writes|flushes)",)),
    PanelSpec("disk_time", "Disk busy time & queue", "s/s", (r"host\.disk\.(busy|queue)_s",)),
    PanelSpec("gc", "GC pauses of the target", "ms", (r"gc\.pause_ms",)),
    PanelSpec("queue", "Queue depth", "requests", (
        r"queue\.(depth|capacity)", r"prom\..*(queue|pending|waiting|num_requests).*")),
    PanelSpec("gpu_util", "GPU utilisation", "%", (r"gpu\d+\.util_pct",)),
    PanelSpec("gpu_clocks", "GPU clocks", "MHz", (r"gpu\d+\.(sm|mem)_clock_mhz",)),
    PanelSpec("gpu_throttle", "GPU throttle reasons & violation time", "flag / share of time", (
        r"gpu\d+\.clocks_event\.\w+", r"gpu\d+\.violation\.\w+_ns")),
    PanelSpec("gpu_power", "GPU power", "W", (r"gpu\d+\.power_w",)),
    PanelSpec("gpu_temperature", "GPU temperature", "degC", (r"gpu\d+\.temp_c",)),
    PanelSpec("gpu_memory", "GPU memory", "bytes", (r"gpu\d+\.mem_(used|total)_bytes",)),
    PanelSpec("prometheus", "Target metrics (Prometheus)", "as labelled", (r"prom\..*",)),
    PanelSpec("agent_clock", "Remote agent clock offset (harness − agent)", "ns", (r"agent\.clock_offset_ns",)),
)
#: Series never drawn: bookkeeping of the scrape itself.
HIDDEN = re.compile(r"prom\.(up|scrape_duration_s)")


def metric_name(series: str) -> str:
    """The series name without its ``{labels}``."""
    return series.split("{", 1)[0]


def _is_silent_flag(series: SignalSeries) -> bool:
    return series.unit == "bool" and not any(v for v in series.values)


def build_panels(series: list[SignalSeries], specs: tuple[PanelSpec, ...] = PANELS) -> list[dict]:
    """Group ``series`` (the ``signals`` section's) into panels ``{"id", "title", "unit",
    "series": [names]}``; each series in at most one panel (the first that matches), panels in
    ``specs`` order; a flag (unit ``bool``) that never fired is left out."""
    compiled = [(spec, [re.compile(p) for p in spec.patterns]) for spec in specs]
    members: dict[str, list[tuple[int, str]]] = {spec.id: [] for spec in specs}
    for entry in series:
        name = entry.name
        base = metric_name(name)
        if HIDDEN.fullmatch(base) or _is_silent_flag(entry):
            continue
        for spec, patterns in compiled:
            hit = next((i for i, p in enumerate(patterns) if p.fullmatch(base)), None)
            if hit is not None:
                members[spec.id].append((hit, name))
                break
    return [{"id": spec.id, "title": spec.title, "unit": spec.unit,
             "series": [name for _, name in sorted(members[spec.id])]}
            for spec in specs if members[spec.id]]
