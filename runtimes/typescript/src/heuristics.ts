/**
 * The heuristic routing policies (docs/bundle-format.md, "heuristic policies"), from their
 * policy.json: `route(request, instances)` gives the instance index, as the Python runtime's
 * `HeuristicPolicy.route` and the simulator that evaluated them decide.
 */
import { readFileSync } from "fs";
import { join } from "path";
import { roundHalfEven } from "./numeric";
import { DEPLOYED, DeployedState } from "./deployed_routers";
import { BlockId } from "./prefix_index";

export interface Request {
  prompt_tokens: number;
  predicted_output_tokens: number[];
  predicted_quality?: (number | null)[];
  hash_ids?: BlockId[] | null; // the prompt's block ids (the deployed routers read them)
  block_tokens?: number | null;
}

export interface Instance {
  max_running: number;
  tpot_s: number;
  prefill_s_per_token: number;
  running: { predicted_output_tokens: number; generated_tokens: number }[];
  waiting: { prompt_tokens: number; predicted_output_tokens: number }[];
  kv_utilization?: number | null; // what the deployed routers read besides (deployed_routers.ts)
  kv_capacity_tokens?: number | null;
  active_tokens?: number | null;
  cached_prefix_blocks?: number | null;
}

const argmin = (xs: number[]) => xs.reduce((best, v, i) => (v < xs[best] ? i : best), 0);

function unit(xs: number[]): number[] {
  const lo = Math.min(...xs), span = Math.max(...xs) - lo;
  return span > 0 ? xs.map((v) => (v - lo) / span) : xs.map(() => 0);
}


type Decide = (request: any, instances: any[], parameters: any, state: any) => number;
const EXTENSIONS: Record<string, Decide> = {};

/** A heuristic of one's own, the twin of a Python module's `@HEURISTICS.register(name)` (its function
 * takes the same request, instances, parameters and state): every HeuristicPolicy knows it from then on. */
export function registerHeuristic(name: string, decide: Decide): void {
  if (name in DEPLOYED || BUILT_IN.includes(name)) throw new Error(`heuristic ${name} is built in`);
  EXTENSIONS[name] = decide;
}

const BUILT_IN = ["round_robin", "join_shortest_queue", "least_work_left", "earliest_available", "quality_only",
  "route_balance", "quality_within_slo"];

/** Every heuristic this runtime can run (the parity tests compare it with the Python registry's). */
export function knownHeuristics(): string[] {
  return [...BUILT_IN, ...Object.keys(DEPLOYED), ...Object.keys(EXTENSIONS)];
}

export class HeuristicPolicy {
  private next = 0;
  private state: DeployedState = {}; // a deployed router's own prefix index

  constructor(readonly spec: any) {
    const known = knownHeuristics();
    if (spec.kind !== "heuristic" || !known.includes(spec.heuristic)) {
      throw new Error(`policy.json: heuristic must be one of ${known.join(", ")}, got ${spec.heuristic}`);
    }
    if (spec.heuristic === "dynamo_kv" && Number(spec.parameters?.temperature ?? 0) > 0) {
      throw new Error(`policy.json: dynamo_kv at temperature ${spec.parameters.temperature} samples with Python's generator; `
        + "this runtime runs temperature 0 only");
    }
  }

  static load(folder: string): HeuristicPolicy {
    return new HeuristicPolicy(JSON.parse(readFileSync(join(folder, "policy.json"), "utf8")));
  }

