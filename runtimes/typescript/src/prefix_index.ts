/**
 * Which prompt blocks an instance holds, as an LRU set of block ids: routeforge.artifacts.deciding.prefix_index,
 * line for line. A block id names the block and everything before it, so a prompt can skip only the
 * leading run of its blocks that is held (`match`).
 *
 * Ids are compared as JavaScript map keys of their decimal text: ids up to 2^53 (Mooncake's, the
 * golden cases') are exact; pass larger ones (the Python Dispatcher's 63-bit `prompt_blocks`) as
 * strings or BigInt, since a JSON number above 2^53 loses its low bits when parsed.
 */
export type BlockId = number | string | bigint;

const key = (id: BlockId) => String(id);

/** How many of `ids`' leading blocks `held` has (prefix_index.leading_run). */
function leadingRun(ids: BlockId[], held: { has(k: string): boolean }): number {
  let n = 0;
  for (const id of ids) {
    if (!held.has(key(id))) break;
    n += 1;
  }
  return n;
}

export class BlockLru {
  private blocks = new Map<string, true>(); // insertion order is recency order, oldest first

  constructor(readonly capacityBlocks: number) {
    if (!(capacityBlocks >= 1)) throw new Error(`BlockLru: capacity_blocks must be at least 1, got ${capacityBlocks}`);
  }

  get size(): number {
    return this.blocks.size;
  }

  /** How many of `ids`' leading blocks are held; no recency change. */
  match(ids: BlockId[]): number {
    return leadingRun(ids, this.blocks);
  }

  /** Hold `ids` as the most recently used, evicting the least recently used past the capacity. */
  insert(ids: BlockId[]): void {
    for (const id of ids) {
      const k = key(id);
      if (this.blocks.has(k)) this.blocks.delete(k);
      this.blocks.set(k, true);
    }
    while (this.blocks.size > this.capacityBlocks) {
      this.blocks.delete(this.blocks.keys().next().value as string);
    }
  }
}

/** A router's approximate view of every instance's cache: the blocks of the requests it sent there. */
export class PrefixIndex {
  readonly instances: BlockLru[];

  constructor(capacityBlocks: number[]) {
    this.instances = capacityBlocks.map((c) => new BlockLru(c));
  }

  overlaps(ids: BlockId[]): number[] {
    return this.instances.map((cache) => cache.match(ids));
  }

  record(instance: number, ids: BlockId[]): void {
    this.instances[instance].insert(ids);
  }

  sizes(): number[] {
    return this.instances.map((cache) => cache.size);
  }
}

/** Entries that expire after `ttlS` (prefix_index.TtlIndex: Dynamo's index without KV events). */
export class TtlIndex {
  readonly instances: Map<string, number>[];

  constructor(instances: number, readonly ttlS: number) {
    if (!(ttlS > 0)) throw new Error(`TtlIndex: ttl_s must be positive, got ${ttlS}`);
    this.instances = Array.from({ length: instances }, () => new Map());
  }

  private prune(now: number): void {
    for (const blocks of this.instances) {
      for (const [k, at] of blocks) {
        if (at >= now - this.ttlS) break;
        blocks.delete(k);
      }
    }
  }

  overlaps(ids: BlockId[], now: number): number[] {
    this.prune(now);
    return this.instances.map((blocks) => leadingRun(ids, blocks));
  }

  record(instance: number, ids: BlockId[], now: number): void {
    const blocks = this.instances[instance];
    for (const id of ids) {
      blocks.delete(key(id));
      blocks.set(key(id), now);
    }
  }
}

/** One size bound over all instances, pruned LRU every `intervalS` (prefix_index.GlobalLruIndex: SGLang's tree). */
export class GlobalLruIndex {
  private entries = new Map<string, [number, string]>(); // "instance|block", oldest first
  private held: Set<string>[];
  private lastEviction = 0;

  constructor(instances: number, readonly capacityBlocks: number, readonly intervalS: number) {
    this.held = Array.from({ length: instances }, () => new Set());
  }

  evict(now: number): void {
    if (now - this.lastEviction < this.intervalS) return;
    this.lastEviction = now;
    while (this.entries.size > this.capacityBlocks) {
      const [k, [instance, block]] = this.entries.entries().next().value as [string, [number, string]];
      this.entries.delete(k);
      this.held[instance].delete(block);
    }
  }

  overlaps(ids: BlockId[]): number[] {
    return this.held.map((held) => leadingRun(ids, held));
  }

  record(instance: number, ids: BlockId[]): void {
    for (const id of ids) {
      const k = `${instance}|${key(id)}`;
      this.entries.delete(k);
      this.entries.set(k, [instance, key(id)]);
      this.held[instance].add(key(id));
    }
  }

  sizes(): number[] {
    return this.held.map((h) => h.size);
  }
}
