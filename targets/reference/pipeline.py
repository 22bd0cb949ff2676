"""Running one batch through the model in a worker thread, with its stage spans.

For every request of a batch this emits, via the instrumentation kit:
``queue_wait`` (enqueue → picked, with ``queue.depth``/``queue.capacity``),
``batch_wait`` (picked → the worker starts the batch) and ``inference``
(the model call, attributes ``batch.size``/``batch.id``/``model.name``), all
children of the request's SERVER span; plus one ``batch`` span in its own trace.
The ``batch`` span links every request's ``inference`` span and each
``inference`` span links the ``batch`` span, so either side finds the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from tailscope.targets.reference.batcher import Batch
from tailscope.targets.reference.metrics import TargetMetrics
from tailscope.tracing import kit


@dataclass(frozen=True)
class ModelOutput:
    """One request's share of a batch: its logits row and the batch it ran in."""

    logits: np.ndarray
    batch_size: int
    batch_id: int


class TracedBatchRunner:
    """``run_batch`` for :class:`~tailscope.targets.reference.batcher.DynamicBatcher`: model call plus stage spans.

    ``model_fn`` maps a list of payloads to a ``(batch, classes)`` logits array.
    ``extra_delay_s`` is slept after the model ran (GIL released), to mimic an
    accelerator or a slower machine. ``metrics``, when given, observes the
    batch size and the queue_wait and inference durations.
    """

    def __init__(
        self,
        model_name: str,
        model_fn: Callable[[list[Any]], np.ndarray],
        tracer: trace.Tracer,
        queue_capacity: int,
        extra_delay_s: float = 0.0,
        metrics: TargetMetrics | None = None,
    ) -> None:
        self._model_name = model_name
        self._model_fn = model_fn
        self._tracer = tracer
        self._queue_capacity = queue_capacity
        self._extra_delay_s = extra_delay_s
        self._metrics = metrics

    def __call__(self, batch: Batch[Any]) -> list[ModelOutput]:
        started_ns = time.time_ns()
        self._record_waits(batch, started_ns)
        size = len(batch.requests)
        attributes = {"batch.size": size, "batch.id": batch.batch_id, "model.name": self._model_name}
        inference_spans = self._start_inference_spans(batch, started_ns, attributes)
        try:
            with kit.batch_span(
                self._tracer, inference_spans, size, start_ns=started_ns, **{"batch.id": batch.batch_id}
            ) as batch_span:
                batch_context = batch_span.get_span_context()
                for span in inference_spans:
                    span.add_link(batch_context)
                logits = self._model_fn([request.payload for request in batch.requests])
                if self._extra_delay_s > 0:
                    time.sleep(self._extra_delay_s)
        finally:
            ended_ns = time.time_ns()
            for span in inference_spans:
                span.end(end_time=ended_ns)
            self._observe(batch, started_ns, ended_ns)
        return [ModelOutput(logits=row, batch_size=size, batch_id=batch.batch_id) for row in logits]

    def _observe(self, batch: Batch[Any], started_ns: int, ended_ns: int) -> None:
        if self._metrics is None:
            return
        self._metrics.observe_batch(self._model_name, len(batch.requests))
        self._metrics.observe_stage("inference", self._model_name, (ended_ns - started_ns) / 1e9)
        for request in batch.requests:
            self._metrics.observe_stage("queue_wait", self._model_name, (batch.picked_ns - request.enqueued_ns) / 1e9)

    def _record_waits(self, batch: Batch[Any], started_ns: int) -> None:
        for request in batch.requests:
            kit.record_stage(
                self._tracer,
                kit.QUEUE_WAIT,
                request.enqueued_ns,
                max(request.enqueued_ns, batch.picked_ns),
                request.trace_context,
                kit.queue_attributes(request.queue_depth, self._queue_capacity),
            )
            kit.record_stage(
                self._tracer,
                kit.BATCH_WAIT,
                batch.picked_ns,
                max(batch.picked_ns, started_ns),
                request.trace_context,
                {"batch.id": batch.batch_id},
            )

    def _start_inference_spans(
        self, batch: Batch[Any], started_ns: int, attributes: dict[str, Any]
    ) -> Sequence[Span]:
        return [
            self._tracer.start_span(
                kit.INFERENCE,
                context=request.trace_context,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=started_ns,
            )
            for request in batch.requests
        ]
