/**
 * The routers people deploy, as heuristic policies: llm-d's scheduler, Dynamo's KV router and SGLang's
 * cache-aware policy, decision for decision as routeforge.artifacts.deployed_routers (its docstring
 * has the sources and the defaults). Each keeps, in its policy's state, the approximate prefix index
 * of what it sent where, used wherever the instances do not report `cached_prefix_blocks`.
 * Dynamo at a temperature above 0 samples with Python's own generator, which this runtime does not
 * reproduce: such a policy is refused when it is loaded.
 */
import { BlockId, PrefixIndex } from "./prefix_index";

export interface BlockRequest {
  prompt_tokens: number;
  hash_ids?: BlockId[] | null;
  block_tokens?: number | null;
}

export interface CacheInstance {
  running: unknown[];
  waiting: { prompt_tokens: number }[];
  kv_utilization?: number | null;
  kv_capacity_tokens?: number | null;
  active_tokens?: number | null;
  cached_prefix_blocks?: number | null;
}

export interface DeployedState {
  prefixIndex?: PrefixIndex;
}

export const LLM_D_WEIGHTS = { prefix: 3.0, kv_utilization: 2.0, queue: 2.0 };
export const DYNAMO = { overlap_score_weight: 1.0, temperature: 0.0 };
export const SGLANG = { cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5 };
const INDEX_BLOCKS = 1 << 20;

function blocks(request: BlockRequest): [BlockId[], number] {
  return [[...(request.hash_ids ?? [])], Math.trunc(request.block_tokens || 0)];
}

function index(state: DeployedState, instances: CacheInstance[], blockTokens: number, perInstanceKv = true): PrefixIndex {
  if (!state.prefixIndex) {
    state.prefixIndex = new PrefixIndex(instances.map((i) =>
      perInstanceKv && i.kv_capacity_tokens && blockTokens
        ? Math.max(1, Math.floor(Math.trunc(i.kv_capacity_tokens) / blockTokens)) : INDEX_BLOCKS));
  }
  return state.prefixIndex;
}

function overlaps(request: BlockRequest, instances: CacheInstance[], state: DeployedState, precise = true): number[] {
  const [ids, blockTokens] = blocks(request);
  if (!ids.length) return instances.map(() => 0);
  const told = instances.map((i) => i.cached_prefix_blocks);
  if (precise && told.every((t) => t !== undefined && t !== null)) return told.map((t) => Math.trunc(t as number));
  return index(state, instances, blockTokens).overlaps(ids);
}

function remember(request: BlockRequest, instances: CacheInstance[], state: DeployedState, choice: number): number {
  const [ids, blockTokens] = blocks(request);
  if (ids.length) index(state, instances, blockTokens).record(choice, ids);
  return choice;
}

/** Scaled to [0, 1] with the least 1 (all 1 when they are equal). */
function minMax(values: number[]): number[] {
  const low = Math.min(...values), high = Math.max(...values);
  return values.map((v) => (high === low ? 1.0 : (high - v) / (high - low)));
}

/** llm-d's three scores per instance, unweighted, and each instance's cached blocks (deployed_routers._llm_d_signals). */
function llmDSignals(request: BlockRequest, instances: CacheInstance[],
                     state: DeployedState): { prefix: number[]; kv: number[]; queue: number[]; o: number[] } {
  const [ids] = blocks(request);
  const o = overlaps(request, instances, state);
  return {
    prefix: o.map((v) => (ids.length ? v / ids.length : 0.0)),
    kv: instances.map((i) => 1.0 - Math.min(1.0, Math.max(0.0, i.kv_utilization ?? 0.0))),
    queue: minMax(instances.map((i) => i.waiting.length)),
    o,
  };
}

/** llm-d's weighted sum of its prefix, KV-utilisation and queue scores, and each instance's cached blocks. */
function llmDScores(request: BlockRequest, instances: CacheInstance[], parameters: any,
                    state: DeployedState): [number[], number[]] {
  const w = { ...LLM_D_WEIGHTS, ...(parameters.weights ?? {}) };
  const { prefix, kv, queue, o } = llmDSignals(request, instances, state);
  return [prefix.map((p, i) => w.prefix * p + w.kv_utilization * kv[i] + w.queue * queue[i]), o];
}

function highest(score: number[]): number {
  let best = 0;
  score.forEach((s, i) => { if (s > score[best]) best = i; });
  return best;
}

/** llm-d's scheduler: the highest weighted sum of its prefix, KV-utilisation and queue scores. */
export function llmD(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  return remember(request, instances, state, highest(llmDScores(request, instances, parameters, state)[0]));
}

