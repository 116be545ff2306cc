"""KV-cache-aware routing on the reference GPU fleet (issue 60): the routers people deploy (llm-d's
scheduler, Dynamo's KV router, SGLang's cache-aware policy) beside the load-aware heuristics, on
Mooncake's trace (block hashes: 64% of prompt blocks repeat an earlier one) and, as the control
where nothing is shared, the same windows with their hashes dropped.

    python -m benchmarks.kv_routing [--requests 1500] [--seeds 2] [--loads 0.5 0.8 0.95] [--quick]
    python -m benchmarks.kv_routing --pool llama-3.1-8b-instruct   # one model's replicas on mixed GPUs
    python -m benchmarks.kv_routing --loads 0.8 --policies llm_d clairvoyant_ttft --no-control --name bound
    python -m benchmarks.kv_routing --loads 0.8 --no-control --learned --name learned
    python -m benchmarks.kv_routing --loads 0.8 --no-control --choose --name ttft   # llm_d_ttft's weights first
    python -m benchmarks.kv_routing --loads 0.8 --no-control --learn-weights 300 --name learned_scorer

The fleet: configs/gpu_fleet.yaml's 12 instances, each tier's step model fitted to its
LLM-Inference-Bench rows, each instance's KV capacity from its hardware and its model's
architecture (profiling.kv_capacity), a prefix cache of the trace's 512-token blocks per instance.
Every request is judged by an SLO of its own, the same wherever it goes (training.policies.simulator.
slo): E2E within 5 × its E2E alone on the idle instance that would serve it fastest. `--load X` is X
× the fleet's throughput at saturation, as the pipeline measures it (`training.policies.load`: the
whole window offered at once, held at the router while every buffer is full, completions per second
between the 10th and 90th percentile completion times).
The trace carries no per-model quality, so quality-driven policies are not run here.

`clairvoyant_ttft` (`routing_headroom.ClairvoyantLookahead(at="first_token")`; not a policy any
runtime could run; issue 60's reference for the TTFT target):
for each request it copies every instance as it is (queue, batch, prefix cache), runs each copy to
completion with and without the request, true output lengths known, and sends the request where
its own TTFT plus the delay it adds to the first tokens of the requests waiting there is least. It
is greedy (future arrivals unseen), so it is a reference point, not a bound. The bound is the row
`lower bound` (`routing_headroom.ttft_lower_bound`): each request's prefill alone on the instance
that would prefill it fastest, with every leading block another request of the window holds cached;
no router serving 99.5% of the requests has a lower mean TTFT in this simulator.
`--choose` picks `llm_d_ttft`'s weights (llm-d's three scorers and ours, the request's predicted
first-token time) on six 500-request windows from the trace rows after the evaluation windows':
the lowest mean TTFT among those serving 99.5% (`CHOICE_GRID`); the evaluation then runs those.
`--learn-weights N` learns `linear_scorer`'s nine weights with the pipeline's CMA-ES
(`training.policies.weight_search`): `--restarts` searches of N candidates, each candidate on
`--search-episodes` 500-request training windows of its own search (rows after the evaluation
windows'), for the lowest mean TTFT among those serving 99.5%; llm_d_ttft's weights and each search's
best are compared on eight validation windows of the same rows and the best there is judged.
`--learned` also trains 001's DDQN (`ddqn_workload_guided`, the pipeline's own policy module) with
the observation issue 60 adds: each instance's share of the request's prompt blocks in its prefix
cache, its waiting queue and whether it is full (masked); its per-instance network (one Q function
shared by every instance) and the latency it is charged is each request's TTFT (`latency_reward:
first_token`). It trains at load 0.8 on windows drawn
from the trace's rows after the evaluation windows' (held out: the evaluation windows are never
seen), its teacher chosen among the load heuristics and the three deployed routers by its clone's
return, its kept round by validation episodes of the training rows; it is then judged on the same
evaluation windows as every other row. `llm_d (env)` is llm-d's scheduler acting through the same
environment (its decision points every 20 ms), the control for what the environment alone changes.
Writes benchmarks/results/kv_routing/<name>.json and prints the table.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA, REPO, parser, results_dir

POLICIES = ("round_robin", "join_shortest_queue", "least_work_left", "earliest_available", "llm_d", "llm_d_affinity",
            "lmetric", "dynamo_kv", "sglang_cache_aware", "llm_d_ttft")
EXTRA = ("clairvoyant_ttft", "linear_scorer", "llm_d_predicted_latency")  # run where named (linear_scorer also
# with --learn-weights; llm_d_predicted_latency's model is trained on training windows first)
DEPLOYED = ("llm_d", "llm_d_affinity", "llm_d_predicted_latency", "lmetric", "dynamo_kv", "sglang_cache_aware")
SCRAPE_INTERVAL_S = 0.05  # the observation's /metrics staleness, the pipeline's default (llm-d's 50 ms)
SHOWN = ("goodput", "served_share", "ttft_mean_s", "ttft_p95_offered_s", "tpot_mean_s", "e2e_mean_offered_s",
         "e2e_p95_offered_s", "prefix_hit_rate")


def reference_fleet(config_path: Path, queue_capacity: int = 64, pool: str | None = None):
    """(instance profiles, model index per instance, tier name per instance, KV capacity per tier);
    `pool`: only that model's tiers (replicas of one model, as llm-d, Dynamo and SGLang route)."""
    from routeforge.fleet import load_fleet
    from routeforge.profiling.coarse_priors import continuous_batching_fit, read_llm_inference_bench
    from routeforge.profiling.kv_capacity import tier_batched_tokens, tier_kv_capacity
    from routeforge.training.policies.simulator.instance import InstanceProfile

    config = load_fleet(config_path)
    rows = read_llm_inference_bench(config.tiers[0].profile.file)
    models = config.model_names
    profiles, index, names, capacities, fits = [], [], [], {}, []
    for tier in config.tiers:
        if pool is not None and tier.model != pool:
            continue
        capacity = tier_kv_capacity(config, tier)
        if capacity is None:
            raise SystemExit(f"{config_path}: tier {tier.name} has no architecture or hardware memory")
        capacities[tier.name] = capacity.to_dict()
        fit = continuous_batching_fit(tier.profile.key, rows[tier.profile.key])
        profile = InstanceProfile.from_fit(fit, max_running=tier.max_num_seqs or queue_capacity, buffer=queue_capacity,
                                           kv_capacity_tokens=capacity.tokens,
                                           max_num_batched_tokens=tier_batched_tokens(config, tier))
        profiles += [profile] * tier.instances
        fits += [fit] * tier.instances
        index += [models.index(tier.model)] * tier.instances
        names += [tier.name] * tier.instances
    return profiles, index, names, capacities, fits


