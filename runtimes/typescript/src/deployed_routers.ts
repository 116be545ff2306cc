/**
 * The routers people deploy, as heuristic policies: llm-d's scheduler (`llm_d`, `llm_d_affinity`),
 * Dynamo's KV router, SGLang's cache-aware router and LMetric, decision for decision as
 * routeforge.artifacts.deciding.deployed_routers (its docstring has the sources and the defaults). Each keeps,
 * in its policy's state, the prefix index its original keeps of what it sent where, used wherever the
 * instances do not report `cached_prefix_blocks`; ties are broken by the same splitmix64 stream.
 * Dynamo at a temperature above 0 samples with Python's own generator, which this runtime does not
 * reproduce: such a policy is refused when it is loaded.
 */
import { TreeEnsemble } from "./latency";
import { BlockId, GlobalLruIndex, PrefixIndex, TtlIndex } from "./prefix_index";

export interface BlockRequest {
  prompt_tokens: number;
  hash_ids?: BlockId[] | null;
  block_tokens?: number | null;
  now_s?: number | null;
}

export interface CacheInstance {
  running: unknown[];
  waiting: { prompt_tokens: number }[];
  kv_utilization?: number | null;
  kv_capacity_tokens?: number | null;
  active_tokens?: number | null;
  queued_prefill_tokens?: number | null;
  cached_prefix_blocks?: number | null;
}

export interface DeployedState {
  splitmix64?: bigint;
  llmDIndex?: PrefixIndex;
  lmetricIndex?: PrefixIndex;
  dynamoIndex?: TtlIndex;
  sglangTree?: GlobalLruIndex;
  ensemble?: TreeEnsemble;
}

export const LLM_D_WEIGHTS = { prefix: 3.0, kv_utilization: 2.0, queue: 2.0 };
export const LLM_D_PREFIX = { block_size_tokens: 16, max_prefix_blocks: 256, lru_capacity_per_server: 31_250 };
export const LLM_D_AFFINITY = { affinity_threshold: 0.8, max_ttft_penalty_ms: 18_000.0,
  peak_prefill_tokens_per_second: 15_928.0, queue_threshold_tokens: 4_194_304 };
export const DYNAMO = { overlap_score_weight: 1.0, temperature: 0.0, ttl_s: 120.0 };
export const SGLANG = { cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5,
  max_tree_size_tokens: 1 << 24, eviction_interval_s: 120.0 };
const MASK64 = (1n << 64n) - 1n;

