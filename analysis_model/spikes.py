"""P99 spikes as the analysis states them: ``spikes``, ``spike_detection`` and the ``$defs`` a
spike is made of (``spike``, ``finding``, ``decomposition``, ``trace``).

Built by analyzers/spikes/detection.py (:func:`find_spikes`, :func:`detection_facts`) and the
cause registry (analyzers/causes/protocol.py); drawn by the report's spike table and cards
(reports/cards.py, evidence_text.py, timeline.py). Times are epoch ns (``*_ns``), latencies ms
(``*_ms``), shares in [0, 1].

A field with a default is one an analysis written by an older tailscope may lack: the default is
how such an analysis reads. A field declared :func:`~.codec.written_when_set` is left out of the
JSON while None (``answer_length``, ``recurring_stalls``: set only on the spikes they describe).

What differs per cause detector stays untyped: a finding's ``evidence`` (``dict[str, Any]``: each
detector's own numbers, docs/analyzers/causes.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True)
class MeanP50:
    """Mean and median (ms; None without samples) of one stage over ``count`` requests."""

    mean_ms: float | None
    p50_ms: float | None
    count: int


@dataclass(frozen=True, slots=True)
class StageGrowth:
    """One stage's slow-vs-normal statistics and ``growth_ms``: the slow requests' mean minus the
    normal requests' (ms; None unless both sides have the stage)."""

    slow: MeanP50
    normal: MeanP50
    growth_ms: float | None


@dataclass(frozen=True, slots=True)
class Decomposition:
    """``$defs/decomposition``: a spike's slow requests against the normal ones (outside every
    spike), stage by stage (``stages``, in the stage matrix's order), and the stage that grew most
    (``dominant_stage``, never ``server``) with its sentence (``summary``). ``available`` is false
    when there is no stage split (``unavailable_reason`` says why: no slow record kept, no span
    joined; None when available; an analysis before retention had no such case: available)."""

    slow_requests: int
    joined_slow_requests: int
    normal_requests: int
    joined_normal_requests: int
    stages: dict[str, StageGrowth]
    dominant_stage: str | None
    summary: str | None
    available: bool = True
    unavailable_reason: str | None = None


@dataclass(frozen=True, slots=True)
class CauseFinding:
    """``$defs/finding``: one cause of a spike: its ``kind`` (``gc``, ``queue_saturation``, …,
    ``unexplained``), ``confidence`` in [0, 1] and ``evidence``: the detector's numbers and its
    one-sentence ``summary``, a dict whose keys differ per detector (docs/analyzers/causes.md;
    ``unexplained`` holds the decomposition as JSON)."""

    kind: str
    confidence: float
    evidence: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TraceSpan:
    """One span of a representative trace: times in ms since the request's scheduled send;
    ``depth`` 0 for a root; ``stage`` None when no rule maps it (``server`` for server spans)."""

    name: str
    stage: str | None
    service: str | None
    depth: int
    start_ms: float
    end_ms: float
    error: bool
    attributes: dict[str, str]


@dataclass(frozen=True, slots=True)
class RepresentativeTrace:
    """``$defs/trace``: a typical slow request of a spike and its spans (at most 200);
    ``sent_ms`` (None when the send time was not recorded) and ``end_ms`` are ms after
    ``scheduled_ns`` (epoch ns)."""

    trace_id: str
    cls: str | None
    latency_ms: float
    scheduled_ns: int
    sent_ms: float | None
    end_ms: float
    spans: tuple[TraceSpan, ...]


@dataclass(frozen=True, slots=True)
class AnswerLength:
    """A spike judged on e2e latency adjusted for answer length (an LLM run whose answers differ in
    length): the adjusted P99 (ms, None without values), the test's τ (``threshold_ms``), their
    ``ratio``, the median output-token ratio (spike over normal requests) and the ``summary``."""

    p99_ms: float | None
    threshold_ms: float
    ratio: float | None
    output_tokens_ratio: float | None
    summary: str


