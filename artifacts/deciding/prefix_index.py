"""Which prompt blocks a router believes each instance holds, as LRU sets of block ids.

A prompt is a sequence of fixed-size token blocks, each named by an id that stands for the block
*and everything before it* (vLLM's prefix-caching block hashes, Mooncake's `hash_ids`). An engine
reuses only a leading run of cached blocks, so what a request can skip is `match(ids)`: the
number of its first blocks present, stopping at the first absent one.

A router's approximate index of what it has itself sent where: it cannot see evictions, so it
bounds each instance's entry and forgets the oldest (`PrefixIndex`: llm-d's approximate scorer,
LMetric's and the router view's own; `TtlIndex`: Dynamo without KV events, by age; `GlobalLruIndex`:
SGLang's tree, one bound over every instance). The simulator's instances hold their blocks in their
KV pool instead (`training.policies.simulator.kv_pool`), shared with the running requests.

Plain Python (no NumPy): the runtime imports it alone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


def leading_run(ids: Sequence[int], held) -> int:
    """How many of `ids`' leading blocks are in `held` (any container), stopping at the first absent."""
    n = 0
    for block in ids:
        if block not in held:
            break
        n += 1
    return n


class BlockLru:
    """An LRU set of at most `capacity_blocks` block ids."""

    __slots__ = ("capacity_blocks", "_blocks")

    def __init__(self, capacity_blocks: int):
        if not capacity_blocks >= 1:
            raise ValueError(f"BlockLru: capacity_blocks must be at least 1, got {capacity_blocks!r}")
        self.capacity_blocks = int(capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def match(self, ids: Sequence[int]) -> int:
        """How many of `ids`' leading blocks are held (the run a prefill can skip); no recency change."""
        return leading_run(ids, self._blocks)

    def insert(self, ids: Iterable[int]) -> None:
        """Hold `ids` as the most recently used, evicting the least recently used past the capacity."""
        blocks = self._blocks
        for block in ids:
            if block in blocks:
                blocks.move_to_end(block)
            else:
                blocks[block] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)


class PrefixIndex:
    """A router's approximate view of every instance's cache: per instance, the blocks of the
    requests it sent there (`record`), bounded LRU as `BlockLru`. `overlaps(ids)` gives each
    instance's leading match, which the prefix-aware heuristics read as `cached_prefix_blocks`."""

    def __init__(self, capacity_blocks: Sequence[int]):
        self.instances = [BlockLru(c) for c in capacity_blocks]

    def overlaps(self, ids: Sequence[int]) -> list[int]:
        return [cache.match(ids) for cache in self.instances]

    def record(self, instance: int, ids: Sequence[int]) -> None:
        self.instances[instance].insert(ids)

    def sizes(self) -> list[int]:
        """Blocks held per instance (SGLang routes a cache miss to the instance holding the fewest)."""
        return [len(cache) for cache in self.instances]


class TtlIndex:
    """A router's approximate index whose entries expire: per instance, each block id with the time it
    was last sent there; a block older than `ttl_s` is taken as gone (Dynamo's KV router without KV
    events predicts cache state from its routing decisions with a 120 s TTL). `now` is the router's clock."""

    def __init__(self, instances: int, ttl_s: float):
        if not ttl_s > 0:
            raise ValueError(f"TtlIndex: ttl_s must be positive, got {ttl_s!r}")
        self.ttl_s = float(ttl_s)
        self.instances: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(instances)]

    def _prune(self, now: float) -> None:
        for blocks in self.instances:
            while blocks and next(iter(blocks.values())) < now - self.ttl_s:
                blocks.popitem(last=False)

    def overlaps(self, ids: Sequence[int], now: float) -> list[int]:
        self._prune(now)
        return [leading_run(ids, blocks) for blocks in self.instances]

    def record(self, instance: int, ids: Sequence[int], now: float) -> None:
        blocks = self.instances[instance]
        for block in ids:
            blocks.pop(block, None)
            blocks[block] = float(now)


class GlobalLruIndex:
    """A router's approximate tree bounded by one size over all instances, evicted least recently used
    first once every `interval_s` (SGLang's cache-aware router: `max_tree_size` over its tenants, pruned
    every `eviction_interval_secs`). Sizes are in blocks."""

    def __init__(self, instances: int, capacity_blocks: int, interval_s: float):
        if not capacity_blocks >= 1 or not interval_s >= 0:
            raise ValueError(f"GlobalLruIndex: capacity_blocks ≥ 1 and interval_s ≥ 0, got {capacity_blocks!r}, "
                             f"{interval_s!r}")
        self.capacity_blocks, self.interval_s = int(capacity_blocks), float(interval_s)
        self._entries: OrderedDict[tuple[int, int], None] = OrderedDict()  # (instance, block), oldest first
        self._held: list[set[int]] = [set() for _ in range(instances)]
        self._last_eviction = 0.0

    def evict(self, now: float) -> None:
        """Prune to the capacity once `interval_s` has passed since the last pruning."""
        if now - self._last_eviction < self.interval_s:
            return
        self._last_eviction = float(now)
        while len(self._entries) > self.capacity_blocks:
            (instance, block), _ = self._entries.popitem(last=False)
            self._held[instance].discard(block)

    def overlaps(self, ids: Sequence[int]) -> list[int]:
        return [leading_run(ids, held) for held in self._held]

    def record(self, instance: int, ids: Sequence[int]) -> None:
        for block in ids:
            self._entries.pop((instance, block), None)
            self._entries[(instance, block)] = None
            self._held[instance].add(block)

    def sizes(self) -> list[int]:
        return [len(held) for held in self._held]
