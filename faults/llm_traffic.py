"""``python -m tailscope.faults.llm_traffic``: OpenAI chat requests from another client (the LLM faults).

Sends ``POST /v1/chat/completions`` (not streamed, ``ignore_eos``) to a
loopback LLM server for ``--duration`` seconds, each over its own connection
and **without** a ``traceparent``: the server's spans of these requests join
none of the harness's traces, so the analysis counts them as other traffic.
Every prompt is ``--prompt-tokens`` tokens *of the server* and asks for
``--max-tokens`` tokens. The prompt is sized (:class:`PromptSizer`):

* with ``--tokenizer`` (the ``tokenizer.json`` a scenario's class names): a
  text of exactly that many tokens of it, as the load generator makes them;
* without: random words, as many as the server's tokens-per-word ratio says.
  The ratio is calibrated from the ``usage.prompt_tokens`` of a first short
  request (:data:`CALIBRATION_WORDS` words, one output token) and refined by
  every answer (Σ prompt tokens ÷ Σ words sent); a server that answers
  without ``usage`` keeps one word per token (the reference server's count).

Errors slow the traffic down instead of repeating at once: after a failed
request (an HTTP status other than 200, or a connection error) a stream
waits before its next request, and Poisson arrivals are skipped, for a back
off that doubles from :data:`BACKOFF_START_S` to :data:`BACKOFF_MAX_S` with
each consecutive failure and resets on an answer. After
:data:`MAX_CONSECUTIVE_4XX` consecutive client errors (4xx other than 429:
the server refuses what is sent, so sending more cannot help) the traffic
stops and its report's ``failure`` says why, quoting the last answer. Two
shapes:

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
#: Words of the calibration request that measures the server's tokens per word.
CALIBRATION_WORDS = 16
#: Back off after a failed request: the first wait, and the most (seconds).
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 2.0
#: Consecutive client errors (4xx other than 429) after which the traffic stops with a failure.
MAX_CONSECUTIVE_4XX = 10
#: Characters of the last error answer quoted in the failure.
QUOTED_CHARS = 200


@dataclass
class TrafficCounts:
    """What the traffic did; token counts from the replies' ``usage``; latencies (ms) of answered requests."""

    sent: int = 0
    ok: int = 0
    rejected_429: int = 0
    rejected_4xx: int = 0  # client errors other than 429: the server refused what was sent
    other_status: int = 0
    errors: int = 0
    skipped: int = 0
    backed_off: int = 0  # Poisson arrivals not sent because the traffic was backing off
    cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_sizing: str = ""  # how prompts were sized: "tokenizer", "calibrated" or "words"
    tokens_per_word: float | None = None  # the calibrated ratio (None with a tokenizer)
    failure: str | None = None  # why the traffic stopped early (None: it ran its window)
    latencies_ms: list = field(default_factory=list)

    def report(self) -> dict:
        data = asdict(self)
        latencies = sorted(data.pop("latencies_ms"))
        data["p50_ms"] = percentile_of(latencies, 0.5)
        data["max_ms"] = latencies[-1] if latencies else None
        return data


def random_words(rng: random.Random, count: int) -> str:
    """``count`` random lowercase words of 3–8 letters."""
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(count))


def chat_body(text: str, max_tokens: int, model: str | None) -> bytes:
    """A chat request of the prompt ``text`` asking for ``max_tokens`` tokens, ignoring EOS."""
    document = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "ignore_eos": True,
                "stream": False}
    if model:
        document["model"] = model
    return json.dumps(document).encode()