  route(request: Request, instances: Instance[]): number {
    const m = this.spec.instances ?? instances.length;
    if (instances.length !== m) throw new Error(`${instances.length} instances given, the policy was exported for ${m}`);
    const name: string = this.spec.heuristic, params = this.spec.parameters ?? {};
    if (name === "round_robin") return this.next++ % m;
    if (name in DEPLOYED) return DEPLOYED[name](request, instances, params, this.state);
    if (name in EXTENSIONS) return EXTENSIONS[name](request, instances, params, this.state);
    const outstanding = instances.map((i) => i.running.length + i.waiting.length);
    if (name === "join_shortest_queue") {
      const among: number[] = params.among ?? outstanding.map((_, i) => i);
      return among.reduce((best, i) => (outstanding[i] < outstanding[best] ? i : best), among[0]);
    }
    const quality = (request.predicted_quality ?? new Array(m).fill(null)).map((q) => (q == null || Number.isNaN(q) ? 0 : q));
    if (name === "quality_only") {
      return quality.reduce((best, q, i) => (q > quality[best] || (q === quality[best] && outstanding[i] < outstanding[best]) ? i : best), 0);
    }
    const est = request.predicted_output_tokens;
    const free = instances.map((i) => i.running.length < i.max_running && i.waiting.length === 0);
    if (name === "route_balance") {
      const pending = instances.map((i) =>
        i.running.reduce((s, r) => s + Math.max(0, r.predicted_output_tokens - r.generated_tokens), 0)
        + i.waiting.reduce((s, r) => s + r.predicted_output_tokens, 0));
      const latency = instances.map((inst, i) =>
        (free[i] ? est[i] : pending[i] / Math.max(1, inst.running.length) + est[i]) * inst.tpot_s
        + inst.prefill_s_per_token * request.prompt_tokens);
      const prices: number[] | null = params.price_per_token ?? null;
      const cost = prices ? prices.map((p, i) => p * (request.prompt_tokens + est[i])) : new Array(m).fill(0);
      const [wq, wl, wc] = params.weights ?? [1 / 3, 1 / 3, 1 / 3];
      const q = params.quality_scale === "absolute" ? quality : unit(quality);
      const l = unit(latency), c = unit(cost);
      const score = q.map((v, i) => roundHalfEven(wq * v - wl * l[i] - wc * c[i], 12));
      // the highest score; equal scores to the lower latency, then the first
      return score.map((_, i) => i).sort((a, b) => (score[b] - score[a]) || (latency[a] - latency[b]) || (a - b))[0];
    }
    const work = instances.map((inst) => {
      const remaining = Math.max(0, ...inst.running.map((r) => Math.max(0, r.predicted_output_tokens - r.generated_tokens)));
      const waiting = inst.waiting.reduce((s, r) =>
        s + inst.prefill_s_per_token * r.prompt_tokens + (r.predicted_output_tokens * inst.tpot_s) / Math.max(1, inst.max_running), 0);
      return remaining * inst.tpot_s + waiting;
    });
    if (name === "least_work_left") return argmin(work);
    if (name === "quality_within_slo") {
      const scale = params.slo_scale ?? 5.0;
      const alone = instances.map((inst, i) => inst.prefill_s_per_token * request.prompt_tokens + est[i] * inst.tpot_s);
      const e2e = instances.map((_, i) => (free[i] ? 0 : work[i]) + alone[i]);
      const bound = scale * Math.min(...alone);
      const within = e2e.map((_, i) => i).filter((i) => e2e[i] <= bound);
      if (!within.length) return argmin(e2e);
      // the highest quality; ties to the sooner, then the first
      return within.reduce((best, i) => (quality[i] > quality[best] || (quality[i] === quality[best] && e2e[i] < e2e[best]) ? i : best));
    }
    return argmin(instances.map((_, i) => (free[i] ? 0 : work[i])));
  }
}

const STAT_KEYS = ["arrival_cv", "prompt_mean", "output_mean", "load", "prefix_sharing"];
const MIN_SPREAD = 0.1;
const log1p = (v: number) => Math.log1p(Math.max(0, v));

/**
 * The policy (its bare name; the component is `policy--<name>`) the training run found best for traffic like `stats` on `objective`, from
 * routing_simulator/simulator.json's `recommendations`: the nearest entry by Euclidean distance over
 * the statistics both sides have, each on a log1p scale divided by its spread over the table
 * (population standard deviation, at least 0.1).
 */
export function recommend(table: any[], stats: Record<string, number>, objective = "goodput"): string {
  const entries = table.filter((e) => objective in (e.best ?? {}));
  if (!entries.length) throw new Error(`no recommendation for objective ${objective}`);
  const used = STAT_KEYS.filter((k) => k in stats && entries.every((e) => k in e.stats));
  if (!used.length) throw new Error(`traffic statistics: give at least one of ${STAT_KEYS.join(", ")}`);
  const spread: Record<string, number> = {};
  for (const k of used) {
    const values = entries.map((e) => log1p(e.stats[k]));
    const mean = values.reduce((s, v) => s + v, 0) / values.length;
    spread[k] = Math.max(MIN_SPREAD, Math.sqrt(values.reduce((s, v) => s + (v - mean) ** 2, 0) / values.length));
  }
  const distance = (e: any) => Math.sqrt(used.reduce((s, k) => s + ((log1p(stats[k]) - log1p(e.stats[k])) / spread[k]) ** 2, 0));
  let nearest = entries[0];
  for (const e of entries) if (distance(e) < distance(nearest)) nearest = e;
  return nearest.best[objective];
}
