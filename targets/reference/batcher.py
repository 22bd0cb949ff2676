"""Dynamic batcher: a bounded queue in the event loop, batches executed in a thread pool.

Rules (:class:`BatchPolicy`), as in Triton-style dynamic batching:

* a request arriving while ``max_queue_size`` requests wait is rejected at once
  (:class:`QueueFullError`, answered with HTTP 429);
* a batch is formed as soon as a worker is free and either ``max_batch_size``
  requests wait, or the largest preferred batch size is reached, or the oldest
  waiting request has waited ``max_queue_delay``;
* its size is the largest preferred size that the waiting requests fill, or,
  when none fits, every waiting request up to ``max_batch_size``.

At most ``max_concurrent_batches`` batches execute at once; while all workers
are busy, requests keep queueing (their ``queue_wait`` grows), so with an idle
model no request waits longer than ``max_queue_delay`` plus event-loop latency.

Each request keeps its trace context; the function running a batch receives
the :class:`Batch` with every request's enqueue and pick times (epoch ns) and
queue depth, so it can emit ``queue_wait``/``batch_wait``/``inference`` spans.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

PayloadT = TypeVar("PayloadT")
ResultT = TypeVar("ResultT")


class QueueFullError(Exception):
    """The batcher's queue holds ``max_queue_size`` requests; the request was not enqueued."""


class BatcherStoppedError(Exception):
    """The batcher stopped before the request was executed."""


@dataclass(frozen=True)
class BatchPolicy:
    """When to cut a batch and how large; sizes in requests, delay in ns."""

    max_batch_size: int
    max_queue_delay_ns: int
    max_queue_size: int
    preferred_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_queue_size < 1 or self.max_queue_delay_ns < 0:
            raise ValueError(f"invalid batch policy: {self}")
        if any(not 1 <= size <= self.max_batch_size for size in self.preferred_batch_sizes):
            raise ValueError(f"preferred batch sizes must be within 1..{self.max_batch_size}: {self}")

    def is_ready(self, waiting: int, oldest_wait_ns: int) -> bool:
        """Whether ``waiting`` requests, the oldest of which waited ``oldest_wait_ns``, make a batch now."""
        if waiting == 0:
            return False
        if waiting >= self.max_batch_size:
            return True
        if self.preferred_batch_sizes and waiting >= max(self.preferred_batch_sizes):
            return True
        return oldest_wait_ns >= self.max_queue_delay_ns

    def batch_size(self, waiting: int) -> int:
        """How many of ``waiting`` requests go into the batch being cut."""
        available = min(waiting, self.max_batch_size)
        fitting = [size for size in self.preferred_batch_sizes if size <= available]
        return max(fitting) if fitting else available


@dataclass
class PendingRequest(Generic[PayloadT]):
    """A request inside the batcher. Times are epoch ns; ``queue_depth`` counts itself."""

    payload: PayloadT
    trace_context: Any
    enqueued_ns: int
    enqueued_monotonic_ns: int
    queue_depth: int
    future: asyncio.Future = field(repr=False)


@dataclass(frozen=True)
class Batch(Generic[PayloadT]):
    """Requests picked together; ``picked_ns`` (epoch ns) ends their queue wait."""

    batch_id: int
    requests: Sequence[PendingRequest[PayloadT]]
    picked_ns: int


