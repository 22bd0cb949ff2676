"""``python -m tailscope.faults.llm_traffic``: OpenAI chat requests from another client (the LLM faults).

Sends ``POST /v1/chat/completions`` (not streamed, ``ignore_eos``) to a
loopback LLM server for ``--duration`` seconds, each over its own connection
and **without** a ``traceparent``: the server's spans of these requests join
none of the harness's traces, so the analysis counts them as other traffic.
Every prompt is ``--prompt-tokens`` words (the reference server's tokens)
and asks for ``--max-tokens`` tokens. Two shapes:

* ``--streams N``: N requests open at all times (a finished one is replaced
  at once): long generations that hold their KV blocks while they grow;
* ``--rate R``: Poisson arrivals at R requests/s, open loop (arrivals do not
  wait for replies), at most ``--max-in-flight`` open (beyond it: ``skipped``).

On SIGTERM/SIGINT or at the end the open requests are cancelled (the
connection closes, the server aborts the request and frees its blocks) and
the counts are written as JSON to ``--report``. Loopback servers only.
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

PATH = "/v1/chat/completions"
REQUEST_TIMEOUT_S = 120.0


@dataclass
class TrafficCounts:
    """What the traffic did; token counts from the replies' ``usage``; latencies (ms) of answered requests."""

    sent: int = 0
    ok: int = 0
    rejected_429: int = 0
    other_status: int = 0
    errors: int = 0
    skipped: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies_ms: list = field(default_factory=list)

    def report(self) -> dict:
        data = asdict(self)
        latencies = sorted(data.pop("latencies_ms"))
        data["p50_ms"] = percentile_of(latencies, 0.5)
        data["max_ms"] = latencies[-1] if latencies else None
        return data


def chat_body(rng: random.Random, prompt_tokens: int, max_tokens: int, model: str | None) -> bytes:
    """A chat request of ``prompt_tokens`` random words asking for ``max_tokens`` tokens, ignoring EOS."""
    words = " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(prompt_tokens))
    document = {"messages": [{"role": "user", "content": words}], "max_tokens": max_tokens, "ignore_eos": True,
                "stream": False}
    if model:
        document["model"] = model
    return json.dumps(document).encode()


def _json_object(payload: bytes) -> dict:
    try:
        reply = json.loads(payload) if payload else {}
    except ValueError:
        return {}
    return reply if isinstance(reply, dict) else {}


class Traffic(LoopbackTraffic):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args.url, args.seed, "llm_traffic")
        self.args = args
        self.counts = TrafficCounts()

    def _body(self) -> bytes:
        return chat_body(self.rng, self.args.prompt_tokens, self.args.max_tokens, self.args.model)

    async def request(self) -> None:
        started = time.monotonic()
        self.counts.sent += 1
        try:
            status, payload = await asyncio.wait_for(post_once(self.host, self.port, PATH, self._body()),
                                                     REQUEST_TIMEOUT_S)
        except asyncio.CancelledError:
            self.counts.cancelled += 1
            raise
        except (TimeoutError, OSError, ValueError, IndexError):
            self.counts.errors += 1
            return
        if status == 200:
            self.counts.ok += 1
            usage = _json_object(payload).get("usage") or {}
            self.counts.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.counts.completion_tokens += int(usage.get("completion_tokens") or 0)
        elif status == 429:
            self.counts.rejected_429 += 1
        else:
            self.counts.other_status += 1
        self.counts.latencies_ms.append((time.monotonic() - started) * 1000.0)

    async def run_streams(self, stop: asyncio.Event) -> None:
        """Keep ``--streams`` requests open until the end or ``stop``."""
        deadline = time.monotonic() + self.args.duration

        async def stream() -> None:
            while not stop.is_set() and time.monotonic() < deadline:
                await self.launch(self.request())

        workers = [asyncio.get_running_loop().create_task(stream()) for _ in range(self.args.streams)]
        try:
            await asyncio.wait_for(stop.wait(), self.args.duration)
        except TimeoutError:
            pass
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    def _skip(self) -> None:
        self.counts.skipped += 1

    async def run(self, stop: asyncio.Event) -> None:
        if self.args.streams:
            await self.run_streams(stop)
        else:
            await self.poisson_arrivals(self.args.rate, self.args.duration, self.args.max_in_flight, stop,
                                        self.request, self._skip)
        await self.cancel_open()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.llm_traffic",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="LLM server base URL (loopback)")
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--streams", type=int, help="requests kept open at once")
    shape.add_argument("--rate", type=float, help="Poisson arrivals per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--prompt-tokens", type=int, required=True, help="words (tokens) of each prompt")
    parser.add_argument("--max-tokens", type=int, required=True, help="tokens asked of each request")
    parser.add_argument("--max-in-flight", type=int, default=256, help="most open requests of --rate")
    parser.add_argument("--model", default=None, help="'model' of the requests (default: none given)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", required=True, help="JSON file for the counts")
    args = parser.parse_args(argv)
    if (args.streams is not None and args.streams < 1) or (args.rate is not None and args.rate <= 0):
        parser.error("--streams must be >= 1 and --rate > 0")
    return args


async def run_traffic(args: argparse.Namespace, stop: asyncio.Event) -> TrafficCounts:
    traffic = Traffic(args)
    await traffic.run(stop)
    return traffic.counts


def main(argv: list[str] | None = None) -> None:
    run_traffic_child(parse_args(argv), run_traffic)


if __name__ == "__main__":
    main()