def window(trace, n: int, rate: float, seed: int, n_models: int, shared: bool = True):
    """Seed's window of n consecutive trace requests (conversation order kept), rescaled to `rate`."""
    from routeforge.training.policies.simulator.cluster import Request
    from routeforge.training.policies.simulator.traces import trace_window

    start, offsets = trace_window(trace.times, n, rate, seed)
    return [Request(k, float(t), int(trace.prompt_tokens[start + k]),
                    np.full(n_models, int(trace.output_tokens[start + k])), np.full(n_models, np.nan),
                    hash_ids=trace.hash_ids[start + k] if shared else ())
            for k, t in enumerate(offsets)]


def run(profiles, models, requests, policy: str, block_tokens: int, parameters: dict | None = None):
    """`policy` on `requests`; `parameters`: a registered heuristic's own (those chosen on training windows)."""
    from routeforge.training.policies.simulator.baselines import BASELINES, tuned_baseline
    from routeforge.training.policies.simulator.cluster import Cluster

    from benchmarks.routing_headroom import ClairvoyantLookahead

    if policy == "clairvoyant_ttft":
        router = ClairvoyantLookahead(at="first_token")
    else:
        router = tuned_baseline(policy, parameters) if parameters is not None else BASELINES[policy]()
    return Cluster(profiles, models=models, block_tokens=block_tokens,
                   scrape_interval_s=SCRAPE_INTERVAL_S).run(requests, router)


