"""Prompts of a replayed LLM trace: each row's length, and Mooncake's shared blocks for equal hash ids.

No Locust or gevent import. :class:`TracePrompts` walks a trace's rows
(:class:`~.trace_files.TraceRequests`) in arrival order: arrival ``k`` of a
distributed worker ``index`` of ``count`` is row ``index + k·count`` (the
rows its share of the schedule holds, :func:`~.distributed.take_share`),
wrapping around when the replay loops.

A row without hash ids (Azure, BurstGPT) is ``input_tokens`` drawn tokens
(the class's own random words or one-token words). A Mooncake row is its
blocks, in order: hash id ``h`` is always the same ``block_tokens`` tokens —
a tag of ``tag_tokens`` tokens spelling ``h`` (words ``x<h>``; with a
tokenizer, ``h`` in base ``len(units)`` one-token words), then tokens from a
pool seeded by the class name alone, from a start fixed by ``h`` — so equal
hash ids give equal blocks in every worker and every run, and different
ones differ. The last block is cut to what ``input_tokens`` leaves; tokens
the hash ids do not cover are drawn at random (no reuse). Cost: one
``block_tokens`` slice per block.
"""

from __future__ import annotations

from collections.abc import Callable

from tailscope.loadgen.trace_files import TraceRequests

#: Multiplier that spreads consecutive hash ids over the pool (Knuth's, odd).
_SPREAD = 2654435761


class TracePrompts:
    """Prompt texts of a trace's rows for one request class (not thread-safe: one per maker).

    ``draw(n)`` gives ``n`` random tokens as ``(text, count)`` (the maker's own prompt text);
    ``words`` (no tokenizer: ``(pool bytes, starts)`` of :func:`~.llm_requests.word_pool`) or
    ``units`` (a tokenizer's one-token words, each with a leading space) make the blocks;
    ``block_units`` is the units pool block bodies are cut from, built from a generator seeded
    by the class name (so equal in every worker)."""

    def __init__(self, requests: TraceRequests, draw: Callable[[int], tuple[str, int]], *,
                 words: tuple[bytes, list[int]] | None = None, units: list[str] | None = None,
                 block_units: list[str] | None = None, share: tuple[int, int] = (0, 1)):
        if (words is None) == (units is None):
            raise ValueError("TracePrompts needs either a word pool or one-token words")
        self.requests = requests
        self._draw = draw
        self._words = words
        self._units = units
        self._block_units = block_units
        index, count = share
        if not (count >= 1 and 0 <= index < count):
            raise ValueError(f"share must be (index, count) with 0 <= index < count, got {share!r}")
        self._next, self._step = index, count
        self.block_tokens = requests.block_tokens
        largest = max((max(row) for row in requests.hash_ids if row), default=0) if requests.hash_ids else 0
        self.tag_tokens = 1 if units is None else max(1, _digits(largest, len(units)))
        if self.tag_tokens >= self.block_tokens:
            raise ValueError(f"blocks of {self.block_tokens} tokens cannot hold a {self.tag_tokens}-token tag")

    def next(self) -> tuple[str, int, int]:
        """The next row's ``(prompt text, its token count as built, output tokens)``."""
        rows = len(self.requests)
        row = self._next % rows
        self._next += self._step
        text, count = self.prompt(row)
        return text, count, int(self.requests.output_tokens[row])

    def prompt(self, row: int) -> tuple[str, int]:
        """Row ``row``'s prompt: ``(text, tokens)`` — its blocks, then random tokens for the rest."""
        remaining = int(self.requests.input_tokens[row])
        pieces: list[str] = []
        for block in (self.requests.hash_ids[row] if self.requests.hash_ids is not None else ()):
            if remaining <= 0:
                break
            take = min(self.block_tokens, remaining)
            pieces.append(self.block(block, take))
            remaining -= take
        if remaining > 0:
            text, _ = self._draw(remaining)
            pieces.append(text if self._units is not None else text.strip())
        count = int(self.requests.input_tokens[row])
        if self._units is not None:
            return "".join(pieces), count
        return " ".join(p for p in pieces if p), count

    def block(self, hash_id: int, n: int) -> str:
        """The first ``n`` tokens (``n <= block_tokens``) of hash id ``hash_id``'s block."""
        if self._units is None:
            tag = f"x{hash_id}"
            return tag if n == 1 else tag + " " + self._pool_words(hash_id, n - 1)
        base = len(self._units)
        digits, value = [], hash_id
        for _ in range(self.tag_tokens):
            value, digit = divmod(value, base)
            digits.append(self._units[digit])
        pool = self._block_units
        first = (hash_id * _SPREAD) % len(pool)
        body = pool[first: first + self.block_tokens - self.tag_tokens]
        while len(body) < self.block_tokens - self.tag_tokens:
            body += pool[: self.block_tokens - self.tag_tokens - len(body)]
        return "".join((digits + body)[:n])

    def _pool_words(self, hash_id: int, n: int) -> str:
        pool, starts = self._words
        size = len(starts) - 1
        first = (hash_id * _SPREAD) % size
        pieces = []
        while n > 0:
            take = min(n, size - first)
            pieces.append(pool[starts[first]: starts[first + take] - 1])
            n -= take
            first = 0
        return b" ".join(pieces).decode("ascii")


def block_reuse(token_lists, block_tokens: int) -> tuple[int, int]:
    """(blocks whose content repeats an earlier block's, all blocks) when each prompt's tokens
    (a list of words or token ids, in prompt order) are cut into ``block_tokens``-token blocks
    (the last one may be shorter): the sent prompts' counterpart of
    :func:`~.trace_files.hash_id_reuse`."""
    seen: set[tuple] = set()
    reused = total = 0
    for tokens in token_lists:
        for start in range(0, len(tokens), block_tokens):
            key = tuple(tokens[start: start + block_tokens])
            total += 1
            if key in seen:
                reused += 1
            else:
                seen.add(key)
    return reused, total


def _digits(value: int, base: int) -> int:
    """Base-``base`` digits of ``value`` (1 for 0)."""
    count = 1
    while value >= base:
        value //= base
        count += 1
    return count