/** One of `ties` at random from the splitmix64 stream in `state` (deployed_routers.pick_among). */
export function pickAmong(state: DeployedState, ties: number[], seed = 0): number {
  if (ties.length === 1) return ties[0];
  const x = ((state.splitmix64 ?? (BigInt(Math.trunc(seed)) & MASK64)) + 0x9E3779B97F4A7C15n) & MASK64;
  state.splitmix64 = x;
  let z = ((x ^ (x >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & MASK64;
  return ties[Number((z ^ (z >> 31n)) % BigInt(ties.length))];
}

/** The highest score, ties at random (llm-d's max-score picker). */
function highest(score: number[], state: DeployedState, seed: number): number {
  const top = Math.max(...score);
  return pickAmong(state, score.map((_, i) => i).filter((i) => score[i] === top), seed);
}

function blocks(request: BlockRequest): [BlockId[], number] {
  return [[...(request.hash_ids ?? [])], Math.trunc(request.block_tokens || 0)];
}

function told(instances: CacheInstance[]): number[] | null {
  const t = instances.map((i) => i.cached_prefix_blocks);
  return t.every((v) => v !== undefined && v !== null) ? t.map((v) => Math.trunc(v as number)) : null;
}

function llmDLimits(blockTokens: number, parameters: any): [number, number] {
  const s = { ...LLM_D_PREFIX, ...parameters };
  const tokens = Math.trunc(s.block_size_tokens), bt = Math.max(1, blockTokens);
  return [Math.max(1, Math.ceil(Math.trunc(s.max_prefix_blocks) * tokens / bt)),
    Math.max(1, Math.floor(Math.trunc(s.lru_capacity_per_server) * tokens / bt))];
}

/** Each instance's leading blocks (KV events' where told, else llm-d's approximate index) and the blocks considered. */
function llmDOverlaps(request: BlockRequest, instances: CacheInstance[], state: DeployedState, parameters: any): [number[], number] {
  const [all, blockTokens] = blocks(request);
  if (!all.length) return [instances.map(() => 0), 0];
  const [limit, capacity] = llmDLimits(blockTokens, parameters);
  const ids = all.slice(0, limit);
  const t = told(instances);
  if (t) return [t.map((v) => Math.min(v, ids.length)), ids.length];
  if (!state.llmDIndex) state.llmDIndex = new PrefixIndex(instances.map(() => capacity));
  return [state.llmDIndex.overlaps(ids), ids.length];
}

function rememberLlmD(request: BlockRequest, state: DeployedState, parameters: any, choice: number): number {
  const [ids, blockTokens] = blocks(request);
  if (ids.length && state.llmDIndex) state.llmDIndex.record(choice, ids.slice(0, llmDLimits(blockTokens, parameters)[0]));
  return choice;
}

/** Scaled to [0, 1] with the least 1 (all 1 when they are equal). */
function minMax(values: number[]): number[] {
  const low = Math.min(...values), high = Math.max(...values);
  return values.map((v) => (high === low ? 1.0 : (high - v) / (high - low)));
}

function llmDSignals(request: BlockRequest, instances: CacheInstance[], state: DeployedState,
                     parameters: any): { prefix: number[]; kv: number[]; queue: number[]; o: number[] } {
  const [o, considered] = llmDOverlaps(request, instances, state, parameters);
  return {
    prefix: o.map((v) => (considered ? v / considered : 0.0)),
    kv: instances.map((i) => 1.0 - Math.min(1.0, Math.max(0.0, i.kv_utilization ?? 0.0))),
    queue: minMax(instances.map((i) => i.waiting.length)),
    o,
  };
}

function llmDScores(request: BlockRequest, instances: CacheInstance[], parameters: any,
                    state: DeployedState): [number[], number[]] {
  const w = { ...LLM_D_WEIGHTS, ...(parameters.weights ?? {}) };
  const { prefix, kv, queue, o } = llmDSignals(request, instances, state, parameters);
  return [prefix.map((p, i) => w.prefix * p + w.kv_utilization * kv[i] + w.queue * queue[i]), o];
}

const seedOf = (parameters: any) => Math.trunc(parameters.seed ?? 0);

/** llm-d's scheduler: the highest weighted sum of its prefix, KV-utilisation and queue scores. */
export function llmD(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  return rememberLlmD(request, state, parameters, highest(llmDScores(request, instances, parameters, state)[0], state, seedOf(parameters)));
}

/** The prompt tokens each instance would compute, given its cached leading blocks (at least one). */
function uncached(request: BlockRequest, o: number[]): number[] {
  const [, blockTokens] = blocks(request);
  const prompt = request.prompt_tokens;
  return o.map((v) => Math.max(1.0, prompt - Math.min(v * blockTokens, prompt - 1.0)));
}

function queuedPrefill(instance: CacheInstance): number {
  const q = instance.queued_prefill_tokens;
  return q !== undefined && q !== null ? q : instance.waiting.reduce((s, w) => s + w.prompt_tokens, 0);
}

export const LLM_D_TTFT = { ttft_weight: 0.5 };

/** When the first token would come on each instance (deployed_routers.predicted_first_token_s). */
export function predictedFirstTokenS(request: BlockRequest, instances: (CacheInstance & {
  prefill_s_per_token: number })[], overlapsOf: number[]): number[] {
  const u = uncached(request, overlapsOf);
  return instances.map((inst, i) => inst.prefill_s_per_token * (u[i] + queuedPrefill(inst)));
}

/** llm-d's scheduler with the predicted first-token scorer beside its three (deployed_routers.llm_d_ttft). */
export function llmDTtft(request: BlockRequest, instances: any[], parameters: any, state: DeployedState): number {
  const [score, o] = llmDScores(request, instances, parameters, state);
  const weight = parameters.ttft_weight ?? LLM_D_TTFT.ttft_weight;
  const soon = minMax(predictedFirstTokenS(request, instances, o));
  return rememberLlmD(request, state, parameters, highest(score.map((s, i) => s + weight * soon[i]), state, seedOf(parameters)));
}

/** linear_scorer's features, summed in this order (deployed_routers.SCORER_FEATURES). */
export const SCORER_FEATURES = ["prefix", "kv_free", "queue", "first_token", "first_token_s", "running", "waiting",
  "prefill_speed", "decode_speed"] as const;
export const SCORER_DEFAULTS: Record<string, number> = {
  prefix: LLM_D_WEIGHTS.prefix, kv_free: LLM_D_WEIGHTS.kv_utilization, queue: LLM_D_WEIGHTS.queue,
  first_token: LLM_D_TTFT.ttft_weight, first_token_s: 0.0, running: 0.0, waiting: 0.0, prefill_speed: 0.0,
  decode_speed: 0.0,
};

/** Each feature per instance, larger where the instance is the better choice (deployed_routers.scorer_features). */
export function scorerFeatures(request: BlockRequest, instances: any[], state: DeployedState, parameters: any = {}): Record<string, number[]> {
  const { prefix, kv, queue, o } = llmDSignals(request, instances, state, parameters);
  const first = predictedFirstTokenS(request, instances, o);
  const prefill = instances.map((i) => Number(i.prefill_s_per_token));
  const tpot = instances.map((i) => Number(i.tpot_s));
  const fastPrefill = Math.min(...prefill), fastTpot = Math.min(...tpot);
  const slots = (i: any) => Math.max(1, Math.trunc(i.max_running));
  return {
    prefix, kv_free: kv, queue,
    first_token: minMax(first),
    first_token_s: first.map((t) => -t),
    running: instances.map((i) => -i.running.length / slots(i)),
    waiting: instances.map((i) => -i.waiting.length / slots(i)),
    prefill_speed: prefill.map((p) => (p > 0 ? fastPrefill / p : 1.0)),
    decode_speed: tpot.map((t) => (t > 0 ? fastTpot / t : 1.0)),
  };
}

/** The highest Σ weight × feature (deployed_routers.linear_scorer); a weight naming no feature is refused. */
export function linearScorer(request: BlockRequest, instances: any[], parameters: any, state: DeployedState): number {
  const given: Record<string, number> = parameters.weights ?? {};
  const unknown = Object.keys(given).filter((k) => !(SCORER_FEATURES as readonly string[]).includes(k)).sort();
  if (unknown.length) throw new Error(`linear_scorer: weights ${JSON.stringify(unknown)} name no feature`);
  const weights = { ...SCORER_DEFAULTS, ...given };
  const features = scorerFeatures(request, instances, state, parameters);
  let score = instances.map(() => 0.0);
  for (const name of SCORER_FEATURES) {
    const w = Number(weights[name]), values = features[name];
    score = score.map((s, i) => s + w * values[i]);
  }
  return rememberLlmD(request, state, parameters, highest(score, state, seedOf(parameters)));
}

/** llm-d's optimized baseline: sticky until saturated, token load among the candidates (deployed_routers.llm_d_affinity). */
export function llmDAffinity(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const s = { ...LLM_D_AFFINITY, ...parameters };
  const [, blockTokens] = blocks(request);
  const [o] = llmDOverlaps(request, instances, state, parameters);
  const u = uncached(request, o);
  const queued = instances.map(queuedPrefill);
  const threshold = Number(s.queue_threshold_tokens);
  const score = queued.map((q, i) => 1.0 - Math.min(1.0, (q + u[i]) / threshold));
  const full = blockTokens ? Math.floor(Math.trunc(request.prompt_tokens) / blockTokens) : 0;
  const sticky = o.map((v) => full > 0 && v / full >= Number(s.affinity_threshold));
  let candidates = instances.map((_, i) => i);
  if (sticky.some((x) => x) && Number(s.affinity_threshold) > 0) {
    const ttft = queued.map((q) => (q / Number(s.peak_prefill_tokens_per_second)) * 1000.0);
    const bestSticky = Math.min(...ttft.filter((_, i) => sticky[i]));
    const others = ttft.filter((_, i) => !sticky[i]);
    const penalty = Number(s.max_ttft_penalty_ms);
    if (!others.length || penalty === 0 || bestSticky - Math.min(...others) <= penalty) {
      candidates = candidates.filter((i) => sticky[i]);
    }
  }
  const top = Math.max(...candidates.map((i) => score[i]));
  const choice = pickAmong(state, candidates.filter((i) => score[i] === top), seedOf(parameters));
  return rememberLlmD(request, state, parameters, choice);
}

/** LMetric: the lowest uncached prefill tokens × batch size (deployed_routers.lmetric). */
export function lmetric(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const [ids, blockTokens] = blocks(request);
  const t = told(instances);
  if (ids.length && !t && !state.lmetricIndex) {
    state.lmetricIndex = new PrefixIndex(instances.map((i) => Math.max(1, Math.floor(Math.trunc(i.kv_capacity_tokens ?? 0) / blockTokens))));
  }
  const o = ids.length ? (t ?? (state.lmetricIndex as PrefixIndex).overlaps(ids)) : instances.map(() => 0);
  const u = uncached(request, o);
  const score = u.map((v, i) => v * instances[i].running.length);
  const low = Math.min(...score);
  const tied = score.map((_, i) => i).filter((i) => score[i] === low);
  const fewest = Math.min(...tied.map((i) => u[i]));
  const choice = pickAmong(state, tied.filter((i) => u[i] === fewest), seedOf(parameters));
  if (ids.length && state.lmetricIndex) state.lmetricIndex.record(choice, ids);
  return choice;
}

/** llm-d's predicted-latency scorer: the lowest TTFT its model predicts (deployed_routers.llm_d_predicted_latency). */
export function llmDPredictedLatency(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  if (!state.ensemble) {
    if (!parameters.model) throw new Error("llm_d_predicted_latency: parameters.model, its trained TTFT model, is required");
    state.ensemble = TreeEnsemble.fromModel(parameters.model);
  }
  const [o, considered] = llmDOverlaps(request, instances, state, parameters);
  const predicted = instances.map((inst, k) => (state.ensemble as TreeEnsemble).predict([
    Number(inst.kv_utilization ?? 0), Number(request.prompt_tokens), inst.waiting.length, inst.running.length,
    considered ? o[k] / considered : 0.0, Number(inst.active_tokens ?? 0)]));
  const low = Math.min(...predicted);
  const choice = pickAmong(state, predicted.map((_, k) => k).filter((k) => predicted[k] === low), seedOf(parameters));
  return rememberLlmD(request, state, parameters, choice);
}

/** Dynamo's KV router at temperature 0 (deployed_routers.dynamo_kv). */
export function dynamoKv(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const s = { ...DYNAMO, ...parameters };
  if (Number(s.temperature) > 0) {
    throw new Error(`dynamo_kv: temperature ${s.temperature} samples with Python's generator; this runtime runs temperature 0 only`);
  }
  const [ids, blockTokens] = blocks(request);
  const block = blockTokens || 16;
  const now = Number(request.now_s ?? 0) || 0;
  const t = told(instances);
  if (ids.length && !t && !state.dynamoIndex) state.dynamoIndex = new TtlIndex(instances.length, Number(s.ttl_s));
  const o = ids.length ? (t ?? (state.dynamoIndex as TtlIndex).overlaps(ids, now)) : instances.map(() => 0);
  const n = uncached(request, o);
  const cost = instances.map((inst, i) => s.overlap_score_weight * (queuedPrefill(inst) + n[i]) / block
    + (Number(inst.active_tokens ?? 0) + n[i]) / block);
  let best = 0;
  cost.forEach((c, i) => { if (c < cost[best]) best = i; });
  if (ids.length && state.dynamoIndex) state.dynamoIndex.record(best, ids, now);
  return best;
}

/** SGLang's cache-aware policy over its own bounded, aging tree (deployed_routers.sglang_cache_aware). */
export function sglangCacheAware(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const s = { ...SGLANG, ...parameters };
  const [ids, blockTokens] = blocks(request);
  if (!state.sglangTree) {
    state.sglangTree = new GlobalLruIndex(instances.length,
      Math.max(1, Math.floor(Math.trunc(s.max_tree_size_tokens) / Math.max(1, blockTokens))), Number(s.eviction_interval_s));
  }
  const tree = state.sglangTree;
  tree.evict(Number(request.now_s ?? 0) || 0);
  const load = instances.map((i) => i.running.length + i.waiting.length);
  const low = Math.min(...load), high = Math.max(...load);
  const sent = (choice: number) => { if (ids.length) tree.record(choice, ids); return choice; };
  if (high - low > s.balance_abs_threshold && high > s.balance_rel_threshold * low) return sent(load.indexOf(low));
  if (!ids.length) return load.indexOf(low);
  const o = tree.overlaps(ids);
  let best = 0;
  o.forEach((v, i) => { if (v > o[best] || (v === o[best] && load[i] < load[best])) best = i; });
  if (o[best] / ids.length > s.cache_threshold) return sent(best);
  const sizes = tree.sizes();
  let fewest = 0;
  sizes.forEach((v, i) => { if (v < sizes[fewest] || (v === sizes[fewest] && load[i] < load[fewest])) fewest = i; });
  return sent(fewest);
}

export const DEPLOYED: Record<string, (r: any, i: any[], p: any, s: DeployedState) => number> = {
  llm_d: llmD, llm_d_ttft: llmDTtft, llm_d_affinity: llmDAffinity, llm_d_predicted_latency: llmDPredictedLatency,
  lmetric, dynamo_kv: dynamoKv,
  sglang_cache_aware: sglangCacheAware, linear_scorer: linearScorer,
};
