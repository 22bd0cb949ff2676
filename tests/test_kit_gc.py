"""GcPauseReporter: real collections become gc.pause spans with epoch-ns times."""

from __future__ import annotations

import gc
import time

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailscope.tracing import kit


@pytest.fixture
def provider_and_exporter():
    exporter = InMemorySpanExporter()
    provider = kit.setup_tracing("gc-test", exporter=exporter)
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


def make_garbage_cycles(count: int) -> None:
    for _ in range(count):
        node: dict = {}
        node["self"] = node


def gc_spans(exporter: InMemorySpanExporter):
    return [span for span in exporter.get_finished_spans() if span.name == kit.GC_PAUSE_SPAN]


def test_a_forced_collection_becomes_a_gc_pause_span_within_the_call(provider_and_exporter) -> None:
    provider, exporter = provider_and_exporter
    reporter = kit.GcPauseReporter(provider)
    reporter.start()
    was_enabled = gc.isenabled()
    gc.disable()  # so that the 500 cycles all wait for the forced collection
    try:
        make_garbage_cycles(500)
        before_ns = time.time_ns()
        gc.collect()
        after_ns = time.time_ns()
    finally:
        if was_enabled:
            gc.enable()
        reporter.stop()
    full = [span for span in gc_spans(exporter) if span.start_time >= before_ns - 1_000_000]
    assert full, "gc.collect() produced no gc.pause span"
    span = full[-1]
    assert span.attributes["gc.generation"] == 2
    assert span.attributes["gc.collected"] >= 500
    assert span.attributes["gc.uncollectable"] == 0
    assert before_ns - 1_000_000 <= span.start_time < span.end_time <= after_ns + 1_000_000
    assert span.parent is None, "each pause is a trace of its own"
    assert reporter.callback_errors == 0 and reporter.dropped_pauses == 0
    assert reporter.emitted_pauses == len(gc_spans(exporter))


def test_pauses_are_emitted_periodically_while_running(provider_and_exporter) -> None:
    provider, exporter = provider_and_exporter
    reporter = kit.GcPauseReporter(provider, flush_interval_s=0.05)
    reporter.start()
    try:
        gc.collect()
        deadline = time.monotonic() + 5
        while not gc_spans(exporter) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc_spans(exporter), "the emitting thread did not flush"
    finally:
        reporter.stop()


def test_short_pauses_are_filtered_and_stop_removes_the_hook(provider_and_exporter) -> None:
    provider, exporter = provider_and_exporter
    reporter = kit.GcPauseReporter(provider, min_pause_ms=60_000)
    reporter.start()
    gc.collect()
    reporter.stop()
    assert gc_spans(exporter) == []
    callbacks_before = list(gc.callbacks)
    reporter.stop()
    assert gc.callbacks == callbacks_before


def test_the_gc_callback_never_raises_even_on_unexpected_input(provider_and_exporter) -> None:
    provider, _ = provider_and_exporter
    reporter = kit.GcPauseReporter(provider)
    reporter.start()
    try:
        (callback,) = [cb for cb in gc.callbacks if getattr(cb, "__self__", None) is reporter]
        callback("start", None)
        callback("stop", None)
        assert reporter.callback_errors == 1
    finally:
        reporter.stop()
    assert callback not in gc.callbacks


def test_starting_twice_or_with_invalid_settings_raises(provider_and_exporter) -> None:
    provider, _ = provider_and_exporter
    with pytest.raises(ValueError):
        kit.GcPauseReporter(provider, min_pause_ms=-1)
    reporter = kit.GcPauseReporter(provider)
    reporter.start()
    try:
        with pytest.raises(RuntimeError):
            reporter.start()
    finally:
        reporter.stop()
