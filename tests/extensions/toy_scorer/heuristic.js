// The TypeScript twin of heuristic.py: the same decision, registered with the runtime.
const { registerHeuristic } = require(process.env.ROUTEFORGE_TS_RUNTIME);

const WEIGHTS = { free_slots: 1.0, queued_prefill: 0.0, kv_free: 0.0 };

registerHeuristic("toy_slack_scorer", (request, instances, parameters) => {
  const w = { ...WEIGHTS, ...(parameters.weights || {}) };
  const score = instances.map((i) => w.free_slots * (i.max_running - i.running.length) / Math.max(1, i.max_running)
    - w.queued_prefill * (i.queued_prefill_tokens ?? 0) / 1000.0 + w.kv_free * (1.0 - (i.kv_utilization ?? 0)));
  let best = 0;
  score.forEach((s, k) => { if (s > score[best]) best = k; });
  return best;
});