def train_learned(profiles, models, trace, n: int, rate: float, first_row: int, block_tokens: int, n_models: int,
                  ddqn: dict, log):
    """001's DDQN (the pipeline's `ddqn_workload_guided`) trained on windows of `n` requests that start
    at or after `first_row` (rows the evaluation windows do not hold), rescaled to `rate`."""
    from routeforge.core.config.training import RoutingEvaluationSettings
    from routeforge.training.policies.learned.base import LEARNED_POLICIES, Setting

    def workload(seed: int):
        return training_window(trace, n, rate, seed, n_models, first_row)

    settings = RoutingEvaluationSettings(enabled=True, learned={"ddqn_workload_guided": ddqn})
    setting = Setting(profiles, models, float("nan"), np.zeros(len(profiles)), rate, settings, block_tokens)
    policy = LEARNED_POLICIES.get("ddqn_workload_guided")
    return policy, setting, policy.train(setting, workload, log)


def run_learned(learned, policy: str, requests: list, seed: int):
    """The trained DDQN, greedy, or (`llm_d (env)`) llm-d's scheduler, acting through the DDQN's
    environment on `requests`."""
    from routeforge.training.policies.rl.rollout import run_episode
    from routeforge.training.policies.rl.teacher import teacher_action
    from routeforge.training.policies.simulator.baselines import BASELINES

    module, setting, trained = learned
    env = module.environment(setting, lambda _seed: requests)
    if policy == "llm_d (env)":
        router = BASELINES["llm_d"]()
        return run_episode(env, lambda _obs: teacher_action(env, router), seed)
    return run_episode(env, module.actor(trained.run.network, seed, setting.evaluation), seed)


def training_window(trace, n: int, rate: float, seed: int, n_models: int, first_row: int):
    """Seed's window of n consecutive trace requests starting at or after `first_row` (rows no evaluation
    window holds), rescaled to `rate`: the windows settings are chosen on."""
    from routeforge.training.policies.simulator.cluster import Request
    from routeforge.training.policies.simulator.traces import held_out_window

    try:
        start, offsets = held_out_window(trace.times, n, rate, seed, first_row)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return [Request(k, float(o), int(trace.prompt_tokens[start + k]),
                    np.full(n_models, int(trace.output_tokens[start + k])), np.full(n_models, np.nan),
                    hash_ids=trace.hash_ids[start + k]) for k, o in enumerate(offsets)]


# llm_d_ttft's weights tried on the training windows: llm-d's three (its defaults 3 / 2 / 2 among them)
# and the first-token scorer's
CHOICE_GRID = {"prefix": (1.5, 3.0, 6.0), "kv_utilization": (0.0, 1.0, 2.0), "queue": (0.0, 2.0, 4.0),
               "ttft_weight": (0.0, 0.25, 0.5, 1.0, 2.0)}


def choose_llm_d_ttft(profiles, models, trace, rate: float, first_row: int, block_tokens: int, n_models: int,
                      windows: int = 6, n: int = 500) -> dict:
    """`llm_d_ttft`'s weights with the lowest mean TTFT over `windows` training windows among those
    serving at least 99.5% (how its default `ttft_weight` was chosen; the evaluation windows are never run)."""
    import itertools

    from routeforge.training.policies.simulator.baselines import tuned_baseline
    from routeforge.training.policies.simulator.cluster import Cluster
    from routeforge.training.policies.simulator.metrics import summarize

    tried = []
    requests = [training_window(trace, n, rate, 100 + w, n_models, first_row) for w in range(windows)]
    for p, k, q, t in itertools.product(*CHOICE_GRID.values()):
        params = {"weights": {"prefix": p, "kv_utilization": k, "queue": q}, "ttft_weight": t}
        runs = [summarize(Cluster(profiles, models=models, block_tokens=block_tokens,
                                  scrape_interval_s=SCRAPE_INTERVAL_S).run(reqs, tuned_baseline("llm_d_ttft", params)))
                for reqs in requests]
        tried.append({"parameters": params, "ttft_mean_s": float(np.mean([r["ttft_mean_s"] for r in runs])),
                      "served_share": float(np.mean([r["served_share"] for r in runs]))})
    kept = [t for t in tried if t["served_share"] >= 0.995]
    best = min(kept, key=lambda t: t["ttft_mean_s"])
    llm_d = next(t for t in tried if t["parameters"] == {"weights": {"prefix": 3.0, "kv_utilization": 2.0,
                                                                     "queue": 2.0}, "ttft_weight": 0.0})
    return {"windows": windows, "requests": n, "first_row": first_row, "rate_rps": rate, "chosen": best,
            "llm_d_defaults": llm_d, "tried": tried}


