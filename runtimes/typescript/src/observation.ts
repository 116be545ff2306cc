/**
 * What a router can see of its fleet: routeforge.artifacts.deciding.observation, decision for decision (its
 * docstring says why and how). A `RouterView` keeps the router's own sends and the latest `/metrics`
 * scrape of each instance; `observe(now)` gives each instance's observation, the form the heuristic
 * policies read. A field outside it throws when read.
 */
import { BlockId, PrefixIndex } from "./prefix_index";

export const OBSERVED = ["max_running", "prefill_s_per_token", "tpot_s", "kv_capacity_tokens", "kv_utilization",
  "running", "waiting", "active_tokens", "queued_prefill_tokens", "prefix_cache_hit_rate", "scrape_age_s"] as const;
const ABSENT = new Set(["cached_prefix_blocks"]);
export const TYPICAL: [number, number] = [512.0, 128.0];

export interface InstanceFacts {
  max_running: number;
  prefill_intercept_s: number;
  prefill_s_per_token: number;
  decode_w_s: number;
  decode_h_s_per_token: number;
  kv_capacity_tokens: number;
}

export interface Scrape {
  at: number;
  running?: number;
  waiting?: number;
  kv_usage?: number;
  prefix_queries?: number;
  prefix_hits?: number;
}

interface Sent {
  rid: string;
  prompt_tokens: number;
  predicted_output_tokens: number;
  sent_at: number;
  prefill_tokens: number;
  predicted_quality: number;
  first_token_at: number | null;
}

/** An observation that throws on a field the router cannot see (absent optional ones read as undefined). */
function guarded(fields: Record<string, unknown>): Record<string, unknown> {
  return new Proxy(fields, {
    get(target, name) {
      if (typeof name !== "string" || name in target || ABSENT.has(name) || name === "toJSON") {
        return (target as any)[name];
      }
      throw new Error(`'${name}' is not in the router's observation (it has ${OBSERVED.join(", ")})`);
    },
  });
}

export class RouterView {
  readonly inFlight: Map<string, Sent>[];
  readonly scrapes: (Scrape | null)[];
  private where = new Map<string, number>();
  private gone: number[];
  private sums = [0, 0, 0];
  private index: PrefixIndex | null;

  constructor(readonly facts: InstanceFacts[], readonly blockTokens = 0) {
    this.inFlight = facts.map(() => new Map());
    this.scrapes = facts.map(() => null);
    this.gone = facts.map(() => 0);
    this.index = blockTokens
      ? new PrefixIndex(facts.map((f) => Math.max(1, Math.floor(Math.trunc(f.kv_capacity_tokens) / blockTokens)))) : null;
  }

  get typical(): [number, number] {
    const [prompt, output, n] = this.sums;
    return n ? [prompt / n, output / n] : TYPICAL;
  }

  sent(instance: number, rid: string | number, promptTokens: number, predictedOutputTokens: number, now: number,
       hashIds: BlockId[] = [], predictedQuality = 0): void {
    let prefill = Math.trunc(promptTokens);
    if (this.index && hashIds.length) {
      const cached = this.index.overlaps(hashIds)[instance] * this.blockTokens;
      prefill = Math.max(1, prefill - Math.min(cached, prefill - 1));
      this.index.record(instance, hashIds);
    }
    const id = String(rid);
    this.inFlight[instance].set(id, { rid: id, prompt_tokens: Math.trunc(promptTokens),
      predicted_output_tokens: predictedOutputTokens, sent_at: now, prefill_tokens: prefill,
      predicted_quality: Number.isFinite(predictedQuality) ? predictedQuality : 0, first_token_at: null });
    this.where.set(id, instance);
    this.sums[0] += promptTokens;
    this.sums[1] += predictedOutputTokens;
    this.sums[2] += 1;
  }

  firstToken(rid: string | number, at: number): void {
    const instance = this.where.get(String(rid));
    const sent = instance === undefined ? undefined : this.inFlight[instance].get(String(rid));
    if (sent) sent.first_token_at = at;
  }

  finished(rid: string | number): void {
    const id = String(rid);
    const instance = this.where.get(id);
    if (instance === undefined) return;
    this.where.delete(id);
    const sent = this.inFlight[instance].get(id);
    this.inFlight[instance].delete(id);
    const scrape = this.scrapes[instance];
    if (sent && scrape && sent.sent_at <= scrape.at) this.gone[instance] += 1;
  }

