"""The cause-detector protocol and registry that spike detection consults.

A detector looks at one spike (:class:`SpikeContext`) and returns a
:class:`Finding` — a kind (e.g. ``"gc_pause"``), a confidence in [0, 1] and
the numbers that support it — or None when it has nothing to say. The
registry runs only the detectors whose ``needs`` the run can satisfy, and a
finding *fires* when its confidence reaches ``min_confidence``.

When no detector fires, the spike's cause is ``unexplained``, carrying the
stage decomposition as evidence. Its confidence says how sure we are that
*none of the known causes* is behind the spike:
``coverage × (1 − strongest non-firing confidence)``, where coverage is the
share of registered detectors whose inputs the run had (a run without
signals cannot rule out throttling or swap, so "unexplained" is then weak).
"unexplained" is a valid answer and better than a wrong one. A
:class:`DetectorRegistry` is the set one analysis consults, a plain object
passed explicitly; a new one is empty. Which detectors tailscope ships is
declared once, in :data:`tailscope.analyzers.causes.registry.DETECTORS` (each a
:class:`CauseDetector`: it declares its ``kind``, the fault kinds it
``answers`` and the series it ``reads``);
:func:`~tailscope.analyzers.causes.registry.default_registry` builds a
DetectorRegistry of all of them.

A need ending in ``*`` is a prefix: ``"gpu*"`` is met by any series whose
name starts with ``gpu``; ``"a|b"`` is met by either; ``"events.gc_pause"`` is met by a run holding at least one
``gc_pause`` event (a run with events of other kinds only — injected faults, the
generator's own GC — has not checked the target's GC).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.spikes import CauseFinding, Decomposition
from tailscope.rundir import Run
from tailscope.support.cause_words import HOW_TO_CHECK, cause_title, word_list
from tailscope.support.registry import Registry

#: Findings at or above this confidence explain a spike.
DEFAULT_MIN_CONFIDENCE = 0.5
#: The metrics a spike is found in: end-to-end latency, an LLM's time to first token and time per output token.
METRICS = ("latency", "ttft", "tpot")
#: The most a finding counts on a spike of a metric its cause does not raise (``CauseDetector.raises``).
OFF_METRIC_CAP = 0.25
#: Evidence key of a finding that says its detector could not judge the spike though the run had its
#: inputs (too little of them: e.g. too few span gaps to tell a stall); its value is why. Such a
#: detector is listed with those whose inputs were not recorded, never as a check.
NOT_JUDGED = "not_judged"
#: Evidence key of a finding that says what its detector read when it could read one of several
#: inputs (``gc``: the target's GC pause events, or its runtime GC metrics). The unexplained summary
#: names the same words beside the check, from the detector's optional ``checked_with(available)``.
CHECKED_WITH = "checked_with"
#: Metric names in words.
METRIC_WORDS = {"latency": "latency", "ttft": "TTFT", "tpot": "TPOT"}


@dataclass(frozen=True)
class Finding:
    """A detector's verdict on one spike: kind, confidence in [0, 1], evidence numbers."""

    kind: str
    confidence: float
    evidence: dict = field(default_factory=dict)

    def __post_init__(self):
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence!r}")

    def as_dict(self) -> dict:
        return {"kind": self.kind, "confidence": float(self.confidence), "evidence": self.evidence}

    def as_cause(self) -> CauseFinding:
        """The finding as a spike's cause in the analysis (``$defs/finding``)."""
        return CauseFinding(self.kind, float(self.confidence), self.evidence)


@dataclass(frozen=True)
class SpikeContext:
    """What a detector may look at for one spike.

    ``slow_request_index`` / ``normal_request_index`` index the run's requests
    (rows of ``run.requests``); times are epoch ns. ``inputs`` (a
    :class:`~.run_inputs.RunInputs`) holds what detectors share for the run;
    ``threshold_ms`` is the baseline P99 that made a request slow; ``metric`` is what rose:
    ``"latency"`` (a latency spike), ``"ttft"`` or ``"tpot"`` (an LLM's token-level spike: the slow
    requests are those above that metric's baseline P99); ``metric_ms``: each request's value of
    that metric in ms, the one ``threshold_ms`` is compared with (NaN where a request has none;
    None for a latency spike: the requests' latency, :attr:`values_ms`).
    """

    run: Run
    start_ns: int
    end_ns: int
    peak_ns: int
    slow_request_index: np.ndarray
    normal_request_index: np.ndarray
    decomposition: Decomposition
    available: frozenset[str]
    inputs: object = None
    threshold_ms: float | None = None
    metric: str = "latency"
    metric_ms: np.ndarray | None = None

    @property
    def values_ms(self) -> np.ndarray:
        """Per request (rows of the run's requests), the value ``threshold_ms`` applies to, in ms:
        ``metric_ms``, or the requests' latency for a latency spike."""
        return self.inputs.req.latency_ms if self.metric_ms is None else self.metric_ms