export const LLM_D_TTFT = { ttft_weight: 0.5 };

/** When the first token would come on each instance: the prefill of the waiting prompts and of the
 * request's uncached tokens (deployed_routers.predicted_first_token_s). */
export function predictedFirstTokenS(request: BlockRequest, instances: (CacheInstance & {
  prefill_s_per_token: number })[], overlapsOf: number[]): number[] {
  const [, blockTokens] = blocks(request);
  const prompt = request.prompt_tokens;
  return instances.map((inst, i) => inst.prefill_s_per_token
    * (Math.max(1.0, prompt - Math.min(overlapsOf[i] * blockTokens, prompt - 1.0))
       + inst.waiting.reduce((s, w) => s + w.prompt_tokens, 0)));
}

/** llm-d's scheduler with the predicted first-token scorer beside its three (deployed_routers.llm_d_ttft). */
export function llmDTtft(request: BlockRequest, instances: any[], parameters: any, state: DeployedState): number {
  const [score, o] = llmDScores(request, instances, parameters, state);
  const weight = parameters.ttft_weight ?? LLM_D_TTFT.ttft_weight;
  const soon = minMax(predictedFirstTokenS(request, instances, o));
  return remember(request, instances, state, highest(score.map((s, i) => s + weight * soon[i])));
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
export function scorerFeatures(request: BlockRequest, instances: any[], state: DeployedState): Record<string, number[]> {
  const { prefix, kv, queue, o } = llmDSignals(request, instances, state);
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
  const features = scorerFeatures(request, instances, state);
  let score = instances.map(() => 0.0);
  for (const name of SCORER_FEATURES) {
    const w = Number(weights[name]), values = features[name];
    score = score.map((s, i) => s + w * values[i]);
  }
  return remember(request, instances, state, highest(score));
}

function activeTokens(instance: CacheInstance): number {
  if (instance.active_tokens !== undefined && instance.active_tokens !== null) return instance.active_tokens;
  return instance.waiting.reduce((s, r) => s + r.prompt_tokens, 0);
}

/** Dynamo's KV router at temperature 0: the lowest overlap_score_weight × prefill blocks + decode blocks. */
export function dynamoKv(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const settings = { ...DYNAMO, ...parameters };
  if (Number(settings.temperature) > 0) {
    throw new Error(`dynamo_kv: temperature ${settings.temperature} samples with Python's generator; this runtime runs temperature 0 only`);
  }
  const [, blockTokens] = blocks(request);
  const block = blockTokens || 16;
  const prompt = request.prompt_tokens;
  const cost = overlaps(request, instances, state).map((o, i) =>
    settings.overlap_score_weight * Math.max(0.0, prompt - o * block) / block + (activeTokens(instances[i]) + prompt) / block);
  let best = 0;
  cost.forEach((c, i) => { if (c < cost[best]) best = i; });
  return remember(request, instances, state, best);
}

/** SGLang's cache-aware policy over its own approximate prefix tree. */
export function sglangCacheAware(request: BlockRequest, instances: CacheInstance[], parameters: any, state: DeployedState): number {
  const settings = { ...SGLANG, ...parameters };
  const [ids, blockTokens] = blocks(request);
  const tree = index(state, instances, blockTokens, false); // its own, globally bounded
  const load = instances.map((i) => i.running.length + i.waiting.length);
  const low = Math.min(...load), high = Math.max(...load);
  if (high - low > settings.balance_abs_threshold && high > settings.balance_rel_threshold * low) {
    return remember(request, instances, state, load.indexOf(low));
  }
  if (!ids.length) return load.indexOf(low);
  const o = overlaps(request, instances, state, false);
  let best = 0;
  o.forEach((v, i) => { if (v > o[best] || (v === o[best] && load[i] < load[best])) best = i; });
  if (o[best] / ids.length > settings.cache_threshold) return remember(request, instances, state, best);
  const sizes = tree.sizes();
  let fewest = 0;
  sizes.forEach((s, i) => { if (s < sizes[fewest] || (s === sizes[fewest] && load[i] < load[fewest])) fewest = i; });
  return remember(request, instances, state, fewest);
}

export const DEPLOYED: Record<string, (r: any, i: any[], p: any, s: DeployedState) => number> = {
  llm_d: llmD, llm_d_ttft: llmDTtft, dynamo_kv: dynamoKv, sglang_cache_aware: sglangCacheAware,
  linear_scorer: linearScorer,
};
