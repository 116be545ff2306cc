/**
 * A tier's latency heads (docs/bundle-format.md, "latency heads"): `line`, `residual` or `trees`
 * per target. The trees are XGBoost's JSON model, evaluated as XGBoost's CPU predictor does:
 * features as float32, `x < split_condition` goes left, NaN follows `default_left`, leaves summed
 * tree by tree in float32 onto `base_score`.
 */
import { readFileSync } from "fs";
import { join } from "path";

const f32 = Math.fround;

interface Tree {
  left: number[];
  right: number[];
  feature: number[];
  threshold: number[];
  defaultLeft: boolean[];
}

export class TreeEnsemble {
  private constructor(readonly trees: Tree[], readonly baseScore: number, readonly numFeature: number) {}

  static load(path: string): TreeEnsemble {
    return TreeEnsemble.fromModel(JSON.parse(readFileSync(path, "utf8")), path);
  }

  /** From XGBoost's JSON model, parsed (a heuristic's spec carries it inline). */
  static fromModel(model: any, path = "model"): TreeEnsemble {
    const learner = model.learner;
    const booster = learner.gradient_booster;
    if (booster.name !== "gbtree") throw new Error(`${path}: booster ${booster.name} is not supported`);
    const objective = learner.objective?.name;
    if (!["reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror", "reg:quantileerror"].includes(objective)) {
      throw new Error(`${path}: objective ${objective} is not supported (identity-link regression only)`);
    }
    const param = learner.learner_model_param;
    const base = String(param.base_score).replace(/[[\]]/g, "").split(",");
    const trees = booster.model.trees.map((t: any) => {
      if ((t.split_type ?? []).some((s: number) => s !== 0)) throw new Error(`${path}: categorical splits`);
      return { left: t.left_children, right: t.right_children, feature: t.split_indices,
        threshold: t.split_conditions.map((v: number) => f32(v)), defaultLeft: t.default_left.map(Boolean) };
    });
    return new TreeEnsemble(trees, f32(parseFloat(base[0])), Number(param.num_feature));
  }

  predict(row: number[]): number {
    let out = this.baseScore;
    for (const tree of this.trees) {
      let node = 0;
      while (tree.left[node] >= 0) {
        const value = row[tree.feature[node]];
        const left = Number.isNaN(value) ? tree.defaultLeft[node] : f32(value) < tree.threshold[node];
        node = left ? tree.left[node] : tree.right[node];
      }
      out = f32(out + tree.threshold[node]);
    }
    return out;
  }
}

interface Line {
  terms: string[][];
  coef: number[];
  fill: Record<string, number>;
}

class Head {
  constructor(readonly kind: string, readonly line: Line | null, readonly trees: TreeEnsemble | null) {}

  predict(row: number[], features: string[]): number {
    let out = 0;
    if (this.line) {
      const value = (f: string) => { const v = row[features.indexOf(f)]; return Number.isNaN(v) ? this.line!.fill[f] : v; };
      this.line.terms.forEach((term, i) => {
        out += this.line!.coef[i] * term.reduce((p, f) => p * value(f), 1);
      });
    }
    if (this.trees) out += this.trees.predict(row);
    return out;
  }
}

export class LatencyModel {
  private constructor(readonly tier: string, readonly spec: any, readonly heads: Map<string, Head>) {}

  static load(folder: string): LatencyModel {
    const spec = JSON.parse(readFileSync(join(folder, "heads.json"), "utf8"));
    const heads = new Map<string, Head>();
    if (spec.heads) {
      for (const [target, entry] of Object.entries<any>(spec.heads)) {
        heads.set(target, new Head(entry.kind, entry.line ?? null, entry.trees ? TreeEnsemble.load(join(folder, entry.trees)) : null));
      }
    } else {
      for (const [target, file] of Object.entries<string>(spec.targets ?? {})) {
        heads.set(target, new Head("trees", null, TreeEnsemble.load(join(folder, file))));
      }
    }
    return new LatencyModel(spec.tier, spec, heads);
  }

  get features(): string[] {
    return this.spec.features ?? [];
  }

  /** A state at dispatch as the heads' feature row: a missing or null feature is NaN. */
  row(state: Record<string, number | null>): number[] {
    return this.features.map((f) => (state[f] == null ? NaN : Number(state[f])));
  }

  /** Seconds: tpot, ttft, e2e = ttft + max(n − 1, 0)·tpot, and e2e_direct where the tier has that head. */
  predict(state: Record<string, number | null>): Record<string, number> {
    const row = this.row(state);
    const out: Record<string, number> = {};
    for (const [target, head] of this.heads) out[target] = head.predict(row, this.features);
    const n = row[this.features.indexOf(this.spec.length_feature ?? "predicted_output_tokens")];
    const result: Record<string, number> = { tpot: out.tpot, ttft: out.ttft, e2e: out.ttft + Math.max(n - 1, 0) * out.tpot };
    if ("e2e" in out) result.e2e_direct = out.e2e;
    return result;
  }
}
