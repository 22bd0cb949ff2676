"""Streaming generation: a numpy decoder behind a continuous-batching scheduler.

``POST /v1/generate`` streams one token per decode step. The scheduler runs
in its own thread and, like LLM servers, batches *across streams*: each step
advances every admitted stream (at most ``max_streams``) by one token in one
set of matrix products, and new streams join at the next step after their
prefill, so a token's cost grows with the number of concurrent streams and a
stream's first token waits for the prefill of its prompt (cost ∝ prompt
tokens) and for a free slot.

The model (:class:`DecoderModel`) is real arithmetic with seeded weights:
prefill = tanh of the mean of the prompt's embedded tokens through a dense
layer; step = ``relu((state + embed(last)) @ W1)`` → logits over a
:data:`GENERATION_VOCAB`-word vocabulary (greedy argmax) and the next state
``tanh(h @ W2)``. With ``dim`` 128 a step costs about 0.3 ms per stream on the
development machine.

Per stream, when it ends, the scheduler emits (children of the request's
SERVER span): ``queue_wait`` (submitted → admitted, ``queue.depth``),
``inference`` (admitted → last token; ``model.name = generate``,
``gen.prompt_tokens``, ``gen.tokens``, ``gen.max_tokens``,
``gen.first_token_ns``, ``gen.cancelled``, an event ``first_token``), and
under it ``prefill`` (admitted → first token) and ``decode`` (first → last
token; ``decode.steps``, ``decode.max_streams_seen``).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tailscope.targets.reference.batcher import BatcherStoppedError, QueueFullError
from tailscope.targets.reference.metrics import TargetMetrics
from tailscope.targets.reference.model import VOCAB_SIZE
from tailscope.tracing import kit

#: Words the decoder can emit.
GENERATION_VOCAB = 4096
_SYLLABLES = ("ka", "lo", "mi", "ren", "to", "sa", "vi", "nu", "pe", "dor", "li", "an", "ex", "qu", "ta", "mo")
_HIDDEN_FACTOR = 4


def token_text(token: int) -> str:
    """The word of generated token ``token`` (three syllables from its base-16 digits, then a space)."""
    return "".join(_SYLLABLES[(token >> shift) & 15] for shift in (8, 4, 0)) + " "


class DecoderModel:
    """Seeded float32 weights; ``prefill`` one prompt, ``step`` a batch of streams."""

    def __init__(self, dim: int, seed: int = 0, vocab_size: int = VOCAB_SIZE) -> None:
        rng = np.random.default_rng(seed + 7919)
        hidden = _HIDDEN_FACTOR * dim
        self.dim = dim
        self._embedding = (rng.standard_normal((vocab_size, dim), dtype=np.float32) * 0.5).astype(np.float32)
        self._prompt = seeded_weights(rng, (dim, dim))
        self._w1 = seeded_weights(rng, (dim, hidden))
        self._w2 = seeded_weights(rng, (hidden, dim))
        self._out = seeded_weights(rng, (hidden, GENERATION_VOCAB))

    def prefill(self, prompt_ids: np.ndarray) -> tuple[np.ndarray, int]:
        """Initial state ``(dim,)`` and first input token of a non-empty int32 prompt."""
        embedded = self._embedding[prompt_ids]
        state = np.tanh((embedded @ self._prompt).mean(axis=0))
        return state.astype(np.float32), int(prompt_ids[-1])

    def step(self, states: np.ndarray, last_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One decode step for ``B`` streams: ``(states (B, dim), next tokens (B,))``."""
        hidden = np.maximum((states + self._embedding[last_tokens]) @ self._w1, 0.0)
        logits = hidden @ self._out
        next_tokens = np.argmax(logits, axis=1)
        return np.tanh(hidden @ self._w2).astype(np.float32), next_tokens.astype(np.int64)


def seeded_weights(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[0]))).astype(np.float32)


_END = object()


@dataclass(eq=False)
class GenerationStream:
    """One generation request. Iterate it (``async for``) in the event loop for its token texts."""

    prompt_ids: np.ndarray
    max_tokens: int
    trace_context: Any
    queue_depth: int
    enqueued_ns: int
    loop: asyncio.AbstractEventLoop
    tokens: asyncio.Queue = field(default_factory=asyncio.Queue)
    admitted_ns: int | None = None
    first_token_ns: int | None = None
    produced: int = 0
    steps: int = 0
    max_streams_seen: int = 0
    cancelled: bool = False
    state: np.ndarray | None = None
    last_token: int = 0

    def cancel(self) -> None:
        """Stop decoding this stream at the next step (the client went away)."""
        self.cancelled = True

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> str:
        item = await self.tokens.get()
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def _deliver(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.tokens.put_nowait, item)
        except RuntimeError:  # the event loop closed: nobody is listening any more
            pass


