"""Replay a trace against a bundle's routing policies: every policy the bundle carries (learned ONNX
policies through the runtime's own loader, heuristics from their exported specs) and every
baseline it does not carry, on the simulated fleet recorded in the bundle (`simulator.json`).

Why: a router team holding a bundle and its own traffic log should see, before deploying, how the
recommended policy fares on that traffic against the alternatives, without the training inputs.
The trace's arrival times are rescaled so that its mean rate is `load` × the fleet's capacity for
the trace's own request sizes; each seed replays another window of the trace. A trace carries no
quality labels, so every model counts as quality 1: QoS is then the share of requests served
within the per-token latency requirement L (000's QoS with s = 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.training.policies.evaluation import METRICS, fleet_profiles, score
from routeforge.training.policies.gate import DEFAULT_OBJECTIVE, rank_policies
from routeforge.training.policies.load import calibrate_on
from routeforge.training.policies.packaging import read_simulator
from routeforge.training.policies.rl.rollout import run_episode
from routeforge.training.policies.simulator.baselines import BASELINES, default_baselines, from_spec, tuned_baseline
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.metrics import mean_std
from routeforge.training.policies.simulator.policy_environments import environment_for
from routeforge.training.policies.simulator.slo import Slo, slo_of
from routeforge.training.policies.simulator.traces import held_out_window, trace_window
from routeforge.training.policies.weight_search import search_weights

GOODPUT_SEPARATES = 0.5  # below this for every policy, the SLO tells the policies apart by little but noise
LEARNED_ROW = "linear_scorer (learned)"


def trace_windows(times: np.ndarray, prompt: np.ndarray, output: np.ndarray, n: int, rate: float,
                  n_models: int, hash_ids: list[tuple[int, ...]] | None = None,
                  first_row: int | None = None) -> Callable[[int], list[Request]]:
    """seed → the `n` requests of one window of the trace (its own token counts and, with `hash_ids`,
    its prompts' block ids, in order), arrival offsets rescaled to mean rate `rate`; with `first_row`,
    windows of the rows from there on (`held_out_window`: where weights are learned)."""
    n = min(n, len(times))

    def window(seed: int) -> list[Request]:
        start, t = (trace_window(times, n, rate, seed) if first_row is None
                    else held_out_window(times, n, rate, seed, first_row))
        return [Request(rid=i, arrival=float(a), prompt_tokens=int(prompt[start + i]),
                        output_tokens=np.full(n_models, int(output[start + i])), quality=np.ones(n_models),
                        task="trace", hash_ids=hash_ids[start + i] if hash_ids else ())
                for i, a in enumerate(t)]

    return window


def slo_note(rows: list[dict], slo: Slo) -> str | None:
    """A line for a trace on which no policy reaches `GOODPUT_SEPARATES` of goodput: the SLO judges
    nearly every request late whoever routes it (5 × a short-output request's own E2E is a bound no
    queue lets it meet), so the ranking says little; a service class's bounds separate them."""
    goodputs = [r["goodput"] for r in rows if np.isfinite(r.get("goodput", float("nan")))]
    if not goodputs or max(goodputs) >= GOODPUT_SEPARATES:
        return None
    return (f"every policy's goodput is below {GOODPUT_SEPARATES} (best {max(goodputs):.3f}) under the SLO "
            f"'{slo.describe()}': it does not separate the policies on this trace; judge them by a service "
            "class's bounds instead, --slo-ttft SECONDS and/or --slo-tpot SECONDS (e.g. 2 s to the first token "
            "and 0.1 s per token for chat)")


def _learned_runner(policy, profiles, models: list[int], workload, seed: int, block_tokens: int | None = None):
    """An episode of an exported learned policy in the environment its observation's kind registered
    (`simulator.policy_environments`); a policy exported to sample its actions (000's SAC) samples them
    from `seed`."""
    env = environment_for(policy.spec, profiles, models, workload, block_tokens)
    rng = np.random.default_rng(seed) if policy.spec.get("act", "sample") == "sample" else None
    return run_episode(env, lambda obs: policy.act(obs, rng=rng), seed)


def _heuristic(bundle, name: str, ref: str | None, learned_weights: dict | None):
    """A fresh instance of a non-learned row's policy: the bundle's exported spec, the scorer with the
    weights learned on this trace, or a baseline."""
    if ref is not None:
        return from_spec(bundle.routing_policy(ref).spec)
    if name == LEARNED_ROW:
        return tuned_baseline("linear_scorer", learned_weights["parameters"])
    return BASELINES[name]()


def evaluate_bundle(bundle, times: np.ndarray, prompt: np.ndarray, output: np.ndarray, load: float = 0.8,
                    seeds: int = 3, requests: int = 1000, slo: Slo | None = None,
                    log: Callable[[str], None] = lambda _: None, objective: str | None = DEFAULT_OBJECTIVE,
                    load_basis: str = "saturation", hash_ids: list[tuple[int, ...]] | None = None,
                    block_tokens: int | None = None, learn=None, learn_objective: str = "ttft_mean_s"
                    ) -> dict[str, Any]:
    """Rows of mean ± std per policy over `seeds` windows of the trace (see the module doc), each
    with its per-window values; with `objective`, the policies ranked by it and the verdict for this
    trace (`gate.rank_policies`: which to deploy, and whether the bundle's recommendation holds).
    `slo` judges each request (default: E2E within 5 × its unloaded E2E on the fastest instance for
    it); `load` is a share of the fleet's throughput at saturation on this trace, or with
    `load_basis="slo"` of the rate at which the SLO still holds (`training.policies.load`).

    `hash_ids` (each row's prompt block ids, `block_tokens` tokens each) make every instance cache
    prompt blocks, so the KV-aware routers have something to find. `learn` (a `WeightSearch`) learns
    `linear_scorer`'s weights for `learn_objective` on windows of the rows after the evaluation
    windows' (`held_out_window`), then judges them on the evaluation windows beside its defaults."""
    slo = slo if slo is not None else slo_of()
    component = next((c for c in bundle.manifest.components if c.kind == "routing_simulator"), None)
    if component is None:
        raise ValueError(f"bundle {bundle.manifest.name} has no routing_simulator component: it was trained "
                         f"without training.routing_evaluation (or before policies were packaged)")
    sim = read_simulator(bundle.verified_copy(component.name))
    profiles, _ = fleet_profiles([i["fit"] for i in sim["instances"]], sim["queue_capacity"],
                                 sim["kv_capacity_tokens"], [i.get("limits", {}) for i in sim["instances"]])
    models = [i["model_index"] for i in sim["instances"]]
    n_models = len(sim["models"])
    estimate = sum(p.capacity_rps(float(prompt.mean()), float(output.mean())) for p in profiles)

    calibration = calibrate_on(
        profiles, models, lambda rate, seed: trace_windows(times, prompt, output, requests, rate, n_models,
                                                           hash_ids)(seed),
        estimate, list(range(seeds)), slo, load_basis, block_tokens=block_tokens, log=log)
    capacity = calibration.rate_rps
    rate = load * capacity
    workload = trace_windows(times, prompt, output, requests, rate, n_models, hash_ids)
    qos_limit = sim["qos_latency_per_token_s"]
    prices = np.zeros((n_models, 2))
    recommended = bundle.recommended_policy
    carried = {c.config.get("policy"): c for c in bundle.manifest.components if c.kind == "routing_policy"}
    plan = [(name, c.name, c.config.get("policy_kind") != "heuristic") for name, c in carried.items()]
    plan += [(name, None, False) for name in default_baselines() if name not in carried]
    learned_weights, first_row = None, seeds * min(requests, len(times))  # the evaluation windows' rows
    if learn is not None:
        plan += [(name, None, False) for name in ("linear_scorer",) if name not in carried]  # its defaults
        training = trace_windows(times, prompt, output, requests, rate, n_models, hash_ids, first_row=first_row)
        training(0)  # too few rows after the evaluation windows: one error before any search

        def episode(policy, seed: int) -> dict[str, float]:
            outcomes = Cluster(profiles, models=models, block_tokens=block_tokens).run(training(seed), policy)
            return score(outcomes, prices, qos_limit, slo, profiles, models)

        learned_weights = search_weights("linear_scorer", learn, learn_objective, 0, episode, log)
        plan.append((LEARNED_ROW, None, False))
    rows = []
    for name, ref, learned in plan:
        runs = []
        for seed in range(seeds):  # a fresh heuristic per window: round-robin and the work estimates keep state
            if learned:
                outcomes = _learned_runner(bundle.routing_policy(ref), profiles, models, workload, seed, block_tokens)
            else:
                outcomes = Cluster(profiles, models=models, block_tokens=block_tokens).run(
                    workload(seed), _heuristic(bundle, name, ref, learned_weights))
            runs.append(score(outcomes, prices, qos_limit, slo, profiles, models))
        source = "bundle" if ref is not None else "learned on this trace" if name == LEARNED_ROW else "baseline"
        row = {"policy": name, "source": source, "recommended": ref is not None and ref == recommended}
        for metric, (mean, std) in mean_std(runs, METRICS).items():
            row[metric], row[f"{metric}_std"] = mean, std
            row[f"{metric}_by_seed"] = [r.get(metric, float("nan")) for r in runs]  # paired: same windows
        rows.append(row)
        log(f"{name}: {seeds} windows replayed")
    return {"bundle": bundle.manifest.name, "bundle_version": bundle.manifest.version, "load": load,
            "rate_rps": rate, "capacity_rps": capacity, "load_calibration": calibration.to_dict(),
            "slo": slo.describe(),
            "requests": min(requests, len(times)), "seeds": seeds,
            "instances": [{k: i[k] for k in ("tier", "model")} for i in sim["instances"]],
            "qos_latency_per_token_s": qos_limit, "recommended": recommended,
            "quality": "a trace carries no quality labels: every model counts as 1, so QoS is the share of "
                       "requests served within L per output token",
            "rows": rows, "slo_note": slo_note(rows, slo),
            "prefix_cache": {"block_tokens": block_tokens} if block_tokens else None,
            "learned": None if learned_weights is None else {
                "policy": "linear_scorer", "row": LEARNED_ROW, "objective": learn_objective, **learned_weights,
                "training_rows_from": first_row},
            "ranking": None if objective is None else rank_policies(
                rows, objective, recommended.removeprefix("policy--") if recommended else None)}

