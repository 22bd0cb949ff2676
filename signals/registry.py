"""The samplers tailscope ships, declared once, with how each is built for a sampling run.

:data:`SAMPLERS` maps each sampler's ``name`` to a factory ``(pid, config, rate_hz) ->
Sampler`` (``pid``: the target process, None for none; ``config``: the run's
:class:`~.config.SamplerConfig`; ``rate_hz``: the run's ticks per second, for a
sampler that keeps its own schedule), in the order the runner reads them each tick.
The sampler classes live one per source (host, psi, process, cgroup,
prometheus, gpu); importing them registers nothing. Adding a sampler is one
class and one registration here.
"""

from __future__ import annotations

from collections.abc import Callable

from tailscope.signals.cgroup import CgroupSampler
from tailscope.signals.config import SamplerConfig
from tailscope.signals.gpu import GpuSampler
from tailscope.signals.host import DiskSampler, HostCpuSampler, LoadAvgSampler, MemorySampler, VmstatSampler
from tailscope.signals.process import ConnectionsSampler, ProcessSampler
from tailscope.signals.prometheus import PrometheusSampler
from tailscope.signals.psi import PressureSampler
from tailscope.signals.sampler import Sampler
from tailscope.support.registry import Registry

SamplerFactory = Callable[[int | None, SamplerConfig, float], Sampler]


def _unconfigured(sampler: Callable[[], Sampler]) -> SamplerFactory:
    """The factory of a sampler with nothing to configure (host-wide, pressure, GPU)."""
    return lambda pid, config, rate_hz: sampler()


#: Every sampler tailscope ships, by name, in reading order.
SAMPLERS: Registry[SamplerFactory] = Registry("sampler")
SAMPLERS.register(_unconfigured(HostCpuSampler), name=HostCpuSampler.name)
SAMPLERS.register(_unconfigured(LoadAvgSampler), name=LoadAvgSampler.name)
SAMPLERS.register(_unconfigured(MemorySampler), name=MemorySampler.name)
SAMPLERS.register(_unconfigured(VmstatSampler), name=VmstatSampler.name)
SAMPLERS.register(_unconfigured(DiskSampler), name=DiskSampler.name)
SAMPLERS.register(_unconfigured(PressureSampler), name=PressureSampler.name)
SAMPLERS.register(lambda pid, config, rate_hz: ProcessSampler(pid, include_children=config.include_children),
                  name=ProcessSampler.name)
SAMPLERS.register(lambda pid, config, rate_hz: ConnectionsSampler(pid, include_children=config.include_children),
                  name=ConnectionsSampler.name)
SAMPLERS.register(lambda pid, config, rate_hz: CgroupSampler(pid, location=config.cgroup), name=CgroupSampler.name)
SAMPLERS.register(lambda pid, config, rate_hz: PrometheusSampler(
    config.prometheus_urls, config.prometheus_timeout_s, rate_hz),
                  name=PrometheusSampler.name)
SAMPLERS.register(_unconfigured(GpuSampler), name=GpuSampler.name)
