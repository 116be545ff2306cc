/**
 * The bundle's router (docs/bundle-format.md, "router"): per-model quality estimates for embedded
 * prompts and the model each goes to. Arithmetic is float64 throughout; the Python runtime's float32
 * products differ from it by ~1e-7, inside the golden vectors' tolerance.
 */
import { createHash } from "crypto";
import { readFileSync } from "fs";
import { join } from "path";
import { roundHalfEven } from "./numeric";
import { matrix, readSafetensors, Tensor, vector } from "./safetensors";

type Rows = number[][];

const TIE_EPS = 1e-6;
const WEIGHT_EPS = 1e-6;

const sigmoid = (z: number) => 1 / (1 + Math.exp(-z));
const gelu = (z: number) => 0.5 * z * (1 + Math.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)));

/** x (n × d) · w (d × k) + b (k). */
function affine(x: Rows, w: Rows, b?: number[]): Rows {
  const k = w[0].length;
  return x.map((row) => {
    const out = b ? b.slice() : new Array<number>(k).fill(0);
    for (let i = 0; i < row.length; i++) {
      const v = row[i];
      if (v === 0) continue;
      const wi = w[i];
      for (let j = 0; j < k; j++) out[j] += v * wi[j];
    }
    return out;
  });
}

const transpose = (a: Rows): Rows => a[0].map((_, j) => a.map((row) => row[j]));
const dot = (a: number[], b: number[]) => a.reduce((s, v, i) => s + v * b[i], 0);

type Member = (params: any, w: Map<string, Tensor>, x: Rows) => Rows;

const MEMBERS: Record<string, Member> = {
  knn(params, w, x) {
    const keys = matrix(w.get("keys")!), labels = matrix(w.get("labels")!), prior = vector(w.get("prior")!);
    const k = Math.min(Number(params.k), keys.length), a = Number(params.prior_strength);
    return x.map((q) => {
      const sims = keys.map((key) => dot(q, key));
      const kth = [...sims].sort((u, v) => v - u)[k - 1];
      const above = sims.map((s) => s > kth + TIE_EPS);
      const nAbove = above.filter(Boolean).length;
      const tied = sims.map((s, i) => !above[i] && s >= kth - TIE_EPS);
      const nTied = tied.filter(Boolean).length;
      let total = 0;
      const votes = new Array<number>(labels[0].length).fill(0);
      sims.forEach((s, i) => {
        if (!above[i] && !tied[i]) return;
        const share = above[i] ? 1 : (k - nAbove) / nTied;
        const weight = share / (1 - Math.min(1, Math.max(-1, s)) + WEIGHT_EPS);
        total += weight;
        labels[i].forEach((l, j) => (votes[j] += weight * l));
      });
      return votes.map((v, j) => (k * (v / total) + a * prior[j]) / (k + a));
    });
  },
  mlp(params, w, x) {
    const layers = Number(params.layers);
    let h = x;
    for (let i = 0; i < layers - 1; i++) h = affine(h, matrix(w.get(`w${i}`)!), vector(w.get(`b${i}`)!)).map((r) => r.map(gelu));
    return affine(h, matrix(w.get(`w${layers - 1}`)!), vector(w.get(`b${layers - 1}`)!)).map((r) => r.map(sigmoid));
  },
  mf(params, w, x) {
    const projected = affine(x, matrix(w.get("proj")!));
    return affine(projected, transpose(matrix(w.get("model_emb")!)), vector(w.get("model_bias")!)).map((r) => r.map(sigmoid));
  },
  task_mixture(params, w, x) {
    const groups = matrix(w.get("group_quality")!);
    return affine(x, matrix(w.get("w")!), vector(w.get("b")!)).map((z) => {
      const top = Math.max(...z);
      const e = z.map((v) => Math.exp(v - top));
      const sum = e.reduce((s, v) => s + v, 0);
      return groups[0].map((_, j) => e.reduce((s, v, t) => s + (v / sum) * groups[t][j], 0));
    });
  },
  dc(params, w, x) {
    const z = affine(affine(x, matrix(w.get("w0")!), vector(w.get("b0")!)).map((r) => r.map(gelu)),
      matrix(w.get("w1")!), vector(w.get("b1")!));
    const emb = matrix(w.get("model_emb")!), scale = vector(w.get("scale")!), bias = vector(w.get("bias")!);
    return z.map((row) => {
      const norm = Math.max(Math.sqrt(dot(row, row)), 1e-12);
      const unit = row.map((v) => v / norm);
      return emb.map((e, j) => sigmoid(dot(unit, e) * scale[scale.length === 1 ? 0 : j] + bias[bias.length === 1 ? 0 : j]));
    });
  },
};

/** numpy.interp: piecewise linear through (xs, ys), clamped at the ends. */
function interp(v: number, xs: number[], ys: number[]): number {
  if (v <= xs[0]) return ys[0];
  if (v >= xs[xs.length - 1]) return ys[ys.length - 1];
  let i = 1;
  while (xs[i] < v) i++;
  return ys[i - 1] + ((ys[i] - ys[i - 1]) * (v - xs[i - 1])) / (xs[i] - xs[i - 1]);
}


/** The recall key: SHA-256 of the text, Unicode NFC, whitespace runs collapsed to one space. */
export function textKey(text: string): string {
  const collapsed = text.normalize("NFC").split(/\s+/).filter((s) => s.length > 0).join(" ");
  return createHash("sha256").update(collapsed, "utf8").digest("hex");
}