class DecodeScheduler:
    """Continuous batching of generation streams in one decoding thread (see the module docstring)."""

    def __init__(
        self,
        model: DecoderModel,
        tracer: trace.Tracer,
        *,
        max_streams: int,
        max_queue_size: int,
        extra_delay_s: float = 0.0,
        metrics: TargetMetrics | None = None,
    ) -> None:
        self._model = model
        self._tracer = tracer
        self._max_streams = max_streams
        self._max_queue_size = max_queue_size
        self._extra_delay_s = extra_delay_s
        self._metrics = metrics
        self._waiting: collections.deque[GenerationStream] = collections.deque()
        self._active: list[GenerationStream] = []
        self._condition = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None

    @property
    def depth(self) -> int:
        """Streams waiting for a decode slot."""
        return len(self._waiting)

    @property
    def active(self) -> int:
        """Streams being decoded."""
        return len(self._active)

    def start(self) -> None:
        with self._condition:
            if self._thread is not None:
                raise RuntimeError("decode scheduler already started")
            self._running = True
            self._thread = threading.Thread(target=self._decode_loop, name="decoder", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop decoding; every unfinished stream ends with BatcherStoppedError."""
        with self._condition:
            self._running = False
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for stream in [*self._active, *self._waiting]:
            stream._deliver(BatcherStoppedError("the decoder stopped"))
        self._active.clear()
        self._waiting.clear()

    def submit(self, prompt_ids: np.ndarray, max_tokens: int, trace_context: Any) -> GenerationStream:
        """Queue a stream (call from the event loop). Raises QueueFullError or BatcherStoppedError at once."""
        if len(prompt_ids) == 0 or max_tokens < 1:
            raise ValueError("a generation needs a non-empty prompt and max_tokens >= 1")
        with self._condition:
            if not self._running:
                raise BatcherStoppedError("the decoder is not running")
            if len(self._waiting) >= self._max_queue_size:
                raise QueueFullError(f"{len(self._waiting)} generations already wait (max_queue_size)")
            stream = GenerationStream(
                prompt_ids=prompt_ids,
                max_tokens=max_tokens,
                trace_context=trace_context,
                queue_depth=len(self._waiting) + 1,
                enqueued_ns=time.time_ns(),
                loop=asyncio.get_running_loop(),
            )
            self._waiting.append(stream)
            self._condition.notify()
        return stream

    # ------------------------------------------------------------------ decoding thread

    def _decode_loop(self) -> None:
        while True:
            with self._condition:
                while self._running and not self._active and not self._waiting:
                    self._condition.wait()
                if not self._running:
                    return
                admitted = self._admit()
            for stream in admitted:
                stream.state, stream.last_token = self._model.prefill(stream.prompt_ids)
            self._step()
            if self._extra_delay_s > 0:
                time.sleep(self._extra_delay_s)

    def _admit(self) -> list[GenerationStream]:
        admitted = []
        now = time.time_ns()
        while self._waiting and len(self._active) < self._max_streams:
            stream = self._waiting.popleft()
            stream.admitted_ns = now
            self._active.append(stream)
            admitted.append(stream)
        return admitted

    def _step(self) -> None:
        streams = [s for s in self._active if not s.cancelled]
        if streams:
            states = np.stack([s.state for s in streams])
            last = np.fromiter((s.last_token for s in streams), dtype=np.int64, count=len(streams))
            new_states, next_tokens = self._model.step(states, last)
            now = time.time_ns()
            for stream, state, token in zip(streams, new_states, next_tokens.tolist()):
                stream.state, stream.last_token = state, token
                stream.produced += 1
                stream.steps += 1
                stream.max_streams_seen = max(stream.max_streams_seen, len(streams))
                if stream.first_token_ns is None:
                    stream.first_token_ns = now
                stream._deliver(token_text(token))
            if self._metrics is not None:
                self._metrics.observe_batch("generate", len(streams))
        finished = [s for s in self._active if s.cancelled or s.produced >= s.max_tokens]
        if finished:
            with self._condition:
                self._active = [s for s in self._active if s not in finished]
            ended_ns = time.time_ns()
            for stream in finished:
                # read before _END is delivered: the handler cancels a stream once it has ended
                cancelled = stream.cancelled
                stream._deliver(_END)
                self._record_spans(stream, ended_ns, cancelled)

    def _record_spans(self, stream: GenerationStream, ended_ns: int, cancelled: bool) -> None:
        """The stream's queue_wait, inference (``gen.cancelled``: it ended by the client's
        disconnect, not by reaching its token count), prefill and decode spans."""
        admitted_ns = stream.admitted_ns or stream.enqueued_ns
        first_ns = stream.first_token_ns or ended_ns
        kit.record_stage(
            self._tracer, kit.QUEUE_WAIT, stream.enqueued_ns, max(stream.enqueued_ns, admitted_ns),
            stream.trace_context, kit.queue_attributes(stream.queue_depth, self._max_queue_size),
        )
        span = self._tracer.start_span(
            kit.INFERENCE,
            context=stream.trace_context,
            kind=SpanKind.INTERNAL,
            start_time=admitted_ns,
            attributes={
                "model.name": "generate",
                "gen.prompt_tokens": len(stream.prompt_ids),
                "gen.tokens": stream.produced,
                "gen.max_tokens": stream.max_tokens,
                "gen.first_token_ns": first_ns,
                "gen.cancelled": cancelled,
            },
        )
        span.add_event("first_token", timestamp=first_ns)
        inside = trace.set_span_in_context(span)
        kit.record_stage(self._tracer, "prefill", admitted_ns, max(admitted_ns, first_ns), inside)
        kit.record_stage(
            self._tracer, "decode", max(admitted_ns, first_ns), max(admitted_ns, first_ns, ended_ns), inside,
            {"decode.steps": stream.steps, "decode.max_streams_seen": stream.max_streams_seen},
        )
        span.end(end_time=max(admitted_ns, ended_ns))
        if self._metrics is not None:
            self._metrics.observe_stage("queue_wait", "generate", (admitted_ns - stream.enqueued_ns) / 1e9)
            self._metrics.observe_stage("first_token", "generate", (first_ns - stream.enqueued_ns) / 1e9)
            self._metrics.observe_stage("inference", "generate", (ended_ns - admitted_ns) / 1e9)
