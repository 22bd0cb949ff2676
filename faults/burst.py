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
import string
import time
from dataclasses import asdict, dataclass, field

from tailscope.faults.loopback_traffic import LoopbackTraffic, percentile_of, post_once, run_traffic_child

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
        data["p50_ms"] = percentile_of(latencies, 0.5)
        data["p99_ms"] = percentile_of(latencies, 0.99)
        return data


def make_body(rng: random.Random, chars: int) -> bytes:
    words = []
    size = 0
    while size < chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10)))
        words.append(word)
        size += len(word) + 1
    return json.dumps({"text": " ".join(words)[:chars]}).encode()


class Burst(LoopbackTraffic):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args.url, args.seed, "burst")
        self.args = args
        self.counts = BurstCounts()

    async def request(self, body: bytes) -> None:
        started = time.monotonic()
        for attempt in range(self.args.retries + 1):
            self.counts.attempts += 1
            try:
                status, _ = await asyncio.wait_for(post_once(self.host, self.port, self.args.path, body),
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

    def _arrival(self):
        self.counts.arrivals += 1
        return self.request(make_body(self.rng, self.args.text_chars))

    def _skip(self) -> None:
        self.counts.arrivals += 1
        self.counts.skipped += 1

    async def run(self, stop: asyncio.Event) -> None:
        await self.poisson_arrivals(self.args.rate, self.args.duration, self.args.max_in_flight, stop,
                                    self._arrival, self._skip)
        if self.in_flight and not stop.is_set():  # at the natural end the open requests may finish
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


async def run_burst(args: argparse.Namespace, stop: asyncio.Event) -> BurstCounts:
    burst = Burst(args)
    await burst.run(stop)
    return burst.counts


def main(argv: list[str] | None = None) -> None:
    run_traffic_child(parse_args(argv), run_burst)


if __name__ == "__main__":
    main()
