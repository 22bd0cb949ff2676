"""The engine thread: schedule a step, run the decoder on it, hand out the tokens, repeat.

:class:`Engine` owns a :class:`~.scheduler.Scheduler`, a
:class:`~.kv_cache.BlockPool` and a :class:`~.model.TinyDecoder`. The event loop
calls :meth:`Engine.submit` (bounded by ``max_waiting``: :class:`QueueFullError`)
and :meth:`Sequence.cancel`; everything else happens in the engine thread:

1. new requests join the waiting queue; cancelled ones are finished as ``abort``;
2. the scheduler plans the step (:mod:`.scheduler`); preemptions are counted;
3. the decoder computes every chunk — prefill chunks one sequence at a time,
   single-token decodes batched — and samples a token for each sequence whose
   chunk completes its context (a pooling request gets its embedding instead);
4. the step's end time (after ``step_extra_delay_ms``) stamps the tokens; a
   sequence finishes at EOS (``stop``, only if not ``ignore_eos``; EOS is
   neither streamed nor counted) or at ``max_tokens`` (``length``), and its
   blocks are freed;
5. the step's tokens reach the event loop in one call per loop (:func:`.sequence.deliver`).

A prefill thus occupies the step it lands in, and every running sequence's
token in that step waits for it (prefill interference).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.llm.kv_cache import BlockPool
from tailscope.targets.llm.metrics import LlmMetrics
from tailscope.targets.llm.model import TinyDecoder, sample, unit_mean
from tailscope.targets.llm.scheduler import Chunk, Scheduler
from tailscope.targets.llm.sequence import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Delivery,
    EngineStoppedError,
    Sequence,
    deliver,
)
from tailscope.targets.llm.tokens import EOS
from tailscope.targets.reference.batcher import QueueFullError

__all__ = ["Engine", "EngineStoppedError", "QueueFullError"]


class Engine:
    """Continuous batching of :class:`~.sequence.Sequence` objects in one thread (see the module docstring)."""

    def __init__(self, config: LlmServerConfig, metrics: LlmMetrics | None = None) -> None:
        self._config = config
        self._metrics = metrics
        self.blocks = BlockPool(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(
            self.blocks,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            chunked_prefill=config.enable_chunked_prefill,
        )
        self.model = TinyDecoder(config.model_dim, config.num_kv_blocks, config.block_size, config.seed)
        self._rng = np.random.default_rng(config.seed)
        self._extra_delay_s = config.step_extra_delay_ms / 1000.0
        self._incoming: list[Sequence] = []
        self._condition = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self.steps = 0
        if metrics is not None:
            metrics.watch(lambda: len(self.scheduler.running), lambda: self.num_waiting, self.blocks.usage)

    # ------------------------------------------------------------------ event-loop side

    @property
    def num_waiting(self) -> int:
        """Requests waiting for the engine: new ones not yet picked up, and the waiting queue."""
        return len(self._incoming) + len(self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def alive(self) -> bool:
        return self._running and self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._condition:
            if self._thread is not None:
                raise RuntimeError("engine already started")
            self._running = True
            self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop after the current step; every unfinished request ends with :class:`EngineStoppedError`."""
        with self._condition:
            self._running = False
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        unfinished = [*self._incoming, *self.scheduler.waiting, *self.scheduler.running]
        self._incoming.clear()
        for seq in unfinished:
            self.scheduler.remove(seq)
        error = EngineStoppedError("the engine stopped")
        deliver([(seq, [], True, error) for seq in unfinished])

    def submit(self, seq: Sequence) -> None:
        """Queue ``seq`` (sets ``queued_ns``). Raises QueueFullError past ``max_waiting`` waiting requests,
        EngineStoppedError when the engine is not running."""
        with self._condition:
            if not self._running:
                raise EngineStoppedError("the engine is not running")
            if self.num_waiting >= self._config.max_waiting:
                raise QueueFullError(f"{self.num_waiting} requests already wait (max_waiting)")
            seq.queued_ns = time.time_ns()
            self._incoming.append(seq)
            self._condition.notify()

    # ------------------------------------------------------------------ engine thread

    def _loop(self) -> None:
        while True:
            with self._condition:
                while self._running and not self._incoming and not self.scheduler.has_work():
                    self._condition.wait()
                if not self._running:
                    return
                incoming, self._incoming = self._incoming, []
            for seq in incoming:
                self.scheduler.add(seq)
            self.step()

    def step(self) -> None:
        """Run one engine step (engine thread only; public for tests that drive the engine by hand)."""
        deliveries: list[Delivery] = []
        now = time.time_ns()
        for seq in [s for s in (*self.scheduler.running, *self.scheduler.waiting) if s.cancelled]:
            self._finish(seq, FINISH_ABORT, now)
            deliveries.append((seq, [], True, None))
        plan = self.scheduler.schedule(now)
        if self._metrics is not None:
            if plan.preempted:
                self._metrics.preemptions.inc(len(plan.preempted))
            if plan.chunks:
                self._metrics.iteration_tokens.observe(plan.num_tokens)
        sampled = self._execute(plan.chunks)
        if self._extra_delay_s > 0:
            time.sleep(self._extra_delay_s)
        end = time.time_ns()
        self.steps += 1
        for seq, token in sampled:
            deliveries.append(self._accept(seq, token, end))
        deliver(deliveries)

    def _execute(self, chunks: list[Chunk]) -> list[tuple[Sequence, int | None]]:
        """Compute every chunk; ``(sequence, sampled token)`` for those that completed (None: pooling)."""
        hidden: list[np.ndarray] = []
        samplers: list[Sequence] = []
        decodes: list[Chunk] = []
        done: list[tuple[Sequence, int | None]] = []
        for chunk in chunks:
            seq = chunk.seq
            if chunk.num_tokens == 1 and chunk.completes and not seq.pooling:
                decodes.append(chunk)
                continue
            block_ids = self.blocks.blocks_of(seq)
            tokens = seq.token_at(chunk.start, chunk.start + chunk.num_tokens)
            seq.num_computed += chunk.num_tokens
            if seq.pooling:
                states_sum = self.model.store(block_ids, chunk.start, tokens).sum(axis=0)
                seq.embedding = states_sum if chunk.start == 0 else seq.embedding + states_sum
                if chunk.completes:
                    seq.embedding = unit_mean(seq.embedding, len(seq.prompt_ids))
                    done.append((seq, None))
                continue
            state = self.model.prefill(block_ids, chunk.start, tokens, sample=chunk.completes)
            if seq.block_hashes:  # prefix caching: its computed full prompt blocks become reusable
                self.blocks.register(seq, seq.block_hashes, min(seq.num_computed, len(seq.prompt_ids)))
            if state is not None:
                hidden.append(state[None, :])
                samplers.append(seq)
        if decodes:
            items = [(self.blocks.blocks_of(c.seq), c.start, c.seq.token_at(c.start, c.start + 1)[0]) for c in decodes]
            hidden.append(self.model.decode(items))
            for chunk in decodes:
                chunk.seq.num_computed += 1
                samplers.append(chunk.seq)
        if samplers:
            allow_eos = np.fromiter((bool(s.output_ids) and not s.ignore_eos for s in samplers), dtype=bool,
                                    count=len(samplers))
            logits = self.model.logits(np.concatenate(hidden, axis=0))
            tokens = sample(logits, allow_eos, self._config.eos_probability, self._rng)
            done.extend(zip(samplers, tokens))
        return done

    def _accept(self, seq: Sequence, token: int | None, end_ns: int) -> Delivery:
        """Stamp a sampled token (or a pooling result) at ``end_ns``; finish the sequence when it is done."""
        metrics = self._metrics
        if token is None:
            self._finish(seq, FINISH_STOP, end_ns)
            return seq, [], True, None
        if token == EOS:
            self._finish(seq, FINISH_STOP, end_ns)
            return seq, [], True, None
        seq.output_ids.append(token)
        if seq.first_token_ns is None:
            seq.first_token_ns = end_ns
            if metrics is not None:
                metrics.prompt_tokens.inc(len(seq.prompt_ids))
                metrics.count_prefix_cache(len(seq.prompt_ids), seq.cached_tokens, self.blocks.prefix_caching)
                metrics.ttft.observe(max(0, end_ns - seq.arrival_ns) / 1e9)
        elif metrics is not None and seq.last_token_ns is not None:
            metrics.itl.observe(max(0, end_ns - seq.last_token_ns) / 1e9)
        seq.last_token_ns = end_ns
        if len(seq.output_ids) == seq.reasoning_tokens + 1:
            seq.answer_token_ns = end_ns
        if metrics is not None:
            metrics.generation_tokens.inc()
        finished = len(seq.output_ids) >= seq.max_tokens
        if finished:
            self._finish(seq, FINISH_LENGTH, end_ns)
        return seq, [token], finished, None

    def _finish(self, seq: Sequence, reason: str, end_ns: int) -> None:
        self.scheduler.remove(seq)
        seq.finish_reason = reason
        seq.finished_ns = end_ns
        if self._metrics is not None:
            self._metrics.observe_finished(seq)
