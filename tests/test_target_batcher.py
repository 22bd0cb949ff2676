"""The dynamic batcher's rules, and the batcher itself on a real event loop and thread pool."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tailscope.targets.reference.batcher import (
    Batch,
    BatcherStoppedError,
    BatchPolicy,
    DynamicBatcher,
    QueueFullError,
)

MS = 1_000_000


def policy(max_batch_size: int = 4, delay_ms: float = 5, queue: int = 16, preferred: tuple[int, ...] = ()) -> BatchPolicy:
    return BatchPolicy(max_batch_size, int(delay_ms * MS), queue, preferred)


def test_a_batch_is_ready_when_full_or_when_the_oldest_waited_the_delay() -> None:
    rules = policy(max_batch_size=4, delay_ms=5)
    assert not rules.is_ready(0, 10 * MS)
    assert not rules.is_ready(3, 4 * MS)
    assert rules.is_ready(3, 5 * MS)
    assert rules.is_ready(4, 0)


def test_the_largest_preferred_size_makes_a_batch_ready_at_once() -> None:
    rules = policy(max_batch_size=8, preferred=(2, 4))
    assert not rules.is_ready(3, 0)
    assert rules.is_ready(4, 0)


def test_batch_size_is_the_largest_preferred_size_that_fits_else_everything_up_to_the_max() -> None:
    assert policy(max_batch_size=8, preferred=(2, 4)).batch_size(7) == 4
    assert policy(max_batch_size=8, preferred=(2, 4)).batch_size(3) == 2
    assert policy(max_batch_size=8, preferred=(2, 4)).batch_size(1) == 1
    assert policy(max_batch_size=8).batch_size(11) == 8
    assert policy(max_batch_size=8).batch_size(5) == 5


@pytest.mark.parametrize(
    "kwargs",
    [dict(max_batch_size=0), dict(queue=0), dict(delay_ms=-1), dict(max_batch_size=4, preferred=(5,))],
)
def test_invalid_policies_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        policy(**kwargs)


class RecordingModel:
    """run_batch that records each batch; optionally blocks until released (a busy model)."""

    def __init__(self, blocked: bool = False) -> None:
        self.batches: list[Batch[int]] = []
        self.started_ns: list[int] = []
        self.release = threading.Event()
        if not blocked:
            self.release.set()

    def __call__(self, batch: Batch[int]) -> list[int]:
        self.started_ns.append(time.time_ns())
        self.batches.append(batch)
        self.release.wait(5)
        return [request.payload * 10 for request in batch.requests]


def run_with_batcher(rules: BatchPolicy, model, scenario, workers: int = 1):
    async def main():
        with ThreadPoolExecutor(max_workers=workers) as executor:
            batcher = DynamicBatcher(model, rules, executor, workers)
            await batcher.start()
            try:
                return await scenario(batcher)
            finally:
                model.release.set()
                await batcher.stop()

    return asyncio.run(main())


def test_concurrent_requests_are_batched_up_to_the_max_and_get_their_own_results() -> None:
    model = RecordingModel()

    async def scenario(batcher):
        return await asyncio.gather(*(batcher.submit(i) for i in range(10)))

    results = run_with_batcher(policy(max_batch_size=4, delay_ms=30), model, scenario)
    assert results == [i * 10 for i in range(10)]
    assert [len(batch.requests) for batch in model.batches] == [4, 4, 2]
    last = model.batches[-1]
    waited_ms = (last.picked_ns - last.requests[0].enqueued_ns) / MS
    assert 29 <= waited_ms <= 60, "the partial batch waited for the queue delay"
    assert [request.queue_depth for request in model.batches[0].requests] == [1, 2, 3, 4]


def test_a_full_queue_rejects_immediately_while_the_model_is_busy() -> None:
    model = RecordingModel(blocked=True)

    async def scenario(batcher):
        executing = asyncio.ensure_future(batcher.submit(1))
        while not model.batches:
            await asyncio.sleep(0.001)
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError):
            await batcher.submit(4)
        model.release.set()
        return await asyncio.gather(executing, *waiting)

    results = run_with_batcher(policy(max_batch_size=1, delay_ms=0, queue=2), model, scenario)
    assert results == [10, 20, 30]


class BrokenModel(RecordingModel):
    def __call__(self, batch: Batch[int]) -> list[int]:
        raise ArithmeticError("model blew up")


def test_a_failing_batch_fails_each_of_its_requests() -> None:
    async def scenario(batcher):
        return await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)

    results = run_with_batcher(policy(max_batch_size=4, delay_ms=5), BrokenModel(), scenario)
    assert all(isinstance(result, ArithmeticError) for result in results)


def test_stopping_fails_the_requests_still_waiting() -> None:
    model = RecordingModel(blocked=True)

    async def main():
        with ThreadPoolExecutor(max_workers=1) as executor:
            batcher = DynamicBatcher(model, policy(max_batch_size=1, delay_ms=0), executor, 1)
            await batcher.start()
            executing = asyncio.ensure_future(batcher.submit(1))
            while not model.batches:
                await asyncio.sleep(0.001)
            waiting = asyncio.ensure_future(batcher.submit(2))
            await asyncio.sleep(0.01)
            stopping = asyncio.ensure_future(batcher.stop())
            await asyncio.sleep(0.01)
            model.release.set()
            await stopping
            return await asyncio.gather(executing, waiting, return_exceptions=True)

    executed, waited = asyncio.run(main())
    assert executed == 10
    assert isinstance(waited, BatcherStoppedError)


def test_several_workers_execute_batches_at_the_same_time() -> None:
    model = RecordingModel(blocked=True)

    async def scenario(batcher):
        requests = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]
        deadline = time.monotonic() + 5
        while len(model.batches) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        concurrently_running = len(model.batches)
        model.release.set()
        await asyncio.gather(*requests)
        return concurrently_running

    assert run_with_batcher(policy(max_batch_size=1, delay_ms=0), model, scenario, workers=2) == 2