class DynamicBatcher(Generic[PayloadT, ResultT]):
    """Collect requests into batches and run ``run_batch`` on them in ``executor``.

    ``run_batch(batch)`` runs in a worker thread and returns one result per
    request, in order; an exception fails every request of the batch.
    ``start()`` and ``stop()`` must be awaited in the event loop that calls
    ``submit()``.
    """

    def __init__(
        self,
        run_batch: Callable[[Batch[PayloadT]], Sequence[ResultT]],
        policy: BatchPolicy,
        executor: Executor,
        max_concurrent_batches: int,
    ) -> None:
        if max_concurrent_batches < 1:
            raise ValueError(f"max_concurrent_batches must be >= 1, got {max_concurrent_batches}")
        self._run_batch = run_batch
        self._policy = policy
        self._executor = executor
        self._max_concurrent_batches = max_concurrent_batches
        self._waiting: deque[PendingRequest[PayloadT]] = deque()
        self._batch_ids = itertools.count(1)
        self._arrival: asyncio.Event | None = None
        self._free_workers: asyncio.Semaphore | None = None
        self._scheduler: asyncio.Task | None = None
        self._executing: set[asyncio.Task] = set()

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    @property
    def depth(self) -> int:
        """Requests waiting for a batch now."""
        return len(self._waiting)

    async def start(self) -> None:
        """Start forming batches. Raises RuntimeError if already started."""
        if self._scheduler is not None:
            raise RuntimeError("batcher already started")
        self._arrival = asyncio.Event()
        self._free_workers = asyncio.Semaphore(self._max_concurrent_batches)
        self._scheduler = asyncio.get_running_loop().create_task(self._form_batches(), name="batcher")

    async def stop(self) -> None:
        """Stop forming batches, let executing batches finish, fail waiting requests with BatcherStoppedError."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.cancel()
            await asyncio.gather(scheduler, return_exceptions=True)
        if self._executing:
            await asyncio.gather(*self._executing, return_exceptions=True)
        while self._waiting:
            request = self._waiting.popleft()
            if not request.future.done():
                request.future.set_exception(BatcherStoppedError("the batcher stopped"))

    async def submit(self, payload: PayloadT, trace_context: Any = None) -> ResultT:
        """Enqueue ``payload`` and wait for its result; raise QueueFullError at once if the queue is full."""
        if self._scheduler is None or self._arrival is None:
            raise BatcherStoppedError("the batcher is not running")
        if len(self._waiting) >= self._policy.max_queue_size:
            raise QueueFullError(f"{len(self._waiting)} requests already wait (max_queue_size)")
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(
            PendingRequest(
                payload=payload,
                trace_context=trace_context,
                enqueued_ns=time.time_ns(),
                enqueued_monotonic_ns=time.monotonic_ns(),
                queue_depth=len(self._waiting) + 1,
                future=future,
            )
        )
        self._arrival.set()
        return await future

    async def _form_batches(self) -> None:
        assert self._free_workers is not None
        while True:
            await self._free_workers.acquire()
            try:
                batch = await self._next_batch()
            except BaseException:
                self._free_workers.release()
                raise
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            self._executing.add(task)
            task.add_done_callback(self._executing.discard)

    async def _next_batch(self) -> Batch[PayloadT]:
        assert self._arrival is not None
        while True:
            self._drop_cancelled()
            timeout_s: float | None = None
            if self._waiting:
                oldest_wait_ns = time.monotonic_ns() - self._waiting[0].enqueued_monotonic_ns
                if self._policy.is_ready(len(self._waiting), oldest_wait_ns):
                    return self._cut_batch()
                timeout_s = (self._policy.max_queue_delay_ns - oldest_wait_ns) / 1e9
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), timeout_s)
            except TimeoutError:
                pass

    def _drop_cancelled(self) -> None:
        """Forget requests whose caller went away (e.g. the client disconnected)."""
        if any(request.future.done() for request in self._waiting):
            self._waiting = deque(request for request in self._waiting if not request.future.done())

    def _cut_batch(self) -> Batch[PayloadT]:
        size = self._policy.batch_size(len(self._waiting))
        requests = [self._waiting.popleft() for _ in range(size)]
        return Batch(batch_id=next(self._batch_ids), requests=requests, picked_ns=time.time_ns())

    async def _execute(self, batch: Batch[PayloadT]) -> None:
        assert self._free_workers is not None
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, batch)
            if len(results) != len(batch.requests):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch.requests)} requests")
        except Exception as exc:  # noqa: BLE001 - the failure is delivered to every waiting caller
            for request in batch.requests:
                if not request.future.done():
                    request.future.set_exception(exc)
        else:
            for request, result in zip(batch.requests, results):
                if not request.future.done():
                    request.future.set_result(result)
        finally:
            self._free_workers.release()
