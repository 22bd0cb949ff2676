"""The shared machinery of the traffic children (:mod:`.burst`, :mod:`.llm_traffic`).

A traffic child is a separate process that sends requests to a loopback
server for a window, each over its own connection, and writes what it did as
JSON when it ends (SIGTERM, SIGINT or the end of its ``--duration``). This
module holds what they share: the loopback guard, one POST, Poisson
arrivals with a bound on open requests, and the process's main loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol
from urllib.parse import urlparse

from tailscope.support.loopback import is_loopback_url


class Counts(Protocol):
    def report(self) -> dict: ...


def percentile_of(sorted_values: list[float], q: float) -> float | None:
    """The order statistic at ``q`` (0..1) of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


async def post_once(host: str, port: int, path: str, body: bytes) -> tuple[int, bytes]:
    """One ``POST path`` of a JSON ``body`` over a new connection: (status code, reply body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        status_line = await reader.readline()
        rest = await reader.read()
        _, _, payload = rest.partition(b"\r\n\r\n")
        return int(status_line.split()[1]), payload
    finally:
        writer.close()


class LoopbackTraffic:
    """Base of a traffic child: the loopback address, a seeded RNG and the set of open requests."""

    def __init__(self, url: str, seed: int, prog: str) -> None:
        if not is_loopback_url(url):
            raise SystemExit(f"{prog}: refusing a non-loopback server {url}")
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.rng = random.Random(seed)
        self.in_flight: set[asyncio.Task] = set()

    def launch(self, request: Coroutine[Any, Any, None]) -> asyncio.Task:
        """Run ``request`` as an open request (tracked in :attr:`in_flight` until it ends)."""
        task = asyncio.get_running_loop().create_task(request)
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    async def poisson_arrivals(self, rate: float, duration_s: float, max_in_flight: int, stop: asyncio.Event,
                               new_request: Callable[[], Coroutine[Any, Any, None]],
                               on_skip: Callable[[], None]) -> None:
        """Poisson arrivals at ``rate``/s for ``duration_s`` (or until ``stop``), open loop: an arrival
        launches ``new_request()`` without waiting for the others; with ``max_in_flight`` open it calls
        ``on_skip()`` instead."""
        start = time.monotonic()
        next_at = 0.0
        while next_at < duration_s and not stop.is_set():
            delay = start + next_at - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            if len(self.in_flight) >= max_in_flight:
                on_skip()
            else:
                self.launch(new_request())
            next_at += self.rng.expovariate(rate)

    async def cancel_open(self, wait_s: float = 5.0) -> None:
        """Cancel the open requests (closing a connection aborts its request on the server)."""
        for task in list(self.in_flight):
            task.cancel()
        if self.in_flight:
            await asyncio.wait(set(self.in_flight), timeout=wait_s)


def run_traffic_child(args: argparse.Namespace, run: Callable[[argparse.Namespace, asyncio.Event], Coroutine[Any, Any, Counts]]) -> None:
    """The child's main: ``run(args, stop)`` with SIGTERM/SIGINT setting ``stop``, then its counts'
    ``report()`` as JSON in ``args.report``."""

    async def main() -> Counts:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await run(args, stop)

    counts = asyncio.run(main())
    with open(args.report, "w", encoding="utf-8") as fh:
        json.dump(counts.report(), fh)
