"""The run's health as the analysis states it: the load generator, outages, record retention, soak.

The top-level sections ``generator``, ``generator_limited_windows``, ``outages``, ``retention`` and
``soak`` of analyzers/analysis.schema.json. Built by analyzers/health/generator_health.py (with
analyzers/health/lateness_rule.py's judgement), analyzers/health/outages.py,
analyzers/inputs/retained.py and analyzers/patterns/soak.py; drawn by reports/loadgen_view.py and
reports/reliability_view.py. Times are epoch ns (generator clock), durations ms, rates per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tailscope.analysis_model.codec import written_when_set

LimitedCause = Literal["in_flight_cap", "generator_cpu", "cpu_contention", "gc", "unknown"]


@dataclass(frozen=True, slots=True)
class GeneratorWindow:
    """One analysis window as the generator saw it: requests ``scheduled`` in it (by scheduled time),
    of those ``sent``, ``late`` (sent more than 1 ms after schedule) and ``dropped`` (never sent);
    ``offered_rps``/``sent_rps`` from those counts, ``achieved_rps`` from successful requests that
    *ended* in it (req/s); ``late_share`` = (late + dropped) / scheduled; ``lateness_p99_ms`` (None
    without sends); the generator's gauges, mean of the readings in the window (None without one):
    ``cpu_percent`` (% of one core, busiest process), ``runqueue_wait_ms`` (busiest process),
    ``in_flight`` (summed over processes); ``gc_pause_ms``: GC pauses that started in it (ms)."""

    start_ns: int
    end_ns: int
    scheduled: int
    sent: int
    late: int
    dropped: int
    offered_rps: float
    sent_rps: float
    achieved_rps: float
    late_share: float
    lateness_p99_ms: float | None
    cpu_percent: float | None
    runqueue_wait_ms: float | None
    in_flight: float | None
    gc_pause_ms: float


@dataclass(frozen=True, slots=True)
class LimitedInterval:
    """A run of adjacent generator-limited windows (more than 1% of sends late): its span (epoch ns),
    ``windows`` in it, requests ``scheduled`` and ``late`` (late sends + dropped), ``late_share`` and
    the likeliest ``cause``. ``p99_shift_ms`` (its requests' latency P99 − service-time P99, ms; None
    without sent requests) and ``material`` (that shift above 5% of the run's P99 latency) come from
    the lateness rule; an analysis written before the rule reads ``material`` True (every interval
    was drawn then)."""

    start_ns: int
    end_ns: int
    windows: int
    scheduled: int
    late: int
    late_share: float
    cause: LimitedCause
    p99_shift_ms: float | None = None
    material: bool = True


@dataclass(frozen=True, slots=True)
class LimitedBand:
    """One entry of ``generator_limited_windows``: a generator-limited interval's span (epoch ns) for
    the latency chart, and whether its lateness mattered (drawn as a band only then; an analysis
    written before the lateness rule reads True)."""

    start_ns: int
    end_ns: int
    material: bool = True


@dataclass(frozen=True, slots=True)
class LatenessCheck:
    """The lateness rule at one claimed percentile (``"P50"`` or ``"P99"``): latency (from the
    scheduled send) and service time (from the actual send) at it, ms; ``shift_ms`` = their
    difference, ``share`` = shift / latency; ``lateness_ms`` the same percentile of lateness; None
    where a value is unknown. ``material``: claimed and share above 5%."""

    percentile: str
    latency_ms: float | None
    service_ms: float | None
    shift_ms: float | None
    share: float | None
    lateness_ms: float | None
    claimed: bool
    material: bool


@dataclass(frozen=True, slots=True)
class LatenessRule:
    """Whether the generator's lateness moved a claimed percentile by more than 5%
    (analyzers/health/lateness_rule.py): ``material`` when any check is; ``rule`` in words."""

    material: bool
    rule: str
    checks: list[LatenessCheck]


@dataclass(frozen=True, slots=True)
class GeneratorCpu:
    """The generator's CPU over the run, % of one core: mean and max of the per-window means (the
    busiest process per window); None without readings."""

    mean_percent: float | None = None
    max_percent: float | None = None


@dataclass(frozen=True, slots=True)
class GeneratorGc:
    """The generator processes' GC pauses: how many, their total and the longest (ms; None without)."""

    pauses: int
    total_ms: float
    max_ms: float | None


@dataclass(frozen=True, slots=True)
class GeneratorProcess:
    """One generator process (a distributed run's worker; ``worker`` None: the only process): its CPU
    (mean and max of its window means, % of one core), run-queue wait (total ms) and GC pauses."""

    worker: int | None
    cpu_mean_percent: float | None
    cpu_max_percent: float | None
    runqueue_wait_ms: float | None
    gc_pauses: int
    gc_total_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Generator:
    """The load generator's own health (analyzers/health/generator_health.py).

    ``load_model``: the manifest's ``arrival`` as written (always ``loop`` "open"|"closed" and
    ``process``; the other keys are the arrival's: ``rate``, ``users``, ``think_time_s``, ``trace``…);
    ``in_flight_policy`` and ``max_in_flight`` (None: no cap) from the run's options; ``dropped``:
    requests never sent; per-window ``windows`` (empty without a load period); ``limited``: more than
    1% of all sends late, ``late_share`` that share (absent, None, without a load period or requests);
    ``limited_windows`` its intervals; ``cpu``, ``gc``, ``runqueue_wait_ms`` (total ms, None without
    readings) and ``processes``; ``lateness_rule``: whether the lateness mattered (set by the analysis
    once the summary is known; None in an analysis written before the rule, which then reads
    ``limited`` as the headline)."""

    load_model: dict[str, Any]
    in_flight_policy: Literal["wait", "drop"]
    max_in_flight: int | None = None
    dropped: int
    windows: list[GeneratorWindow]
    limited: bool
    limited_windows: list[LimitedInterval]
    cpu: GeneratorCpu
    gc: GeneratorGc
    runqueue_wait_ms: float | None = None
    processes: list[GeneratorProcess] = field(default_factory=list)
    late_share: float | None = written_when_set()
    lateness_rule: LatenessRule | None = written_when_set()


