"""``python -m tailscope.faults.burst``: an open-loop burst of requests with retries (the overload fault).

Poisson arrivals at ``--rate`` requests/s for ``--duration`` seconds, each a
``POST`` of a JSON text of ``--text-chars`` characters over its own loopback
connection, answered or not: arrivals do not wait for replies, so a target
slower than the rate builds a queue until its bound answers 429. A 429 is
retried up to ``--retries`` times after ``--backoff-ms`` × 2^attempt, as
clients with retry policies do (retries add to the offered load). At most
``--max-in-flight`` requests are open; arrivals beyond it are counted as
``skipped``. On SIGTERM or at the end the counts are written as JSON to
``--report``. Loopback targets only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import string
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

LOOPBACK = ("127.0.0.1", "localhost", "::1")
REQUEST_TIMEOUT_S = 30.0


@dataclass
class BurstCounts:
    """What the burst did; latencies in ms of requests that got any reply."""

    arrivals: int = 0
    attempts: int = 0
    ok: int = 0
    rejected_429: int = 0  # requests whose last attempt was a 429
    replies_429: int = 0  # every 429 reply, retried or not
    retries: int = 0
    other_status: int = 0
    errors: int = 0
    skipped: int = 0
    latencies_ms: list = field(default_factory=list)

    def report(self) -> dict:
        data = asdict(self)
        latencies = sorted(data.pop("latencies_ms"))
        data["p50_ms"] = latencies[len(latencies) // 2] if latencies else None
        data["p99_ms"] = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None
        return data


def make_body(rng: random.Random, chars: int) -> bytes:
    words = []
    size = 0
    while size < chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10)))
        words.append(word)
        size += len(word) + 1
    return json.dumps({"text": " ".join(words)[:chars]}).encode()


async def send_once(host: str, port: int, path: str, body: bytes) -> int:
    """One POST over a new connection; the reply's status code."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
        return int(status_line.split()[1])
    finally:
        writer.close()


class Burst:
    def __init__(self, args: argparse.Namespace) -> None:
        parsed = urlparse(args.url)
        if parsed.hostname not in LOOPBACK and not (parsed.hostname or "").startswith("127."):
            raise SystemExit(f"burst: refusing a non-loopback target {args.url}")
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.args = args
        self.counts = BurstCounts()
        self.rng = random.Random(args.seed)
        self.in_flight: set[asyncio.Task] = set()

    async def request(self, body: bytes) -> None:
        started = time.monotonic()
        for attempt in range(self.args.retries + 1):
            self.counts.attempts += 1
            try:
                status = await asyncio.wait_for(send_once(self.host, self.port, self.args.path, body),
                                                REQUEST_TIMEOUT_S)
            except (TimeoutError, OSError, ValueError, IndexError):
                self.counts.errors += 1
                return
            if status == 429:
                self.counts.replies_429 += 1
                if attempt < self.args.retries:
                    self.counts.retries += 1
                    await asyncio.sleep(self.args.backoff_ms / 1000.0 * (2 ** attempt))
                    continue
                self.counts.rejected_429 += 1
            elif status == 200:
                self.counts.ok += 1
            else:
                self.counts.other_status += 1
            self.counts.latencies_ms.append((time.monotonic() - started) * 1000.0)
            return

    async def run(self, stop: asyncio.Event) -> None:
        start = time.monotonic()
        next_at = 0.0
        while next_at < self.args.duration and not stop.is_set():
            delay = start + next_at - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            self.counts.arrivals += 1
            if len(self.in_flight) >= self.args.max_in_flight:
                self.counts.skipped += 1
            else:
                task = asyncio.get_running_loop().create_task(
                    self.request(make_body(self.rng, self.args.text_chars)))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)
            next_at += self.rng.expovariate(self.args.rate)
        if self.in_flight and not stop.is_set():
            await asyncio.wait(set(self.in_flight), timeout=REQUEST_TIMEOUT_S)
        for task in list(self.in_flight):
            task.cancel()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.burst", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="target base URL (loopback)")
    parser.add_argument("--path", default="/v1/infer/text")
    parser.add_argument("--rate", type=float, required=True, help="arrivals per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--text-chars", type=int, default=2000)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--backoff-ms", type=float, default=50.0)
    parser.add_argument("--max-in-flight", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", required=True, help="JSON file for the counts")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> BurstCounts:
    burst = Burst(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await burst.run(stop)
    return burst.counts


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    counts = asyncio.run(_main(args))
    with open(args.report, "w", encoding="utf-8") as fh:
        json.dump(counts.report(), fh)


if __name__ == "__main__":
    main()