def learn_scorer_weights(profiles, models, trace, rate: float, first_row: int, block_tokens: int, n_models: int,
                         evaluations: int, episodes: int, restarts: int, n: int = 500, seed: int = 0) -> dict:
    """`linear_scorer`'s weights learned by the pipeline's CMA-ES (`training.policies.weight_search`) for
    the lowest mean TTFT among candidates serving 99.5%, on training windows of `n` requests (rows from
    `first_row`, which no evaluation window holds), kept where they beat llm_d_ttft's on validation windows."""
    from routeforge.core.config.training import WeightSearch
    from routeforge.training.policies.simulator.cluster import Cluster
    from routeforge.training.policies.simulator.metrics import summarize
    from routeforge.training.policies.weight_search import search_weights

    def episode(policy, seed: int) -> dict:
        requests = training_window(trace, n, rate, seed, n_models, first_row)
        return summarize(Cluster(profiles, models=models, block_tokens=block_tokens,
                                 scrape_interval_s=SCRAPE_INTERVAL_S).run(requests, policy))

    search = WeightSearch(evaluations=evaluations, episodes=episodes, restarts=restarts)
    started = time.perf_counter()
    out = search_weights("linear_scorer", search, "ttft_mean_s", seed, episode, lambda line: print(line, flush=True))
    return {**out, "settings": search.model_dump(), "requests": n, "first_row": first_row, "rate_rps": rate,
            "seconds": time.perf_counter() - started}


def saturation_rps(profiles, models, trace, n: int, seeds: int, n_models: int, block_tokens: int) -> float:
    """The fleet's throughput at saturation on these windows, as the pipeline's `load_basis: saturation`
    measures it (`training.policies.load.calibrate_on`)."""
    from routeforge.training.policies.load import calibrate_on

    calibration = calibrate_on(profiles, models, lambda rate, seed: window(trace, n, rate, seed, n_models),
                               float("nan"), list(range(seeds)), None, "saturation", block_tokens=block_tokens)
    return calibration.rate_rps


