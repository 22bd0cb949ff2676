"""The KV-cache block budget: a pool of fixed-size blocks handed to sequences, as in paged attention.

A sequence whose context (tokens whose keys and values are stored) is ``n``
tokens holds exactly ``ceil(n / block_size)`` blocks. :class:`BlockPool` only
does the bookkeeping (which block ids are free, which a sequence owns); the
numbers live in the decoder's K/V arrays indexed by block id
(:class:`~tailscope.targets.llm.model.TinyDecoder`). Not thread-safe: only the
engine thread calls it (the usage gauge reads one int).

**Prefix caching** (``prefix_caching=True``, vLLM's automatic prefix caching): a
full prompt block, once computed, is registered under the hash of its tokens
chained with the hash of the blocks before it (:func:`block_hashes`), so one
hash means one whole prefix. A new sequence takes the cached blocks of its
longest cached prefix (:meth:`BlockPool.take_prefix`) and shares them (a
reference count per block). A block no sequence holds stays cached but
*evictable*: it counts as free, and is handed out (its hash forgotten), least
recently released first, only when no never-cached block is left. Without
prefix caching no block is ever registered and the pool behaves as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from collections.abc import Sequence as SequenceOf


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` tokens: ``ceil(tokens / block_size)`` (0 for 0)."""
    return -(-tokens // block_size)


def block_hashes(token_ids: SequenceOf[int], block_size: int) -> list[int]:
    """The chained hash of each *full* block of ``token_ids``: block ``i``'s hash covers its tokens
    and every block before it (Python's hash of int tuples: deterministic, 64-bit)."""
    hashes, parent = [], 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start: start + block_size])))
        hashes.append(parent)
    return hashes


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` tokens; owners are any hashable objects (the sequences).

    With ``prefix_caching``, computed full prompt blocks are kept for reuse (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a block pool needs num_blocks >= 1 and block_size >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self._owned: dict[Hashable, list[int]] = {}
        self._refs: dict[int, int] = {}  # block -> owners holding it
        self._by_hash: dict[int, int] = {}  # prefix hash -> cached block
        self._hash_of: dict[int, int] = {}  # cached block -> its prefix hash
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks no owner holds, oldest first

    @property
    def num_free(self) -> int:
        """Blocks a sequence can get now: never-cached free ones and evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks registered in the prefix cache (held or evictable)."""
        return len(self._hash_of)

    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (``vllm:kv_cache_usage_perc``; evictable cached blocks are free)."""
        return self.num_used / self.num_blocks

    def blocks_of(self, owner: Hashable) -> list[int]:
        """The block ids ``owner`` holds, in context order (the list is the pool's own: do not change it)."""
        return self._owned.get(owner, [])

    def extra_blocks_needed(self, owner: Hashable, tokens: int) -> int:
        """Blocks ``owner`` must still get for a context of ``tokens`` tokens."""
        return max(0, blocks_for(tokens, self.block_size) - len(self._owned.get(owner, ())))

    def can_hold(self, owner: Hashable, tokens: int) -> bool:
        """Whether ``owner``'s context can grow to ``tokens`` tokens with the blocks free now."""
        return self.extra_blocks_needed(owner, tokens) <= self.num_free

    def grow(self, owner: Hashable, tokens: int) -> list[int]:
        """Give ``owner`` the blocks for a context of ``tokens`` tokens; its block list. Raises MemoryError
        when too few blocks are free (check :meth:`can_hold` first)."""
        needed = self.extra_blocks_needed(owner, tokens)
        if needed > self.num_free:
            raise MemoryError(f"{needed} KV blocks needed, {self.num_free} free")
        owned = self._owned.setdefault(owner, [])
        for _ in range(needed):
            block = self._free.pop() if self._free else self._evict()
            self._refs[block] = 1
            owned.append(block)
        return owned

    def take_prefix(self, owner: Hashable, hashes: SequenceOf[int]) -> int:
        """Give ``owner`` (holding no block yet) the cached blocks of its longest cached prefix, ``hashes``
        being its full blocks' :func:`block_hashes`; the number of blocks taken (0 without prefix caching)."""
        if not self.prefix_caching or self._owned.get(owner):
            return 0
        owned = self._owned.setdefault(owner, [])
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            if self._refs.get(block, 0) == 0:
                self._evictable.pop(block, None)
            self._refs[block] = self._refs.get(block, 0) + 1
            owned.append(block)
        return len(owned)

    def register(self, owner: Hashable, hashes: SequenceOf[int], computed_tokens: int) -> None:
        """Register ``owner``'s full blocks whose tokens are all computed (the first ``computed_tokens``
        positions) under ``hashes``; a hash another block already holds is left as it is."""
        if not self.prefix_caching:
            return
        owned = self._owned.get(owner, [])
        for index in range(min(len(hashes), computed_tokens // self.block_size, len(owned))):
            block, h = owned[index], hashes[index]
            if block not in self._hash_of and h not in self._by_hash:
                self._by_hash[h] = block
                self._hash_of[block] = h

    def free(self, owner: Hashable) -> int:
        """Return every block of ``owner`` to the pool (a cached one stays cached, evictable, when no
        other owner holds it); the number returned."""
        owned = self._owned.pop(owner, [])
        for block in reversed(owned):
            left = self._refs.get(block, 1) - 1
            if left > 0:
                self._refs[block] = left
                continue
            self._refs.pop(block, None)
            if block in self._hash_of:
                self._evictable[block] = None
            else:
                self._free.append(block)
        return len(owned)

    def _evict(self) -> int:
        """The least recently released cached block, its hash forgotten."""
        block, _ = self._evictable.popitem(last=False)
        del self._by_hash[self._hash_of.pop(block)]
        return block
