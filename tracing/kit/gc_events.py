"""GC pauses of a Python process as ``gc.pause`` spans.

:class:`GcPauseReporter` installs a ``gc.callbacks`` hook. The hook only reads
``time.perf_counter_ns()`` and appends one tuple to a bounded deque: no locks,
no I/O, no span work inside the collector, and it never raises (a failure is
counted in :attr:`GcPauseReporter.callback_errors`). A daemon thread drains the
deque every ``flush_interval_s`` and emits, per pause, a span named
``gc.pause`` in a trace of its own whose start/end are the pause (epoch ns,
mapped from perf_counter_ns), with attributes ``gc.generation``,
``gc.collected``, ``gc.uncollectable``.

Emitting from a separate thread matters: a collection can start while the
thread that triggered it holds a span processor's lock, and emitting from the
callback itself could then deadlock.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

GC_PAUSE_SPAN = "gc.pause"
_INSTRUMENTATION_NAME = "tailscope.tracing.kit"


def perf_to_epoch_offset_ns(samples: int = 5) -> int:
    """``time.time_ns() - time.perf_counter_ns()``, from the tightest of ``samples`` bracketed reads (ns)."""
    best_width = None
    best_offset = 0
    for _ in range(samples):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best_width is None or after - before < best_width:
            best_width = after - before
            best_offset = wall - (before + after) // 2
    return best_offset


class GcPauseReporter:
    """Report each garbage collection of at least ``min_pause_ms`` as a ``gc.pause`` span.

    ``start()`` installs the hook and the emitting thread; ``stop()`` removes
    the hook and emits what is pending. At most ``max_pending`` pauses wait
    between flushes; beyond that the oldest are dropped and counted in
    :attr:`dropped_pauses`.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider,
        min_pause_ms: float = 0.0,
        *,
        flush_interval_s: float = 0.2,
        max_pending: int = 10_000,
    ) -> None:
        if min_pause_ms < 0:
            raise ValueError(f"min_pause_ms must be >= 0, got {min_pause_ms}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self._tracer = tracer_provider.get_tracer(_INSTRUMENTATION_NAME)
        self._min_pause_ns = int(min_pause_ms * 1_000_000)
        self._flush_interval_s = flush_interval_s
        self._max_pending = max_pending
        self._pending: deque[tuple[int, int, int, int, int]] = deque(maxlen=max_pending)
        self._collection_start_ns = 0
        self._recorded = 0
        self._emitted = 0
        self._callback_errors = 0
        self._flush_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def emitted_pauses(self) -> int:
        """Number of ``gc.pause`` spans emitted so far."""
        return self._emitted

    @property
    def dropped_pauses(self) -> int:
        """Pauses recorded but lost because more than ``max_pending`` waited for a flush."""
        return max(0, self._recorded - self._emitted - len(self._pending))

    @property
    def callback_errors(self) -> int:
        """Times the gc callback failed internally (it swallows its own errors)."""
        return self._callback_errors

    def start(self) -> None:
        """Install the gc hook and start the emitting thread. Raises RuntimeError if already started."""
        if self._thread is not None:
            raise RuntimeError("GcPauseReporter already started")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._emit_periodically, name="gc-pause-reporter", daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        """Remove the gc hook, stop the thread and emit every pending pause. Idempotent."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            thread.join()
        self.flush()

    def flush(self) -> int:
        """Emit the pending pauses now; return how many spans were emitted."""
        with self._flush_lock:
            offset_ns = perf_to_epoch_offset_ns()
            count = 0
            while self._pending:
                start_perf, end_perf, generation, collected, uncollectable = self._pending.popleft()
                self._emit(start_perf + offset_ns, end_perf + offset_ns, generation, collected, uncollectable)
                self._emitted += 1
                count += 1
            return count

    def _emit(self, start_ns: int, end_ns: int, generation: int, collected: int, uncollectable: int) -> None:
        span = self._tracer.start_span(
            GC_PAUSE_SPAN,
            context=otel_context.Context(),
            kind=SpanKind.INTERNAL,
            attributes={"gc.generation": generation, "gc.collected": collected, "gc.uncollectable": uncollectable},
            start_time=start_ns,
        )
        span.end(end_time=end_ns)

    def _emit_periodically(self) -> None:
        while not self._stopping.wait(self._flush_interval_s):
            self.flush()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        try:
            now = time.perf_counter_ns()
            if phase == "start":
                self._collection_start_ns = now
            elif phase == "stop" and self._collection_start_ns:
                start = self._collection_start_ns
                self._collection_start_ns = 0
                if now - start >= self._min_pause_ns:
                    self._recorded += 1
                    self._pending.append(
                        (start, now, info.get("generation", -1), info.get("collected", 0), info.get("uncollectable", 0))
                    )
        except Exception:  # noqa: BLE001 - a gc callback must never raise into the collector
            self._callback_errors += 1
