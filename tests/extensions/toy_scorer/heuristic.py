"""A scoring heuristic with searchable weights, added in this one module (and its TypeScript twin,
heuristic.js): named by $ROUTEFORGE_EXTENSIONS, it is searched by CMA-ES, evaluated beside the other
baselines and carried in a bundle with nothing else changed (tests/extensions/test_one_scorer_module.py)."""

from routeforge.artifacts.deciding.heuristics import HEURISTICS

WEIGHTS = {"free_slots": 1.0, "queued_prefill": 0.0, "kv_free": 0.0}


@HEURISTICS.register("toy_slack_scorer", default=False, weights=WEIGHTS, searchable=True)
def toy_slack_scorer(request, instances, parameters, state) -> int:
    """The highest Σ weight × feature: free sequence slots per slot, queued prefill in thousands of
    tokens (negated), free KV share; the first on ties."""
    weights = {**WEIGHTS, **(parameters.get("weights") or {})}
    score = [weights["free_slots"] * (i["max_running"] - len(i["running"])) / max(1, i["max_running"])
             - weights["queued_prefill"] * i.get("queued_prefill_tokens", 0.0) / 1000.0
             + weights["kv_free"] * (1.0 - i.get("kv_utilization", 0.0)) for i in instances]
    return max(range(len(score)), key=lambda k: (score[k], -k))