@runtime_checkable
class Detector(Protocol):
    """A cause detector. ``needs`` names what it reads: ``"spans"``, ``"events"``,
    ``"signals"`` or a signal series name such as ``"host.cpu.busy"``."""

    name: str
    needs: tuple[str, ...]

    def score(self, ctx: SpikeContext) -> Finding | None:
        ...


class CauseDetector(ABC):
    """Base of the detectors tailscope ships: the declarations each makes as class attributes.

    - ``kind``: the cause it names (its findings' ``kind``, its name in the registry);
    - ``answers``: the fault kinds whose effect this cause is — lab injectors
      (``cpu_throttle``) and synthetic spikes (``gpu_throttle``); each fault kind is
      answered by one detector at most, and the lab scores a diagnosis by it;
    - ``reads``: the signal series that are evidence of this cause, as names or name
      prefixes (``"psi.io"``), each declared by one detector; ``derived.<metric>`` names
      a per-second metric the BARO-style ranker builds from events, spans or requests
      (``derived.gc_pause_ms_per_s``). A series that only rules a cause out or weighs a
      finding (the target's own CPU use, another cause's evidence through the kit) is not
      listed. The BARO-style ranker attributes a moved series to the detector reading it;
    - ``aliases``: other names a detector elsewhere may give this cause (``gc_pause``);
      the lab's scoring accepts them for the faults this detector answers;
    - ``needs``: as :class:`Detector` (inputs the run must have for it to run);
    - ``raises``: the metrics this cause raises (:data:`METRICS`): a stop of the whole target raises
      all of them; queueing, KV-cache pressure and a late generator raise the wait for the first token
      (``ttft``) but not the time per output token (``tpot``); other prompts' prefill raises ``tpot``.
      On a spike of a metric the cause does not raise, its finding is weak at most
      (:data:`OFF_METRIC_CAP`): it is kept among the weak findings with why.
    """

    kind: ClassVar[str]
    answers: ClassVar[tuple[str, ...]]
    reads: ClassVar[tuple[str, ...]]
    needs: ClassVar[tuple[str, ...]]
    aliases: ClassVar[tuple[str, ...]] = ()
    raises: ClassVar[tuple[str, ...]] = ("latency", "ttft", "tpot")

    @property
    def name(self) -> str:
        """The :class:`Detector` name: the cause kind."""
        return self.kind

    @abstractmethod
    def score(self, ctx: SpikeContext) -> Finding | None:
        """This cause's finding for the spike in ``ctx``, or None when its evidence is absent."""


def available_inputs(run: Run) -> frozenset[str]:
    """The inputs a run offers: table names with rows, ``events.<kind>`` for every event kind
    recorded (``events.gc_pause``: the target sent GC pauses), and every signal series name."""
    have = {name for name, table in (("spans", run.spans), ("events", run.events),
                                     ("signals", run.signals)) if len(table)}
    if len(run.events):
        have.update(f"events.{kind}" for kind in run.events.column("kind").unique().to_pylist() if kind is not None)
    if len(run.signals):
        have.update(s for s in run.signals.column("series").unique().to_pylist() if s is not None)
    return frozenset(have)


class DetectorRegistry:
    """An ordered set of detectors; empty when created."""

    def __init__(self, min_confidence: float = DEFAULT_MIN_CONFIDENCE):
        self.min_confidence = min_confidence
        self._detectors: Registry[Detector] = Registry("detector", key=lambda detector: detector.name)

    def register(self, detector: Detector) -> Detector:
        """Add a detector (names are unique); returns it, so it can decorate."""
        if not isinstance(detector, Detector):
            raise TypeError(f"{detector!r} does not implement the Detector protocol (name, needs, score)")
        return self._detectors.register(detector)

    def detectors(self) -> list[Detector]:
        return list(self._detectors.values())

    def eligible(self, available: frozenset[str]) -> list[Detector]:
        """Detectors whose needs are all available."""
        return [d for d in self._detectors.values() if all(need_met(n, available) for n in d.needs)]

    def attribute(self, ctx: SpikeContext) -> list[CauseFinding]:
        """The spike's causes, highest confidence first, or ``[unexplained]``. On a spike of
        ``ctx.metric`` a finding whose detector does not declare it ``raises`` that metric counts at
        most :data:`OFF_METRIC_CAP` (its evidence says so)."""
        scored = [(d, d.score(ctx)) for d in self.eligible(ctx.available)]
        # a detector that had its inputs but could not judge them says so: it was not a check
        unjudged = {d.name for d, f in scored if f is not None and f.evidence.get(NOT_JUDGED)}
        findings = [on_metric(d, f, ctx.metric) for d, f in scored if f is not None and d.name not in unjudged]
        fired = sorted((f for f in findings if f.confidence >= self.min_confidence),
                       key=lambda f: -f.confidence)
        if fired:
            return [f.as_cause() for f in fired]
        consulted = [d.name for d in self.eligible(ctx.available) if d.name not in unjudged]
        skipped = [name for name in self._detectors if name not in consulted]
        checked_with = {d.name: words for d in self.eligible(ctx.available)
                        if (words := getattr(d, "checked_with", lambda available: None)(ctx.available))}
        return [unexplained(ctx.decomposition, findings, consulted, skipped, self.min_confidence,
                            checked_with).as_cause()]


