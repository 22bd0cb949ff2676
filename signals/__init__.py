"""Signal samplers: host, target process, cgroup, PSI and GPU (docs/signals.md).

Run as a process with ``python -m tailscope.signals``, or in-process
with :func:`run_sampling`.
"""

from tailscope.signals.sampler import COUNTER, GAUGE, Sampler, SeriesMeta
from tailscope.signals.sampling_loop import SamplingSummary, default_samplers, run_sampling

__all__ = [
    "COUNTER",
    "GAUGE",
    "Sampler",
    "SamplingSummary",
    "SeriesMeta",
    "default_samplers",
    "run_sampling",
]
