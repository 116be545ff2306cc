#!/usr/bin/env node
/**
 * `node dist/check_golden.js BUNDLE [--public-key KEY.pub|KEYRING_FOLDER | --insecure-skip-signature]`: load a
 * bundle with this runtime, recompute its golden vectors (token ids, embeddings, router estimates
 * and decisions at each λ, latency predictions, heuristic choices) and print one JSON report with
 * the differences and the timings; exit 1 when anything differs beyond 1e-5 or any decision differs.
 */
import { readFileSync } from "fs";
import { join } from "path";
import { performance } from "perf_hooks";
import { Bundle, loadKeyring } from "./bundle";
import { recommend } from "./heuristics";
import { bestIndex } from "./router";
import { matrix, readSafetensors } from "./safetensors";

const TOLERANCE = 1e-5;

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const root = args.find((a) => !a.startsWith("--"));
  const keyAt = args.indexOf("--public-key");
  if (!root || (keyAt < 0 && !args.includes("--insecure-skip-signature"))) {
    process.stderr.write("usage: check_golden BUNDLE (--public-key KEY.pub | --insecure-skip-signature)\n");
    return 2;
  }
  const started = performance.now();
  const bundle = Bundle.open(root, keyAt >= 0 ? loadKeyring(args[keyAt + 1]) : null);
  const encoder = await bundle.encoder();
  const router = bundle.router();
  const coldStartMs = performance.now() - started;

  const goldenComponent = bundle.components("golden_vectors")[0];
  if (!goldenComponent) throw new Error("the bundle carries no golden_vectors component");
  const folder = bundle.folder(goldenComponent.name);
  const golden = JSON.parse(readFileSync(join(folder, "golden.json"), "utf8"));
  const vectors = readSafetensors(join(folder, "vectors.safetensors"));
  const prompts: string[] = golden.prompts;
  const side = golden.encoder.truncation_side;
  const problems: string[] = [];
  const report: any = { bundle: bundle.manifest.name, version: bundle.manifest.version, prompts: prompts.length };

  // token ids
  const ids = matrix(vectors.get("input_ids")!), mask = matrix(vectors.get("attention_mask")!);
  let idMismatches = 0;
  prompts.forEach((p, i) => {
    const expected = ids[i].filter((_, j) => mask[i][j] === 1);
    const got = encoder.tokenize(p, side);
    if (got.length !== expected.length || got.some((v, j) => v !== expected[j])) {
      idMismatches++;
      if (idMismatches <= 3) problems.push(`prompt ${i}: token ids differ (${got.length} against ${expected.length})`);
    }
  });
  report.token_id_mismatches = idMismatches;

  // embeddings and routing, timed per decision
  const t0 = performance.now();
  const embedded = await encoder.encode(prompts, side);
  const t1 = performance.now();
  const x = embedded.map((e) => Array.from(e));
  const prediction = router.predict(x, prompts);
  const t2 = performance.now();
  const expectedEmbeddings = matrix(vectors.get("embeddings")!);
  report.embedding_max_abs_diff = Math.max(...x.map((row, i) => Math.max(...row.map((v, j) => Math.abs(v - expectedEmbeddings[i][j])))));
  const expectedQuality = matrix(vectors.get("router_quality")!);
  report.router_quality_max_abs_diff = Math.max(...prediction.quality.map((row, i) =>
    Math.max(...row.map((v, j) => (Number.isNaN(expectedQuality[i][j]) ? 0 : Math.abs(v - expectedQuality[i][j]))))));
  for (const [name, value] of [["embedding", report.embedding_max_abs_diff], ["router quality", report.router_quality_max_abs_diff]]) {
    if (!(value <= TOLERANCE)) problems.push(`${name} differs by up to ${value}`);
  }
  const flags = ["cluster", "guarded", "unseen", "recalled"] as const;
  for (const flag of flags) {
    const wrong = (prediction[flag] as any[]).filter((v, i) => v !== golden.router[flag][i]).length;
    if (wrong) problems.push(`${flag}: ${wrong} prompts differ`);
  }
  report.decisions = 0;
  report.decision_mismatches = 0;
  golden.router.lams.forEach((lam: number, k: number) => {
    const choice = bestIndex(prediction, lam).map((j) => prediction.models[j]);
    const wrong = choice.filter((m, i) => m !== golden.router.choices[k][i]).length;
    report.decisions += choice.length;
    report.decision_mismatches += wrong;
    if (wrong) problems.push(`λ = ${lam}: ${wrong} routing decisions differ`);
  });
  report.encode_ms_per_prompt = (t1 - t0) / prompts.length;
  report.route_ms_per_prompt = (t2 - t1) / prompts.length;

  // latency heads
  report.latency = [];
  for (const part of golden.latency) {
    const model = bundle.latency(part.component);
    const t = performance.now();
    const got = part.states.map((s: any) => model.predict(s));
    const ms = (performance.now() - t) / part.states.length;
    let worst = 0;
    for (const [key, expected] of Object.entries<number[]>(part.predictions)) {
      expected.forEach((v, i) => { worst = Math.max(worst, Math.abs(got[i][key] - v)); });
    }
    if (!(worst <= TOLERANCE)) problems.push(`${part.component}: predictions differ by up to ${worst}`);
    report.latency.push({ component: part.component, states: part.states.length, max_abs_diff: worst, ms_per_state: ms });
  }

  // heuristic policies
  report.heuristics = [];
  for (const part of golden.heuristics) {
    const policy = bundle.heuristic(part.component);
    const t = performance.now();
    const got = part.cases.map((c: any) => policy.route(c.request, c.instances));
    const ms = (performance.now() - t) / part.cases.length;
    const wrong = got.filter((v: number, i: number) => v !== part.choices[i]).length;
    if (wrong) problems.push(`${part.component}: ${wrong} choices differ`);
    report.heuristics.push({ component: part.component, cases: part.cases.length, mismatches: wrong, ms_per_case: ms });
  }
  // per-traffic recommendations
  if (golden.recommendations) {
    const table = JSON.parse(readFileSync(join(bundle.folder(bundle.components("routing_simulator")[0].name),
      "simulator.json"), "utf8")).recommendations;
    const wrong = golden.recommendations.filter((r: any) => recommend(table, r.stats, r.objective) !== r.policy).length;
    report.recommendations = { cases: golden.recommendations.length, mismatches: wrong };
    if (wrong) problems.push(`${wrong} per-traffic recommendations differ`);
  }
  report.cold_start_ms = coldStartMs;
  report.problems = problems;
  process.stdout.write(JSON.stringify(report, null, 2) + "\n");
  return problems.length ? 1 : 0;
}

main().then((code) => process.exit(code), (err) => {
  process.stderr.write(`routeforge (typescript): ${err instanceof Error ? err.message : err}\n`);
  process.exit(1);
});
