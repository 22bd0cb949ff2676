"""The plug-in registry (support/registry.py) and the five registries declared with it."""

from __future__ import annotations

import pytest

from tailscope.analyzers.causes.registry import DETECTORS
from tailscope.faults.injector import FaultSpecError
from tailscope.faults.registry import INJECTORS, injector_class
from tailscope.loadgen.arrivals import ARRIVALS
from tailscope.loadgen.spec import ARRIVAL_PROCESSES, ArrivalSpec, SpecError
from tailscope.scenario_model.sections import SECTION_PARSERS
from tailscope.signals.config import SamplerConfig
from tailscope.signals.registry import SAMPLERS
from tailscope.signals.sampling_loop import default_samplers
from tailscope.support.registry import Registry, UnknownName


class _Plugin:
    def __init__(self, name: str):
        self.name = name


def test_members_register_by_call_or_decorator_and_iterate_in_registration_order():
    registry = Registry("widget", key=lambda member: member.name)
    zeta = registry.register(_Plugin("zeta"))

    @registry.register(name="alpha")
    def alpha():
        return "a"

    @registry.register
    class Middle:
        name = "middle"

    assert zeta.name == "zeta" and alpha() == "a"  # registering returns the member unchanged
    assert list(registry) == ["zeta", "alpha", "middle"] == list(registry.names())
    assert list(registry.values()) == [zeta, alpha, Middle]
    assert registry["alpha"] is alpha and "middle" in registry and "nope" not in registry
    assert registry.get("nope") is None and len(registry) == 3


def test_lookup_error_names_the_kind_and_lists_the_known_names():
    registry = Registry("widget", key=lambda member: member.name)
    registry.register(_Plugin("b"))
    registry.register(_Plugin("a"))
    with pytest.raises(UnknownName) as caught:
        registry["c"]
    assert str(caught.value) == "unknown widget 'c'; known: b, a"
    assert isinstance(caught.value, KeyError) and caught.value.known == ("b", "a")
    assert str(UnknownName("widget", "x", ())) == "unknown widget 'x'; known: none"


def test_names_are_unique_non_empty_strings():
    registry = Registry("widget", key=lambda member: member.name)
    registry.register(_Plugin("a"))
    with pytest.raises(ValueError, match="a widget named 'a' is already registered"):
        registry.register(_Plugin("a"))
    with pytest.raises(TypeError, match="non-empty string"):
        registry.register(_Plugin(""))
    with pytest.raises(TypeError, match="name=..."):
        Registry("gadget").register(_Plugin("x"))
    assert list(registry) == ["a"]  # a refused registration leaves nothing behind


def test_each_plugin_kind_is_declared_in_one_registry():
    assert list(DETECTORS) == ["gc", "process_stall", "cpu_throttling", "cpu_contention", "swap", "io_stall", "kv_cache_pressure",
                               "prefill_interference", "queue_saturation", "gpu_throttling", "generator"]
    assert all(DETECTORS[kind].kind == kind for kind in DETECTORS)
    assert list(INJECTORS) == ["cpu_throttle", "cpu_contention", "memory_swap", "gc_pressure", "overload", "io_stall",
                               "llm_long_generations", "llm_prompt_storm", "llm_overload"]
    assert all(INJECTORS[kind].kind == kind for kind in INJECTORS)
    assert list(SECTION_PARSERS) == ["retention", "faults", "stages", "abort_on", "verdict", "sweep"]
    assert ARRIVAL_PROCESSES == (*ARRIVALS, "closed") == ("constant", "poisson", "gamma", "replay", "closed")
    samplers = default_samplers(None, SamplerConfig())
    assert [s.name for s in samplers] == list(SAMPLERS)  # each factory builds the sampler it is named for


def test_unknown_plugin_names_are_refused_with_the_known_ones():
    with pytest.raises(FaultSpecError) as caught:
        injector_class("nope")
    assert caught.value.field == "kind"
    assert caught.value.message == f"unknown fault kind 'nope'; known: {', '.join(INJECTORS)}"
    with pytest.raises(SpecError, match="unknown arrival process 'bursty'; expected one of constant, poisson, "
                                        "gamma, replay, closed"):
        ArrivalSpec(process="bursty")