def paired_gaps(rows: list[dict]) -> list[dict]:
    """Per trace and load, each non-deployed policy's mean TTFT against the best deployed router's
    (by mean TTFT among those serving ≥ 99.5%): the relative gap and its noise, the standard deviation of
    the per-seed paired gaps (the same windows on both sides)."""
    out = []
    for key in {(r["trace"], r["load"]) for r in rows if "ttft_mean_s_by_seed" in r}:
        here = [r for r in rows if (r["trace"], r["load"]) == key and "ttft_mean_s_by_seed" in r]
        deployed = [r for r in here if r["policy"] in DEPLOYED and r["served_share"][0] >= 0.995]
        if not deployed:
            continue
        best = min(deployed, key=lambda r: r["ttft_mean_s"][0])
        base = np.array(best["ttft_mean_s_by_seed"])
        for r in here:
            if r["policy"] in DEPLOYED:
                continue
            gaps = 1.0 - np.array(r["ttft_mean_s_by_seed"]) / base
            out.append({"trace": key[0], "load": key[1], "policy": r["policy"], "against": best["policy"],
                        "ttft_below_best_deployed": float(1.0 - r["ttft_mean_s"][0] / best["ttft_mean_s"][0]),
                        "paired_gap_mean": float(gaps.mean()), "paired_gap_std": float(gaps.std()),
                        "served_share": r["served_share"][0]})
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "gpu_fleet.yaml")
    p.add_argument("--trace", type=Path, default=DATA / "traces" / "mooncake_synthetic_trace.jsonl")
    # windows of consecutive requests: a first block's reuses are a median 225 requests apart in this trace
    p.add_argument("--requests", type=int, default=1500)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--pool", default=None, help="only this model's tiers (its replicas on mixed GPUs)")
    p.add_argument("--loads", type=float, nargs="+", default=[0.5, 0.8, 0.95])
    p.add_argument("--slo-scale", type=float, default=5.0)
    p.add_argument("--name", default=None, help="the result file's name (default: from the fleet and pool)")
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=[*POLICIES, *EXTRA])
    p.add_argument("--no-control", action="store_true", help="skip the windows with their hashes dropped")
    p.add_argument("--learned", action="store_true", help="also train and judge 001's DDQN with prefix overlap")
    p.add_argument("--train-requests", type=int, default=500, help="requests per training window (--learned)")
    p.add_argument("--episodes", type=int, default=6, help="the DDQN's RL episodes (--learned)")
    p.add_argument("--teacher", default="auto", help="the DDQN's teacher (--learned; auto: by its clone's return)")
    p.add_argument("--learn-weights", type=int, default=0, metavar="CANDIDATES",
                   help="learn linear_scorer's weights by CMA-ES with this many candidates on training windows")
    p.add_argument("--search-episodes", type=int, default=6, help="training windows each candidate runs")
    p.add_argument("--restarts", type=int, default=3, help="CMA-ES searches, chosen among on validation windows")
    p.add_argument("--search-seed", type=int, default=0, help="the search's seed (its windows and CMA-ES's draws)")
    p.add_argument("--choose", action="store_true",
                   help="choose llm_d_ttft's weights on training windows (rows after the evaluation windows') first")
    args = p.parse_args()
    if args.quick:
        args.requests, args.seeds, args.loads = 200, 2, [0.8]

    from routeforge.training.policies.simulator.metrics import mean_std, summarize
    from routeforge.training.policies.simulator.slo import Slo
    from routeforge.training.policies.simulator.traces import MOONCAKE, read_block_trace

    from benchmarks.routing_headroom import ttft_lower_bound

    started = time.perf_counter()
    profiles, models, names, capacities, fits = reference_fleet(args.config, pool=args.pool)
    n_models = max(models) + 1
    trace = read_block_trace(args.trace, columns=MOONCAKE)
    block = trace.block_tokens
    from routeforge.training.policies.simulator.extrapolation import extrapolation, notes

    stretched = extrapolation(fits, names, float(np.max(trace.prompt_tokens)))
    for line in notes(stretched):
        print(f"simulated beyond the fits: {line}", flush=True)
    slo = Slo(scale=args.slo_scale, reference="fastest")
    relative = Slo(scale=args.slo_scale, reference="serving")
    saturation = saturation_rps(profiles, models, trace, args.requests, args.seeds, n_models, block)
    print(f"{len(profiles)} instances; throughput at saturation {saturation:.2f} req/s; "
          f"SLO: {slo.describe()}", flush=True)
    rows, learned, choice = [], None, None
    if args.choose:
        choice = choose_llm_d_ttft(profiles, models, trace, 0.8 * saturation, args.requests * args.seeds, block,
                                   n_models)
        print(f"llm_d_ttft chosen on {choice['windows']} training windows: {choice['chosen']['parameters']} "
              f"(mean TTFT {choice['chosen']['ttft_mean_s']:.4g} s; llm-d's defaults "
              f"{choice['llm_d_defaults']['ttft_mean_s']:.4g} s)", flush=True)
    predicted = None
    if "llm_d_predicted_latency" in args.policies:
        from routeforge.training.policies.predicted_latency import fit_parameters
        from routeforge.training.policies.simulator.cluster import Cluster

        def training_run(policy, seed: int):
            return Cluster(profiles, models=models, block_tokens=block, scrape_interval_s=SCRAPE_INTERVAL_S).run(
                training_window(trace, 500, 0.8 * saturation, 300 + seed, n_models, args.requests * args.seeds), policy)

        predicted = fit_parameters(training_run, list(range(6)), lambda line: print(line, flush=True))
    scorer = None
    if args.learn_weights:
        scorer = learn_scorer_weights(profiles, models, trace, 0.8 * saturation, args.requests * args.seeds, block,
                                      n_models, args.learn_weights, args.search_episodes, args.restarts,
                                      seed=args.search_seed)
        args.policies = [*args.policies, "linear_scorer"] if "linear_scorer" not in args.policies else args.policies
    if args.learned:
        ddqn = {"episodes": args.episodes, "demo_episodes": 2, "pretrain_steps": 1000, "keep_best_round": True,
                "validation_episodes": 2, "network": "per_instance", "latency_reward": "first_token",
                "teacher": args.teacher}
        learned = train_learned(profiles, models, trace, args.train_requests, 0.8 * saturation,
                                args.requests * args.seeds, block, n_models, ddqn, lambda line: print(line, flush=True))
        print(f"ddqn_workload_guided: trained in {learned[2].seconds:.0f} s", flush=True)
    for shared in (True,) if args.no_control else (True, False):
        for load in args.loads:
            if shared:  # no router's mean TTFT over 99.5% or more of the requests served is below this
                bounds = [ttft_lower_bound(window(trace, args.requests, load * saturation, seed, n_models),
                                           profiles, block) for seed in range(args.seeds)]
                rows.append({"trace": "mooncake", "load": load, "policy": "lower bound (any router, ≥ 99.5% served)",
                             "ttft_mean_s": [float(np.mean(bounds)), float(np.std(bounds))]})
                print(f"mooncake load {load:g}: mean TTFT lower bound {np.mean(bounds):.4g} s", flush=True)
            extra = ["ddqn_workload_guided", "llm_d (env)"] if learned is not None and shared else []
            for policy in [*args.policies, *extra]:
                runs, wall = [], 0.0
                for seed in range(args.seeds):
                    requests = window(trace, args.requests, load * saturation, seed, n_models, shared)
                    t0 = time.perf_counter()
                    chosen = choice["chosen"]["parameters"] if choice is not None and policy == "llm_d_ttft" else None
                    if policy == "linear_scorer" and scorer is not None:
                        chosen = scorer["parameters"]
                    if policy == "llm_d_predicted_latency":
                        chosen = predicted
                    outcomes = (run(profiles, models, requests, policy, block, chosen) if policy not in extra
                                else run_learned(learned, policy, requests, seed))
                    wall += time.perf_counter() - t0
                    summary = summarize(outcomes, slo=slo, profiles=profiles, models=models)
                    summary["goodput_instance_relative"] = summarize(outcomes, slo=relative, profiles=profiles,
                                                                     models=models)["goodput"]
                    runs.append(summary)
                stats = mean_std(runs, (*SHOWN, "goodput_instance_relative"))
                rows.append({"trace": "mooncake" if shared else "mooncake, hashes dropped", "load": load,
                             "policy": policy, "sim_seconds": wall, **stats,
                             "ttft_mean_s_by_seed": [r["ttft_mean_s"] for r in runs],
                             "served_share_by_seed": [r["served_share"] for r in runs]})
                print(f"{rows[-1]['trace']:<26} load {load:<4g} {policy:<20} "
                      + "  ".join(f"{k} {stats[k][0]:.4g}" for k in SHOWN), flush=True)
    if learned is not None:
        trained = learned[2]
        report_learned = {"policy": "ddqn_workload_guided", "training": trained.training(),
                          "observation": trained.env.observation_spec()["per_instance"],
                          "pretrain": trained.run.pretrain, "kept_round": trained.run.kept_round,
                          "train_rows_from": args.requests * args.seeds, "train_requests": args.train_requests}
    report = {"config": str(args.config.relative_to(REPO)), "pool": args.pool, "trace": args.trace.name,
              "requests": args.requests, "seeds": args.seeds, "loads": args.loads, "slo": slo.describe(),
              "saturation_rps": saturation,
              "load_definition": "× the throughput at saturation (training.policies.load, basis saturation)",
              "instances": names, "kv_capacity": capacities, "block_tokens": block, "extrapolation": stretched,
              "scrape_interval_s": SCRAPE_INTERVAL_S,
              "physics": "vLLM V1: chunked prefill (each tier's max_num_batched_tokens), one KV pool per instance "
                         "shared by running requests and cached blocks; router-visible observation",
              "repeated_block_share": trace.repeated_block_share(), "rows": rows,
              "learned": report_learned if learned is not None else None, "llm_d_ttft_choice": choice,
              "linear_scorer_weights": scorer, "paired": paired_gaps(rows),
              "wall_seconds": time.perf_counter() - started}
    name = args.name or f"gpu_fleet_{args.pool or 'all'}_mooncake"
    out = results_dir("kv_routing") / f"{name}{'_quick' if args.quick else ''}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out} in {report['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
