"""Fault kinds by name, and fault declarations parsed from the command line or a mapping.

Command line: ``KIND:at=10s,duration=5s,PARAM=VALUE,...`` (``at`` defaults
to 0, ``duration`` is required). Mapping (scenario ``faults:`` entries and
lab plans): ``{kind, at, duration, params: {...}}``.
"""

from __future__ import annotations

from typing import Any

from tailscope.faults.injector import FaultSpec, FaultSpecError, Injector, TargetInfo, validate_params
from tailscope.faults.cpu_contention import CpuContention
from tailscope.faults.cpu_throttle import CpuThrottle
from tailscope.faults.gc_pressure import GcPressure
from tailscope.faults.io_stall import IoStall
from tailscope.faults.memory_swap import MemorySwap
from tailscope.faults.overload import Overload

#: Every fault kind tailscope ships, by name.
INJECTORS: dict[str, type[Injector]] = {
    cls.kind: cls for cls in (CpuThrottle, CpuContention, MemorySwap, GcPressure, Overload, IoStall)
}


def injector_class(kind: str) -> type[Injector]:
    try:
        return INJECTORS[kind]
    except KeyError:
        raise FaultSpecError("kind", f"unknown fault kind {kind!r}; known: {', '.join(sorted(INJECTORS))}") from None


def build_spec(kind: str, at_s: float, duration_s: float, params: dict[str, Any]) -> FaultSpec:
    """A validated FaultSpec (defaults filled in). Raises FaultSpecError."""
    cls = injector_class(kind)
    if at_s < 0:
        raise FaultSpecError("at", f"must be >= 0, got {at_s:g}")
    if duration_s <= 0:
        raise FaultSpecError("duration", f"must be > 0, got {duration_s:g}")
    return FaultSpec(kind, float(at_s), float(duration_s), validate_params(kind, cls.params, params))


def parse_fault_option(text: str) -> FaultSpec:
    """``"cpu_throttle:at=10s,duration=5s,cpus=0.3"`` → FaultSpec. Raises FaultSpecError."""
    from tailscope.scenario_model.scenario import parse_duration_s

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
