"""Continuous-batching scheduler: waiting and running queues, a step token budget, preemption by recompute.

Every step, :meth:`Scheduler.schedule` decides how many tokens each sequence
computes, vLLM-v1 style (a sequence computes ``num_tokens - num_computed``
tokens: the whole prompt for a new request, 1 for a decoding one, prompt +
output so far for a preempted one being recomputed):

1. *Running* sequences first, oldest first: each gets its tokens (with chunked
   prefill, at most what is left of the step's ``max_num_batched_tokens``
   budget). When its context needs a KV block and none is free, the *youngest*
   running sequence is preempted — its blocks are freed, ``num_computed`` is
   reset to 0, and it goes back to the front of the waiting queue, to be
   prefilled again over its prompt and the tokens it already generated — until
   the block fits (a sequence may preempt itself).
2. Then, unless a preemption happened in this step, *waiting* sequences are
   admitted in FIFO order while fewer than ``max_num_seqs`` run, the budget
   lasts and their blocks are free (no skipping: a head that does not fit
   stops admission). Without chunked prefill a prefill is scheduled whole; it
   may exceed the remaining budget only when it is the step's first prefill, so
   a long prompt never starves.

With prefix caching (:mod:`.kv_cache`), a sequence admitted with nothing
computed first takes the cached blocks of its prompt's longest cached prefix
and computes only the rest (``Sequence.cached_tokens``); one that then does
not fit gives them back.

Guarantees: at most ``max_num_seqs`` sequences run; a scheduled sequence holds
the blocks for its context after the step; ``scheduled_ns`` is set once, on
first admission. Not thread-safe: the engine thread owns it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from tailscope.targets.llm.kv_cache import BlockPool, block_hashes
from tailscope.targets.llm.sequence import Sequence


@dataclass(frozen=True)
class Chunk:
    """``num_tokens`` context positions of ``seq`` from ``start`` to compute in this step."""

    seq: Sequence
    start: int
    num_tokens: int

    @property
    def completes(self) -> bool:
        """Whether this chunk computes the sequence's last pending position (so a token is sampled)."""
        return self.start + self.num_tokens == self.seq.num_tokens


@dataclass
class StepPlan:
    """What one engine step computes."""

    chunks: list[Chunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)


class Scheduler:
    """The waiting and running queues over one :class:`BlockPool` (see the module docstring)."""

    def __init__(self, blocks: BlockPool, *, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool) -> None:
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        """Append a new request to the waiting queue."""
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take ``seq`` out of whichever queue holds it and free its blocks (finished or aborted)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self, now_ns: int) -> StepPlan:
        """The next step's chunks and the sequences preempted to make room (see the module docstring)."""
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            wanted = seq.num_tokens - seq.num_computed
            count = min(wanted, budget) if self.chunked_prefill else wanted
            preempted_itself = False
            while not preempted_itself and not self.blocks.can_hold(seq, seq.num_computed + count):
                victim = self.running[-1]
                self._preempt(victim)
                plan.preempted.append(victim)
                preempted_itself = victim is seq
            if preempted_itself:
                break
            self.blocks.grow(seq, seq.num_computed + count)
            plan.chunks.append(Chunk(seq, seq.num_computed, count))
            budget -= count
            index += 1
        if plan.preempted:
            return plan
        prefill_scheduled = any(not _is_decode(chunk) for chunk in plan.chunks)
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            if seq.num_computed == 0 and not seq.pooling:
                self._take_cached_prefix(seq)
            wanted = seq.num_tokens - seq.num_computed
            if self.chunked_prefill:
                count = min(wanted, budget)
            elif wanted <= budget or not prefill_scheduled:
                count = wanted
            else:
                break
            if not self.blocks.can_hold(seq, seq.num_computed + count):
                if seq.cached_tokens:  # not admitted: its cached blocks go back (still cached)
                    self.blocks.free(seq)
                    seq.num_computed = seq.cached_tokens = 0
                break
            self.waiting.popleft()
            self.blocks.grow(seq, seq.num_computed + count)
            self.running.append(seq)
            if seq.scheduled_ns is None:
                seq.scheduled_ns = now_ns
            plan.chunks.append(Chunk(seq, seq.num_computed, count))
            budget -= count
            prefill_scheduled = True
        return plan


    def _take_cached_prefix(self, seq: Sequence) -> None:
        """Give ``seq`` the cached blocks of its prompt's longest cached prefix (prefix caching): its
        ``num_computed`` starts after them, but at most at the prompt's last token, whose logits give
        the first output token (it is recomputed into the last shared block: the same values)."""
        if not self.blocks.prefix_caching:
            return
        if seq.block_hashes is None:
            seq.block_hashes = block_hashes(seq.prompt_ids, self.blocks.block_size)
        taken = self.blocks.take_prefix(seq, seq.block_hashes)
        seq.cached_tokens = seq.num_computed = min(taken * self.blocks.block_size, len(seq.prompt_ids) - 1)


def _is_decode(chunk: Chunk) -> bool:
    return chunk.num_tokens == 1 and bool(chunk.seq.output_ids) and chunk.completes