  scraped(instance: number, scrape: Scrape): void {
    this.scrapes[instance] = scrape;
    this.gone[instance] = 0;
    const flights = this.inFlight[instance];
    const before = [...flights.values()].filter((s) => s.sent_at <= scrape.at).map((s) => s.rid);
    const extra = before.length - Math.round((scrape.running ?? 0) + (scrape.waiting ?? 0));
    for (const rid of before.slice(0, Math.max(0, extra))) {
      this.where.delete(rid);
      flights.delete(rid);
    }
  }

  private counts(i: number, now: number): [Sent[], number, number, number] {
    const scrape = this.scrapes[i] ?? { at: now };
    const all = [...this.inFlight[i].values()];
    const streaming = all.filter((s) => s.first_token_at !== null);
    const flights = [...streaming, ...all.filter((s) => s.first_token_at === null)];
    const before = flights.filter((s) => s.sent_at <= scrape.at).length;
    const running = Math.round(scrape.running ?? 0), waiting = Math.round(scrape.waiting ?? 0);
    const others = Math.max(0, running + waiting - before - this.gone[i]);
    const stillRunning = Math.max(0, running - this.gone[i]);
    let ownRunning = Math.min(before, stillRunning);
    const othersRunning = Math.min(others, stillRunning - ownRunning);
    ownRunning = Math.max(streaming.length, ownRunning);
    return [flights, ownRunning, othersRunning, others - othersRunning];
  }

  outstanding(now = 0): number[] {
    return this.facts.map((_, i) => {
      const [flights, , othersRunning, othersWaiting] = this.counts(i, now);
      return flights.length + othersRunning + othersWaiting;
    });
  }

  observe(now: number): Record<string, any>[] {
    return this.facts.map((facts, i) => {
      const scrape = this.scrapes[i] ?? { at: now };
      const kv = scrape.kv_usage ?? 0;
      const tpot = facts.decode_w_s + facts.decode_h_s_per_token * kv * facts.kv_capacity_tokens;
      const [flights, ownRunning, othersRunning, othersWaiting] = this.counts(i, now);
      const [prompt, output] = this.typical;
      const running: any[] = [], waiting: any[] = [];
      let active = 0.0, queued = 0.0;
      flights.forEach((s, k) => {
        if (s.first_token_at === null) queued += s.prefill_tokens;
        if (k < ownRunning) {
          const started = s.first_token_at !== null ? s.first_token_at
            : s.sent_at + facts.prefill_intercept_s + facts.prefill_s_per_token * s.prefill_tokens;
          const generated = Math.min(Math.max(0, s.predicted_output_tokens - 1),
            (s.first_token_at !== null ? 1.0 : 0.0) + Math.max(0, now - started) / tpot);
          running.push({ prompt_tokens: s.prompt_tokens, predicted_output_tokens: s.predicted_output_tokens,
            generated_tokens: generated, sent_at: s.sent_at, predicted_quality: s.predicted_quality });
          active += s.prompt_tokens + generated;
        } else {
          waiting.push({ prompt_tokens: s.prompt_tokens, predicted_output_tokens: s.predicted_output_tokens,
            sent_at: s.sent_at, predicted_quality: s.predicted_quality });
          active += s.prompt_tokens;
        }
      });
      // another's requests were there by the scrape (their age at least its age); their quality unknown
      for (let k = 0; k < othersRunning; k++) {
        running.push({ prompt_tokens: prompt, predicted_output_tokens: output, generated_tokens: output / 2,
          sent_at: scrape.at, predicted_quality: 0 });
      }
      for (let k = 0; k < othersWaiting; k++) {
        waiting.push({ prompt_tokens: prompt, predicted_output_tokens: output, sent_at: scrape.at, predicted_quality: 0 });
      }
      active += othersRunning * (prompt + output / 2) + othersWaiting * prompt;
      queued += othersWaiting * prompt;
      const queries = scrape.prefix_queries ?? 0;
      return guarded({
        max_running: facts.max_running, prefill_s_per_token: facts.prefill_s_per_token, tpot_s: tpot,
        kv_capacity_tokens: facts.kv_capacity_tokens, kv_utilization: Math.min(1.0, kv), running, waiting,
        active_tokens: active, queued_prefill_tokens: queued,
        prefix_cache_hit_rate: queries > 0 ? (scrape.prefix_hits ?? 0) / queries : 0.0,
        scrape_age_s: Math.max(0, now - scrape.at),
      });
    });
  }
}
