"""Prometheus metrics of the reference target (``--metrics``: ``GET /metrics``).

Every metric lives in the :class:`TargetMetrics` instance's own
``CollectorRegistry`` (never the process-global one). Names:

| metric | type | labels | meaning |
| --- | --- | --- | --- |
| ``tailscope_target_requests_total`` | counter | ``route``, ``status`` | answered requests |
| ``tailscope_target_queue_depth`` | gauge | ``model`` | requests waiting for a batch (text, image) or a decode slot (generate) |
| ``tailscope_target_batch_size`` | histogram | ``model`` | requests per executed batch / streams per decode step |
| ``tailscope_target_stage_seconds`` | histogram | ``stage``, ``model`` | preprocess, queue_wait, inference, postprocess, first_token durations (s) |
| ``tailscope_target_decode_streams`` | gauge | — | generation streams being decoded |
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class TargetMetrics:
    """The target's metrics and their text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "tailscope_target_requests", "answered requests", ("route", "status"), registry=self.registry
        )
        self._queue_depth = Gauge(
            "tailscope_target_queue_depth", "requests waiting for a batch or decode slot", ("model",),
            registry=self.registry,
        )
        self._batch_size = Histogram(
            "tailscope_target_batch_size", "requests per executed batch (streams per decode step)", ("model",),
            buckets=BATCH_SIZE_BUCKETS, registry=self.registry,
        )
        self._stage_seconds = Histogram(
            "tailscope_target_stage_seconds", "stage durations in seconds", ("stage", "model"),
            buckets=STAGE_BUCKETS, registry=self.registry,
        )
        self._decode_streams = Gauge(
            "tailscope_target_decode_streams", "generation streams being decoded", registry=self.registry
        )

    def count_request(self, route: str, status: int) -> None:
        self._requests.labels(route=route, status=str(status)).inc()

    def watch_queue_depth(self, model: str, depth: Callable[[], int]) -> None:
        """Report ``depth()`` as the queue depth of ``model`` at every scrape."""
        self._queue_depth.labels(model=model).set_function(depth)

    def watch_decode_streams(self, streams: Callable[[], int]) -> None:
        self._decode_streams.set_function(streams)

    def observe_batch(self, model: str, size: int) -> None:
        self._batch_size.labels(model=model).observe(size)

    def observe_stage(self, stage: str, model: str, seconds: float) -> None:
        self._stage_seconds.labels(stage=stage, model=model).observe(max(0.0, seconds))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