export interface Prediction {
  models: string[];
  quality: Rows;
  cost: Rows;
  cluster: number[];
  guarded: boolean[];
  unseen: boolean[];
  recalled: boolean[];
}

export class Router {
  readonly models: string[];
  private readonly recall = new Map<string, number>();

  private constructor(readonly meta: any, private readonly weights: Map<string, Tensor>) {
    this.models = meta.models;
    const keys = weights.get("recall/keys");
    if (keys) matrix(keys).forEach((row, i) => this.recall.set(Buffer.from(row).toString("hex"), i));
  }

  static load(folder: string): Router {
    return new Router(JSON.parse(readFileSync(join(folder, "router.json"), "utf8")),
      readSafetensors(join(folder, "weights.safetensors")));
  }

  private member(name: string): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const [k, v] of this.weights) if (k.startsWith(`${name}/`)) out.set(k.slice(name.length + 1), v);
    return out;
  }

  private get(name: string): Tensor | undefined {
    return this.weights.get(name);
  }

  /** The trained members' mean estimate, through the per-model calibration maps where kept. */
  private base(x: Rows): Rows {
    const members: any[] = this.meta.members;
    const each = members.map((m) => {
      const rule = MEMBERS[m.kind];
      if (!rule) throw new Error(`router member kind ${m.kind} is not supported`);
      return rule(m.params, this.member(m.name), x);
    });
    let quality = each[0].map((row, i) => row.map((_, j) => each.reduce((s, q) => s + q[i][j], 0) / each.length));
    const offsets = this.get("calibration/offsets");
    if (offsets) {
      const xs = vector(this.get("calibration/x")!), ys = vector(this.get("calibration/y")!), cut = vector(offsets);
      quality = quality.map((row) => row.map((v, j) => interp(v, xs.slice(cut[j], cut[j + 1]), ys.slice(cut[j], cut[j + 1]))));
    }
    return quality;
  }

  /** Estimates for embedded prompts (`texts` for recall): Router.predict of the Python runtime. */
  predict(x: Rows, texts: string[]): Prediction {
    let quality = this.base(x);
    const centroids = matrix(this.get("guard/centroids")!);
    const sims = x.map((q) => centroids.map((c) => dot(q, c)));
    const cluster = sims.map((s) => s.indexOf(Math.max(...s)));
    const clusterQuality = matrix(this.get("guard/cluster_quality")!);
    for (const added of this.meta.added_models ?? []) {
      const w = this.member(`added/${added.name}`);
      const coef = vector(w.get("coef")!), bias = vector(w.get("bias")!)[0], offset = vector(w.get("cluster_offset")!);
      quality = quality.map((row, i) => {
        const logits = row.slice(0, coef.length).map((q) => {
          const c = Math.min(Math.max(q, 0.02), 0.98);
          return Math.log(c / (1 - c));
        });
        return [...row, Math.min(1, Math.max(0, sigmoid(dot(logits, coef) + bias) + offset[cluster[i]]))];
      });
    }
    const guardedClusters = vector(this.get("guard/guarded")!).map(Boolean);
    const guarded = cluster.map((c) => guardedClusters[c]);
    quality = quality.map((row, i) => (guarded[i] ? clusterQuality[cluster[i]].slice() : row));
    const threshold = vector(this.get("guard/ood_threshold")!)[0];
    const unseen = sims.map((s) => Math.max(...s) < threshold);
    const nearest = this.meta.guard?.unseen_rule === "nearest_cluster";
    const overall = vector(this.get("guard/unseen_quality") ?? this.get("prior/quality")!);
    quality = quality.map((row, i) => (unseen[i] ? (nearest ? clusterQuality[cluster[i]].slice() : overall.slice()) : row));
    const alpha = this.get("online/alpha");
    if (alpha) {  // outcomes since training: the posterior mean minus the prior mean, per cluster and model
      const a = matrix(alpha), b = matrix(this.get("online/beta")!);
      quality = quality.map((row, i) => unseen[i] ? row : row.map((v, j) => {
        if (j >= a[cluster[i]].length) return v;
        const prior = Math.min(0.99, Math.max(0.01, clusterQuality[cluster[i]][j]));
        const shift = a[cluster[i]][j] / (a[cluster[i]][j] + b[cluster[i]][j]) - prior;
        return Math.min(1, Math.max(0, v + shift));
      }));
    }
    const recalled = texts.map(() => false);
    const observed = this.get("recall/quality") ? matrix(this.get("recall/quality")!) : [];
    texts.forEach((t, i) => {
      const row = this.recall.get(textKey(t));
      if (row === undefined) return;
      recalled[i] = true;
      observed[row].forEach((v, j) => { if (!Number.isNaN(v)) quality[i][j] = v; });
    });
    const cost = vector(this.get("prior/cost")!);
    return { models: this.models, quality, cost: x.map(() => cost.slice()), cluster, guarded, unseen, recalled };
  }
}

/** argmax of quality − λ·cost (unknown cost 0, unknown quality never wins, ties to the cheaper, then the first). */
export function bestIndex(p: Prediction, lam: number): number[] {
  return p.quality.map((row, i) => {
    const cost = p.cost[i].map((c) => (Number.isNaN(c) ? 0 : c));
    const utility = row.map((q, j) => { const u = roundHalfEven(q - lam * cost[j], 9); return Number.isNaN(u) ? -Infinity : u; });
    const top = Math.max(...utility);
    let best = -1;
    utility.forEach((u, j) => { if (u === top && (best < 0 || cost[j] < cost[best])) best = j; });
    return best;
  });
}