def on_metric(detector: Detector, finding: Finding, metric: str) -> Finding:
    """``finding`` as it counts on a spike of ``metric``: itself when its detector raises that metric
    (a detector declaring no ``raises`` raises every metric), else capped at :data:`OFF_METRIC_CAP`
    with ``evidence.off_metric`` saying why."""
    raises = getattr(detector, "raises", METRICS)
    if metric in raises or finding.confidence <= OFF_METRIC_CAP:
        return finding
    why = (f"{cause_title(finding.kind)} raises {word_list([METRIC_WORDS.get(m, m) for m in raises])}, "
           f"not {METRIC_WORDS.get(metric, metric)}")
    return Finding(finding.kind, OFF_METRIC_CAP, {**finding.evidence, "off_metric": why,
                                                  "confidence_before_off_metric": finding.confidence})


def need_met(need: str, available: frozenset[str]) -> bool:
    """Whether one need is available (a trailing ``*`` matches any name with that prefix;
    ``a|b`` is met by either alternative)."""
    if "|" in need:
        return any(need_met(alternative, available) for alternative in need.split("|"))
    if need.endswith("*"):
        return any(name.startswith(need[:-1]) for name in available)
    return need in available


def unexplained(decomposition: Decomposition, weak: list[Finding], consulted: list[str],
                skipped: list[str] = (), min_confidence: float = DEFAULT_MIN_CONFIDENCE,
                checked_with: dict[str, str] | None = None) -> Finding:
    """The ``unexplained`` finding: no detector fired; evidence is the decomposition (as JSON).

    Confidence = coverage × (1 − strongest weak confidence), coverage =
    consulted / (consulted + skipped); with no detector registered at all,
    coverage is 0: nothing was ruled out. Its summary says in words what was
    checked, the closest cause and how far it got (against ``min_confidence``),
    what could not be checked, and what grew (:func:`unexplained_summary`).
    """
    strongest = max((f.confidence for f in weak), default=0.0)
    total = len(consulted) + len(skipped)
    coverage = len(consulted) / total if total else 0.0
    summary = unexplained_summary(decomposition, weak, consulted, skipped, min_confidence, checked_with)
    return Finding("unexplained", round(coverage * (1.0 - strongest), 6), {
        "summary": summary,
        "coverage": coverage,
        "decomposition": encode(decomposition),
        "detectors_consulted": consulted,
        "detectors_without_inputs": list(skipped),
        "weak_findings": [f.as_dict() for f in weak],
    })


def unexplained_summary(decomposition: Decomposition, weak: list[Finding], consulted: list[str],
                        skipped: list[str] = (), min_confidence: float = DEFAULT_MIN_CONFIDENCE,
                        checked_with: dict[str, str] | None = None) -> str:
    """What was checked and what grew, in words, e.g. "No known cause explains it. Checked: GC
    pauses of the target, CPU contention and queue saturation; the closest, CPU contention,
    reached 28% (a cause needs 50%). Not checked (inputs not recorded): CPU throttling (CFS
    quota). What grew: batch_wait grew most: mean 0.3 ms → 8.5 ms (+8.2 ms) in …"."""
    parts = ["No known cause explains it."]
    if consulted:
        with_words = checked_with or {}
        parts.append("Checked: " + word_list([cause_title(name) + (f" (from {with_words[name]})"
                                                                    if name in with_words else "")
                                              for name in consulted]))
        closest = max(weak, key=lambda f: f.confidence, default=None)
        if closest is not None and closest.confidence > 0:
            parts[-1] += (f"; the closest, {cause_title(closest.kind)}, reached {closest.confidence:.0%} "
                          f"(a cause needs {min_confidence:.0%}).")
        else:
            parts[-1] += "; none of them saw any sign of its cause."
    else:
        parts.append("No cause could be checked.")
    if skipped:
        parts.append(f"Not checked (inputs not recorded): {word_list([cause_title(name) for name in skipped])}.")
        hints = [f"{cause_title(name)}: {HOW_TO_CHECK[name]}" for name in skipped if name in HOW_TO_CHECK]
        if hints:
            parts.append("To check " + "; ".join(hints) + ".")
    if decomposition.dominant_stage:
        parts.append(f"What grew: {decomposition.summary}.")
    else:
        parts.append("What grew: unknown — " + str(decomposition.summary or "no spans joined the slow requests") + ".")
    return " ".join(parts)
