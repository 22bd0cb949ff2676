"""The registry of tailscope's cause detectors (one module per cause, ``detect_*.py``).

``default_registry()`` returns a new :class:`~.causes.DetectorRegistry` with
every detector below; ``analyze_run`` uses it unless given another. The
cause kinds are the strings the lab scores (AC@1 per fault kind).
"""

from __future__ import annotations

from tailscope.analyzers.causes.protocol import DEFAULT_MIN_CONFIDENCE, DetectorRegistry
from tailscope.analyzers.causes.detect_cpu_contention import CpuContentionDetector
from tailscope.analyzers.causes.detect_cpu_throttling import CpuThrottlingDetector
from tailscope.analyzers.causes.detect_gc import GcDetector
from tailscope.analyzers.causes.detect_generator import GeneratorDetector
from tailscope.analyzers.causes.detect_gpu import GpuThrottlingDetector
from tailscope.analyzers.causes.detect_io import IoStallDetector
from tailscope.analyzers.causes.detect_queue import QueueSaturationDetector
from tailscope.analyzers.causes.detect_swap import SwapDetector

#: Every cause a spike can be given, ``unexplained`` last.
CAUSE_KINDS = ("gc", "cpu_throttling", "cpu_contention", "swap", "io_stall", "queue_saturation", "gpu_throttling",
               "generator", "unexplained")


def all_detectors() -> list:
    """New instances of every detector, in CAUSE_KINDS order."""
    return [GcDetector(), CpuThrottlingDetector(), CpuContentionDetector(), SwapDetector(), IoStallDetector(),
            QueueSaturationDetector(), GpuThrottlingDetector(), GeneratorDetector()]


def default_registry(min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> DetectorRegistry:
    """A registry holding every detector (a new object each call: nothing global)."""
    registry = DetectorRegistry(min_confidence)
    for detector in all_detectors():
        registry.register(detector)
    return registry