class PromptSizer:
    """Prompts of a number of the server's tokens (see the module docstring).

    ``prompt(n)`` → (text, words in it); ``observe(words, usage_prompt_tokens)`` refines the
    ratio from an answer. With a tokenizer the text is exact and ``observe`` changes nothing."""

    def __init__(self, rng: random.Random, tokenizer: str | None) -> None:
        self.rng = rng
        self._maker = None
        self._words = 0
        self._tokens = 0
        if tokenizer:
            import numpy as np

            from tailscope.loadgen.llm_requests import LLMRequestMaker
            from tailscope.loadgen.spec import LLMSpec

            self._maker = LLMRequestMaker("llm_traffic", LLMSpec(api="openai-chat", model="-", tokenizer=tokenizer),
                                          np.random.default_rng(rng.getrandbits(32)))

    @property
    def exact(self) -> bool:
        return self._maker is not None

    @property
    def tokens_per_word(self) -> float | None:
        """Σ usage prompt tokens ÷ Σ words of the answered prompts; None before any answer."""
        return self._tokens / self._words if self._words and self._tokens else None

    def words_for(self, tokens: int) -> int:
        ratio = self.tokens_per_word or 1.0
        return max(1, round(tokens / ratio))

    def prompt(self, tokens: int) -> tuple[str, int]:
        if self._maker is not None:
            text, _ = self._maker.synthetic_prompt(tokens)
            return text, 0
        words = self.words_for(tokens)
        return random_words(self.rng, words), words

    def observe(self, words: int, prompt_tokens: int) -> None:
        if words > 0 and prompt_tokens > 0:
            self._words += words
            self._tokens += prompt_tokens


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
        self.sizer = PromptSizer(self.rng, args.tokenizer)
        self.stop = asyncio.Event()
        self._failures = 0  # consecutive failed requests (any kind)
        self._client_errors = 0  # consecutive 4xx other than 429
        self._resume_at = 0.0  # monotonic time before which no request is sent (back off)

    def backoff_s(self) -> float:
        """The wait after the current run of consecutive failures (0 after an answer)."""
        if not self._failures:
            return 0.0
        return min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (self._failures - 1))

    def _outcome(self, ok: bool, status: int | None, payload: bytes = b"") -> None:
        """Count one outcome toward the back off and the stop after repeated client errors."""
        if ok:
            self._failures = self._client_errors = 0
            self._resume_at = 0.0
            return
        self._failures += 1
        self._resume_at = time.monotonic() + self.backoff_s()
        if status is not None and 400 <= status < 500 and status != 429:
            self._client_errors += 1
            if self._client_errors >= MAX_CONSECUTIVE_4XX and self.counts.failure is None:
                quoted = payload.decode("utf-8", "replace")[:QUOTED_CHARS]
                self.counts.failure = (f"stopped after {self._client_errors} consecutive HTTP 4xx answers "
                                       f"(the last: {status} {quoted!r})")
                self.stop.set()
        else:
            self._client_errors = 0

    async def request(self, prompt_tokens: int | None = None, max_tokens: int | None = None) -> None:
        started = time.monotonic()
        text, words = self.sizer.prompt(self.args.prompt_tokens if prompt_tokens is None else prompt_tokens)
        body = chat_body(text, self.args.max_tokens if max_tokens is None else max_tokens, self.args.model)
        self.counts.sent += 1
        try:
            status, payload = await asyncio.wait_for(post_once(self.host, self.port, PATH, body), REQUEST_TIMEOUT_S)
        except asyncio.CancelledError:
            self.counts.cancelled += 1
            raise
        except (TimeoutError, OSError, ValueError, IndexError):
            self.counts.errors += 1
            self._outcome(False, None)
            return
        if status == 200:
            self.counts.ok += 1
            usage = _json_object(payload).get("usage") or {}
            self.counts.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.counts.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.sizer.observe(words, int(usage.get("prompt_tokens") or 0))
        elif status == 429:
            self.counts.rejected_429 += 1
        elif 400 <= status < 500:
            self.counts.rejected_4xx += 1
        else:
            self.counts.other_status += 1
        self._outcome(status == 200, status, payload)
        self.counts.latencies_ms.append((time.monotonic() - started) * 1000.0)

    async def calibrate(self) -> None:
        """Without a tokenizer: one short request (:data:`CALIBRATION_WORDS` words, one output token)
        measures the server's tokens per word before the traffic starts."""
        if not self.sizer.exact:
            await self.request(prompt_tokens=min(CALIBRATION_WORDS, self.args.prompt_tokens), max_tokens=1)

    async def _pause(self, deadline: float) -> bool:
        """Wait out the back off (or until ``stop`` or ``deadline``); False when the traffic must end."""
        wait = min(self._resume_at, deadline) - time.monotonic()
        if wait > 0:
            try:
                await asyncio.wait_for(self.stop.wait(), wait)
            except TimeoutError:
                pass
        return not self.stop.is_set() and time.monotonic() < deadline

    async def run_streams(self, stop: asyncio.Event) -> None:
        """Keep ``--streams`` requests open until the end or ``stop``; a stream backs off after a failure."""
        deadline = time.monotonic() + self.args.duration

        async def stream() -> None:
            while await self._pause(deadline):
                await self.launch(self.request())

        workers = [asyncio.get_running_loop().create_task(stream()) for _ in range(self.args.streams)]
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            pass
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    def _skip(self) -> None:
        self.counts.skipped += 1

    def _arrival(self):
        """A Poisson arrival's request, or None (counted as ``backed_off``) while backing off."""
        if time.monotonic() < self._resume_at:
            self.counts.backed_off += 1
            return self._nothing()
        return self.request()

    @staticmethod
    async def _nothing() -> None:
        return None

    async def run(self, stop: asyncio.Event) -> None:
        """The traffic until its ``--duration`` ends, ``stop`` is set (SIGTERM) or it stops itself."""
        relay = asyncio.get_running_loop().create_task(stop.wait())
        relay.add_done_callback(lambda _: self.stop.set())
        try:
            started = time.monotonic()
            await self.calibrate()
            self.args.duration = max(0.0, self.args.duration - (time.monotonic() - started))
            if self.args.streams:
                await self.run_streams(self.stop)
            else:
                await self.poisson_arrivals(self.args.rate, self.args.duration, self.args.max_in_flight, self.stop,
                                            self._arrival, self._skip)
        finally:
            relay.cancel()
            await self.cancel_open()
            self.counts.prompt_sizing = ("tokenizer" if self.sizer.exact
                                         else "calibrated" if self.sizer.tokens_per_word else "words")
            self.counts.tokens_per_word = self.sizer.tokens_per_word


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.llm_traffic",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="LLM server base URL (loopback)")
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--streams", type=int, help="requests kept open at once")
    shape.add_argument("--rate", type=float, help="Poisson arrivals per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--prompt-tokens", type=int, required=True, help="the server's tokens of each prompt")
    parser.add_argument("--tokenizer", default=None,
                        help="a local tokenizer.json: prompts of exactly --prompt-tokens of its tokens "
                             "(default: words, calibrated from the server's usage.prompt_tokens)")
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