@dataclass(frozen=True, slots=True)
class RecurringStalls:
    """Recurring stalls grouped as one spike record (analyzers/spikes/stalls.py): ``count`` stalls
    (>= 3), ``period_s`` apart on average (``interval_cv`` their spread, ``regular`` whether they
    keep time), each ``pause_ms`` long; ``requests`` raised by them; ``quiet_p99_ms`` the P99
    between them; ``starts_ns``: the first 500 starts (epoch ns); ``evidence_ns``: [start, end] of
    the largest stall, where the causes' evidence was read (empty in analyses before it)."""

    count: int
    period_s: float
    interval_cv: float | None
    regular: bool
    pause_ms: float
    requests: int
    quiet_p99_ms: float
    summary: str
    starts_ns: tuple[int, ...]
    evidence_ns: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EvidenceMark:
    """A level an evidence series' finding names (in the series' unit; None when the finding had
    none), with its ``label`` ("normal P99 depth")."""

    value: float | None
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceSeries:
    """One series a spike's top cause rests on, around the spike (analyzers/spikes/evidence_series.py):
    ``values`` (in ``unit``; a counter as its rate per second) at ``t_ns`` (epoch ns: 1-s bin
    centres, or event starts for ``kind`` ``"events"``), at most 600 points; ``spike``, ``baseline``
    and ``spread`` the levels the finding states; ``place`` where the spike level was measured
    (None: in the spike); ``marks``: other levels the finding names."""

    name: str
    kind: Literal["signal", "events"]
    unit: str
    counter: bool
    t_ns: tuple[int, ...]
    values: tuple[float, ...]
    spike: float | None
    baseline: float | None
    spread: float | None
    place: str | None = None
    marks: tuple[EvidenceMark, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Spike:
    """``$defs/spike``: one P99 spike: detection windows flagged by the tail-share test (or a
    group of recurring stalls, ``recurring_stalls``), from ``start_ns`` to ``end_ns`` (epoch ns)
    with its ``peak_ns`` (the middle of its window with the highest slow share).

    ``p99_ms`` (claimed when its samples suffice), from ``percentiles_from`` (the per-window
    histograms of a retained run, else the records; ``records_kept`` of its requests kept);
    ``baseline_p99_ms``: τ, the quiet samples' ``baseline_quantile`` (an LLM run judged for answer
    length: the normal requests' e2e P99, None without any); ``excess_ms`` = P99 − baseline (None
    when the baseline is); ``slow_requests`` above τ of ``requests`` (``slow_share``) against the
    ``expected_slow_share`` a steady run holds, with its test's ``p_value``; ``windows``: detection
    windows (stalls, for a recurring-stalls record). ``causes`` ranked, highest confidence first
    (at least one: ``unexplained`` when no detector fired).

    An analysis written before the tail-share test (format 1.0 of the first slice) reads as it was
    then: P99 not claimed, from the records, a steady share of 1%, no p-value nor peak-window share
    (None); its ``records_kept``, ``slow_requests`` and ``slow_share`` are completed from its
    requests and decomposition by reports/upgrade.py."""

    start_ns: int
    end_ns: int
    peak_ns: int
    p99_ms: float
    p99_claimed: bool = False
    percentiles_from: Literal["records", "histograms"] = "records"
    records_kept: int
    baseline_p99_ms: float | None
    baseline_quantile: float | None = None
    excess_ms: float | None
    slow_requests: int
    slow_share: float
    expected_slow_share: float = 0.01
    p_value: float | None = None
    peak_window_slow_share: float | None = None
    requests: int
    windows: int
    recurring_stalls: RecurringStalls | None = written_when_set()
    decomposition: Decomposition
    causes: tuple[CauseFinding, ...]
    evidence_series: tuple[EvidenceSeries, ...] = ()
    representative_trace: RepresentativeTrace | None = None
    answer_length: AnswerLength | None = written_when_set()

    @property
    def top_cause(self) -> CauseFinding | None:
        """The highest-ranked cause (None only in a hand-built spike without causes)."""
        return self.causes[0] if self.causes else None

    @property
    def unexplained(self) -> bool:
        """No known cause explains the spike: its top cause is ``unexplained``, or it has none."""
        return not self.causes or self.causes[0].kind == "unexplained"

    def judged_p99(self) -> tuple[float | None, float | None]:
        """(P99, baseline) in ms the spike was judged on: e2e latency, or e2e adjusted for answer
        length where the run was judged so (``answer_length``)."""
        if self.answer_length is not None:
            return self.answer_length.p99_ms, self.answer_length.threshold_ms
        return self.p99_ms, self.baseline_p99_ms


@dataclass(frozen=True, slots=True)
class TooShort:
    """Why spike detection did not run: ``samples`` latency samples after the ``warmup_s`` (s)
    warm-up where the test needs ``needed``; at ``rate_per_s`` that takes ``enough_s`` (s) of
    load after the warm-up, ``load_s`` in all (None when the rate is 0)."""

    samples: int
    needed: int
    rate_per_s: float
    enough_s: float | None
    warmup_s: float
    load_s: float | None


@dataclass(frozen=True, slots=True)
class LongerAnswer:
    """An e2e P99 rise (``start_ns``..``end_ns``, epoch ns) that came only with longer answers: its
    e2e P99 and the plain e2e test's τ (ms), the median output-token and length-adjusted e2e ratios
    (its slow requests over the normal ones) and the ``summary``. Not an incident."""

    start_ns: int
    end_ns: int
    p99_ms: float
    baseline_p99_ms: float
    output_tokens_ratio: float
    length_adjusted_ratio: float
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SpikeDetection:
    """``spike_detection``: how spikes were looked for. ``performed`` false: no test (no windows,
    or too few samples: ``too_short``); ``method``: how causes were named (the detector registry
    or the BARO-style ranker); ``detection_window_s`` (s), ``baseline_p99_ms`` (τ, ms; of the
    length-adjusted e2e when ``judged_on`` is ``e2e_for_answer_length``) from
    ``baseline_samples`` quiet samples at ``baseline_quantile``; the steady run's
    ``expected_slow_share``; ``alpha`` (family-wise), ``tests`` (windows × scales, Bonferroni) and
    ``iterations``; ``warmup_s`` left out of detection; ``longer_answers``: e2e rises that came
    only with longer answers."""

    performed: bool
    method: Literal["detectors", "baro"]
    detection_window_s: float | None
    baseline_p99_ms: float | None
    baseline_quantile: float | None = None
    baseline_samples: int = 0
    expected_slow_share: float
    alpha: float
    tests: int
    iterations: int
    warmup_s: float = 0.0
    too_short: TooShort | None = None
    judged_on: Literal["latency", "e2e_for_answer_length"] = "latency"
    longer_answers: tuple[LongerAnswer, ...] = ()
