"""The cause detectors tailscope ships, declared once (one module per cause, ``detect_*.py``).

:data:`DETECTORS` lists every detector class by its ``kind``, in the order causes
are listed; adding a detector is one module and one line here. Everything else
that depends on which causes exist is derived from the detectors' declarations
(:class:`~.protocol.CauseDetector`: ``kind``, ``answers``, ``reads``, ``aliases``):

- :data:`CAUSE_KINDS`: every cause a spike can be given, ``unexplained`` last;
- :func:`cause_of_fault` / :func:`cause_names_by_fault`: which cause names a fault
  kind (the lab's scoring, the synthetic runs' expected causes);
- :func:`series_kinds`: which cause a signal series points to (the BARO-style ranker).

``default_registry()`` returns a new :class:`~.protocol.DetectorRegistry` with
an instance of every detector; ``analyze_run`` uses it unless given another.
"""

from __future__ import annotations

from tailscope.analyzers.causes.detect_cpu_contention import CpuContentionDetector
from tailscope.analyzers.causes.detect_cpu_throttling import CpuThrottlingDetector
from tailscope.analyzers.causes.detect_gc import GcDetector
from tailscope.analyzers.causes.detect_generator import GeneratorDetector
from tailscope.analyzers.causes.detect_gpu import GpuThrottlingDetector
from tailscope.analyzers.causes.detect_io import IoStallDetector
from tailscope.analyzers.causes.detect_kv_cache import KvCacheDetector
from tailscope.analyzers.causes.detect_prefill import PrefillInterferenceDetector
from tailscope.analyzers.causes.detect_process_stall import ProcessStallDetector
from tailscope.analyzers.causes.detect_queue import QueueSaturationDetector
from tailscope.analyzers.causes.detect_swap import SwapDetector
from tailscope.analyzers.causes.protocol import DEFAULT_MIN_CONFIDENCE, CauseDetector, DetectorRegistry
from tailscope.support.registry import Registry

#: The cause of a spike no detector explains (protocol.unexplained).
UNEXPLAINED = "unexplained"

#: Every detector class tailscope ships, by kind, in the order causes are listed.
DETECTORS: Registry[type[CauseDetector]] = Registry("cause detector", key=lambda detector: detector.kind)
DETECTORS.register(GcDetector)
DETECTORS.register(ProcessStallDetector)
DETECTORS.register(CpuThrottlingDetector)
DETECTORS.register(CpuContentionDetector)
DETECTORS.register(SwapDetector)
DETECTORS.register(IoStallDetector)
DETECTORS.register(KvCacheDetector)
DETECTORS.register(PrefillInterferenceDetector)
DETECTORS.register(QueueSaturationDetector)
DETECTORS.register(GpuThrottlingDetector)
DETECTORS.register(GeneratorDetector)

#: Every cause a spike can be given, ``unexplained`` last.
CAUSE_KINDS = (*DETECTORS, UNEXPLAINED)


def all_detectors() -> list[CauseDetector]:
    """New instances of every detector, in CAUSE_KINDS order."""
    return [detector() for detector in DETECTORS.values()]


def default_registry(min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> DetectorRegistry:
    """A registry holding every detector (a new object each call: nothing global)."""
    registry = DetectorRegistry(min_confidence)
    for detector in all_detectors():
        registry.register(detector)
    return registry


def detectors_by_fault() -> dict[str, type[CauseDetector]]:
    """Fault kind → the detector that answers it (its ``answers``). Raises ValueError when two do."""
    out: dict[str, type[CauseDetector]] = {}
    for detector in DETECTORS.values():
        for fault in detector.answers:
            if fault in out:
                raise ValueError(f"fault kind {fault!r} is answered by both {out[fault].kind!r} and {detector.kind!r}")
            out[fault] = detector
    return out


def cause_of_fault(fault_kind: str) -> str:
    """The cause kind a detector should name for ``fault_kind``; ``unexplained`` when none answers it."""
    detector = detectors_by_fault().get(fault_kind)
    return detector.kind if detector is not None else UNEXPLAINED


def cause_names_by_fault() -> dict[str, frozenset[str]]:
    """Fault kind → every cause kind that names it: the answering detector's kind and its aliases."""
    return {fault: frozenset((detector.kind, *detector.aliases)) for fault, detector in detectors_by_fault().items()}


def series_kinds() -> tuple[tuple[str, str], ...]:
    """``(series-name prefix, cause kind)`` from every detector's ``reads``, longest prefix first,
    so the first match is the most specific (``host.cpu.iowait`` before ``host.cpu``).
    Raises ValueError when two detectors read the same prefix."""
    owner: dict[str, str] = {}
    for detector in DETECTORS.values():
        for prefix in detector.reads:
            if prefix in owner:
                raise ValueError(f"series {prefix!r} is read by both {owner[prefix]!r} and {detector.kind!r}")
            owner[prefix] = detector.kind
    return tuple(sorted(owner.items(), key=lambda item: -len(item[0])))
