"""One serving instance's KV-cache memory as vLLM V1 holds it: a single pool shared by the running
requests and the prefix cache.

- A running request holds its *private* tokens (what is not a full prompt block with a known id: its
  prompt's tail, its generated tokens) and references the full prompt blocks it has computed or hit.
- A full prompt block is stored once however many running requests reference it (`refs`), and stays
  cached once none does: a freed cached block sits in the free queue (`free`), where a later request
  may hit it again, until its memory is needed.
- Memory is allocated from free space first, then by evicting the free queue's front. A request's
  blocks enter the free queue tail first (vLLM's `free_blocks(reversed(...))`), so its shared head
  outlives its tail; across requests, the earliest freed goes first (least recently used).
- vLLM's `kv_cache_usage_perc` counts the memory held by running requests (`active`); free cached
  blocks count as free.

The instance keeps the private token count (it grows every decode step, in closed form); the pool
keeps the blocks. Sizes are tokens; a block is `block_tokens` of them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class KvPool:
    __slots__ = ("capacity", "block_tokens", "refs", "free")

    def __init__(self, capacity_tokens: int, block_tokens: int = 0):
        self.capacity, self.block_tokens = int(capacity_tokens), int(block_tokens)
        self.refs: dict[int, int] = {}  # block id -> running requests referencing it
        self.free: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced: evicted from the front

    def copy(self) -> KvPool:
        pool = KvPool(self.capacity, self.block_tokens)
        pool.refs, pool.free = dict(self.refs), OrderedDict(self.free)
        return pool

    def match(self, ids: Sequence[int]) -> int:
        """How many of `ids`' leading blocks are held (referenced or cached free)."""
        n = 0
        for block in ids:
            if block not in self.refs and block not in self.free:
                break
            n += 1
        return n

    def referenced_tokens(self) -> int:
        return self.block_tokens * len(self.refs)

    def room(self, private: int) -> int:
        """Tokens that can still be allocated with `private` private tokens held (free cached blocks
        are evictable, so they count as room)."""
        return self.capacity - private - self.block_tokens * len(self.refs)

    def reference(self, block: int) -> bool:
        """Reference `block` for one more running request; False when it was not held (it is added)."""
        held = block in self.refs or block in self.free
        self.free.pop(block, None)
        self.refs[block] = self.refs.get(block, 0) + 1
        return held

    def release(self, ids: Sequence[int]) -> None:
        """One running request drops its references to `ids` (its leading blocks); those no request
        references any more enter the free queue, the tail first."""
        for block in reversed(ids):
            left = self.refs.get(block, 0) - 1
            if left > 0:
                self.refs[block] = left
            else:
                self.refs.pop(block, None)
                self.free[block] = None

    def fit(self, private: int) -> None:
        """Evict free cached blocks, front first, until everything held fits the capacity."""
        while self.free and private + self.block_tokens * (len(self.refs) + len(self.free)) > self.capacity:
            self.free.popitem(last=False)
