"""Fault kinds by name, and fault declarations parsed from the command line or a mapping.

:data:`INJECTORS` declares every fault kind tailscope ships, one registration
each (the injector classes live one per module; importing them registers
nothing). Adding a fault kind is one module and one line here.

Command line: ``KIND:at=10s,duration=5s,PARAM=VALUE,...`` (``at`` defaults
to 0, ``duration`` is required). Mapping (scenario ``faults:`` entries and
lab plans): ``{kind, at, duration, params: {...}}``.
"""

from __future__ import annotations

from typing import Any

from tailscope.faults.cpu_contention import CpuContention
from tailscope.faults.cpu_throttle import CpuThrottle
from tailscope.faults.gc_pressure import GcPressure
from tailscope.faults.injector import ROLES, FaultSpec, FaultSpecError, Injector, TargetInfo, validate_params
from tailscope.faults.io_stall import IoStall
from tailscope.faults.llm_load import LlmLongGenerations, LlmOverload, LlmPromptStorm
from tailscope.faults.memory_swap import MemorySwap
from tailscope.faults.overload import Overload
from tailscope.support.registry import Registry, UnknownName
from tailscope.support.units import parse_duration_s

#: Every fault kind tailscope ships, by its ``kind``, in the order the lab runs them.
INJECTORS: Registry[type[Injector]] = Registry("fault kind", key=lambda injector: injector.kind)
INJECTORS.register(CpuThrottle)
INJECTORS.register(CpuContention)
INJECTORS.register(MemorySwap)
INJECTORS.register(GcPressure)
INJECTORS.register(Overload)
INJECTORS.register(IoStall)
INJECTORS.register(LlmLongGenerations)
INJECTORS.register(LlmPromptStorm)
INJECTORS.register(LlmOverload)


def injector_class(kind: str) -> type[Injector]:
    """The injector of ``kind``. Raises FaultSpecError naming the known kinds."""
    try:
        return INJECTORS[kind]
    except UnknownName as exc:
        raise FaultSpecError("kind", str(exc)) from None


def build_spec(kind: str, at_s: float, duration_s: float, params: dict[str, Any], role: str = "cause") -> FaultSpec:
    """A validated FaultSpec (defaults filled in); ``role`` one of :data:`~.injector.ROLES`. Raises FaultSpecError."""
    cls = injector_class(kind)
    if at_s < 0:
        raise FaultSpecError("at", f"must be >= 0, got {at_s:g}")
    if duration_s <= 0:
        raise FaultSpecError("duration", f"must be > 0, got {duration_s:g}")
    if role not in ROLES:
        raise FaultSpecError("role", f"expected one of {', '.join(ROLES)}, got {role!r}")
    return FaultSpec(kind, float(at_s), float(duration_s), validate_params(kind, cls.params, params), role)


def parse_fault_option(text: str) -> FaultSpec:
    """``"cpu_throttle:at=10s,duration=5s,cpus=0.3"`` → FaultSpec. Raises FaultSpecError."""
    kind, _, rest = text.partition(":")
    values: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FaultSpecError(item, "expected NAME=VALUE")
        values[key.strip()] = value.strip()
    timing = {}
    for key, default in (("at", "0"), ("duration", None)):
        raw = values.pop(key, default)
        if raw is None:
            raise FaultSpecError(key, f"missing (e.g. {kind.strip()}:at=10s,duration=5s)")
        try:
            timing[key] = parse_duration_s(raw)
        except ValueError as exc:
            raise FaultSpecError(key, str(exc)) from None
    return build_spec(kind.strip(), timing["at"], timing["duration"], values)


def make_injector(spec: FaultSpec, target: TargetInfo) -> Injector:
    return injector_class(spec.kind)(spec, target)


def check_host(specs: list[FaultSpec]) -> None:
    """Run every kind's target-independent checks (root, tools). Raises FaultSetupError."""
    for kind in sorted({spec.kind for spec in specs}):
        injector_class(kind).check_host()
