/**
 * Which prompt blocks an instance holds, as an LRU set of block ids: routeforge.artifacts.prefix_index,
 * line for line. A block id names the block and everything before it, so a prompt can skip only the
 * leading run of its blocks that is held (`match`).
 *
 * Ids are compared as JavaScript map keys of their decimal text: ids up to 2^53 (Mooncake's, the
 * golden cases') are exact; pass larger ones (the Python Dispatcher's 63-bit `prompt_blocks`) as
 * strings or BigInt, since a JSON number above 2^53 loses its low bits when parsed.
 */
export type BlockId = number | string | bigint;

const key = (id: BlockId) => String(id);

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
    let n = 0;
    for (const id of ids) {
      if (!this.blocks.has(key(id))) break;
      n += 1;
    }
    return n;
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