@dataclass(frozen=True, slots=True)
class Outage:
    """A time the target went away: ``down`` (refused/reset connections) or ``stalled`` (timeouts),
    its span (epoch ns) and ``duration_ms``; ``requests`` that failed in it and ``errors_by_kind``
    (None and {} for a recorded outage event); ``recovered``: the target answered again before the
    load ended; ``source``: "derived from requests" or the event's source."""

    kind: Literal["down", "stalled"]
    start_ns: int
    end_ns: int
    duration_ms: float
    requests: int | None
    errors_by_kind: dict[str, int]
    recovered: bool
    source: str


@dataclass(frozen=True, slots=True)
class Outages:
    """Derived and recorded outages (analyzers/health/outages.py): ``count`` of all found,
    ``total_ms`` of the derived ones, and at most 100 (the longest), in start order."""

    count: int
    total_ms: float
    outages: list[Outage]


@dataclass(frozen=True, slots=True)
class Retention:
    """How per-request records were kept (analyzers/inputs/retained.py). ``sampled`` False: every
    record was kept, and the analysis writes only ``{"sampled": false}`` (the other fields read as
    their defaults). ``sampled`` True: a retention policy kept records around spikes and a sample
    elsewhere; ``requests`` counted in windows.arrow, ``records_kept`` (in records.arrow),
    ``records_kept_counted`` (as windows.arrow counted them), ``kept_share`` = records_kept /
    requests, ``sample_rate`` (in effect) and ``configured_sample_rate``, the keep window around
    spikes (s), ``keep_intervals`` ([start_ns, end_ns] pairs), ``disk_budget_bytes`` (None: none)
    and the analysis ``window_s`` (s) the histograms were merged into."""

    sampled: bool
    requests: int = 0
    records_kept: int = 0
    records_kept_counted: int = 0
    kept_share: float = 1.0
    sample_rate: float = 1.0
    configured_sample_rate: float = 1.0
    full_records_around_spikes_s: float | None = None
    keep_intervals: list[list[int]] = field(default_factory=list)
    disk_budget_bytes: int | None = None
    window_s: float = 1.0


@dataclass(frozen=True, slots=True)
class SoakPeriod:
    """One soak period (by scheduled time; epoch ns): requests, errors, ``error_rate``,
    ``achieved_rps`` (successes per second), P50/P99 latency (ms; None without successes; histograms
    when records were retained selectively), ``p99_claimed`` (enough successes to claim the P99);
    and the mean/max resident memory (MB) of the target and of tailscope's harness, receiver and
    sampler (None, and no key, where that series was not recorded or had no reading in the period)."""

    start_ns: int
    end_ns: int
    requests: int
    errors: int
    error_rate: float
    achieved_rps: float
    p50_ms: float | None
    p99_ms: float | None
    p99_claimed: bool
    target_rss_mean_mb: float | None = written_when_set()
    target_rss_max_mb: float | None = written_when_set()
    harness_rss_mean_mb: float | None = written_when_set()
    harness_rss_max_mb: float | None = written_when_set()
    receiver_rss_mean_mb: float | None = written_when_set()
    receiver_rss_max_mb: float | None = written_when_set()
    sampler_rss_mean_mb: float | None = written_when_set()
    sampler_rss_max_mb: float | None = written_when_set()


@dataclass(frozen=True, slots=True)
class TrendVerdict:
    """What both shapes of a soak ``drift`` or ``leak`` verdict hold (:class:`Soak`): its
    ``verdict`` word (drift: ``drift``/``trending``/``stable``/``insufficient data``; leak:
    ``leak``/``growing``/``flat``/``insufficient data``) and its one-sentence ``summary``. The rest
    of each shape differs: the diagnosis patterns' verdict is an :class:`~.patterns.Drift` /
    :class:`~.patterns.Leak`, the soak module's own test adds its per-metric (``metrics``) or
    per-series (``series``) fits (analyzers/patterns/soak.py)."""

    verdict: str
    summary: str


@dataclass(frozen=True, slots=True)
class Soak:
    """The soak view (analyzers/patterns/soak.py): ``shown`` for a load period of at least 10 min or a
    run with ``retention:`` (else ``reason`` says why, and the rest is empty: ``period_s`` None,
    ``periods`` [], ``drift``/``leak``/``verdicts_source`` None). ``period_s``: one period (s);
    ``drift`` and ``leak``: ``{verdict, summary, …}`` verdicts (docs/analysis-schema.md), from the
    diagnosis detectors' ``patterns`` (``verdicts_source`` "patterns") or the soak module's own
    tests ("soak"). An analysis written before the 10-min rule lacks ``shown`` and ``reason``: it reads
    as shown (its view was drawn whenever it had two periods), with no reason."""

    period_s: int | None
    periods: list[SoakPeriod]
    drift: dict[str, Any] | None
    leak: dict[str, Any] | None
    verdicts_source: Literal["soak", "patterns"] | None
    shown: bool = True
    reason: str | None = None
