"""The KV-cache block budget: a pool of fixed-size blocks handed to sequences, as in paged attention.

A sequence whose context (tokens whose keys and values are stored) is ``n``
tokens holds exactly ``ceil(n / block_size)`` blocks. :class:`BlockPool` only
does the bookkeeping (which block ids are free, which a sequence owns); the
numbers live in the decoder's K/V arrays indexed by block id
(:class:`~tailscope.targets.llm.model.TinyDecoder`). Not thread-safe: only the
engine thread calls it (the usage gauge reads one int).
"""

from __future__ import annotations

from collections.abc import Hashable


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` tokens: ``ceil(tokens / block_size)`` (0 for 0)."""
    return -(-tokens // block_size)


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` tokens; owners are any hashable objects (the sequences)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a block pool needs num_blocks >= 1 and block_size >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self._owned: dict[Hashable, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (``vllm:kv_cache_usage_perc``)."""
        return (self.num_blocks - len(self._free)) / self.num_blocks

    def blocks_of(self, owner: Hashable) -> list[int]:
        """The block ids ``owner`` holds, in context order (the list is the pool's own: do not change it)."""
        return self._owned.get(owner, [])

    def extra_blocks_needed(self, owner: Hashable, tokens: int) -> int:
        """Blocks ``owner`` must still get for a context of ``tokens`` tokens."""
        return max(0, blocks_for(tokens, self.block_size) - len(self._owned.get(owner, ())))

    def can_hold(self, owner: Hashable, tokens: int) -> bool:
        """Whether ``owner``'s context can grow to ``tokens`` tokens with the blocks free now."""
        return self.extra_blocks_needed(owner, tokens) <= len(self._free)

    def grow(self, owner: Hashable, tokens: int) -> list[int]:
        """Give ``owner`` the blocks for a context of ``tokens`` tokens; its block list. Raises MemoryError
        when too few blocks are free (check :meth:`can_hold` first)."""
        needed = self.extra_blocks_needed(owner, tokens)
        if needed > len(self._free):
            raise MemoryError(f"{needed} KV blocks needed, {len(self._free)} free")
        owned = self._owned.setdefault(owner, [])
        for _ in range(needed):
            owned.append(self._free.pop())
        return owned

    def free(self, owner: Hashable) -> int:
        """Return every block of ``owner`` to the pool; the number returned."""
        owned = self._owned.pop(owner, [])
        self._free.extend(reversed(owned))
        return len(owned)
