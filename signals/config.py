"""What the sampling process watches besides the host: one config type.

Its own module so the sampler registry (which builds samplers from it) and the
sampling loop (:mod:`.sampling_loop`, which is given it) both import it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailscope.signals.cgroup import CgroupLocation
from tailscope.signals.prometheus import DEFAULT_SCRAPE_TIMEOUT_S


@dataclass
class SamplerConfig:
    """What to watch besides the host: the target ``pid`` (None: no process
    signals), whether to sum over its descendants, an explicit cgroup (used
    instead of the pid's own), and Prometheus endpoints to scrape."""

    pid: int | None = None
    include_children: bool = True
    cgroup: CgroupLocation | None = None
    prometheus_urls: list[str] = field(default_factory=list)
    prometheus_timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S
