"""004's setting: PPO over routing distributions (RL-PO) on a switched Poisson workload, 2 heavy +
2 light instances serving one request at a time with buffers of 15, a P98 latency requirement;
against the single-model baselines (shortest queue over the heavy instances only, over the light
ones only), shortest queue over all, round-robin and random.

Fleet: GPT-4 (heavy; BLOOM-176B on 8×A100) and Mixtral-8x7B (light; Llama-2-70B on 4×H100) from
RouterBench's test split, each request with its true output length and 0/1 correctness on both;
g_i = each model's accuracy on the train split. 004 served image classifiers in ~10 ms; LLM
requests take ~100× longer, so 004's process is stretched in time by a factor k (every rate of D0
and D1 divided by k, the slot τ and the requirement L multiplied by k) chosen so that the bursty
phase's 180/k req/s is `--burst-load` × the cluster's capacity. The normal phase (10/k req/s) is
well within what the heavy instances alone serve.

Training: episodes of `--slots` slots, half of them starting in the bursty phase (the normal phase
lasts 5,000 slots on average in 004's process, so training from the stationary start would rarely
see a burst). Evaluation: unseen seeds, episodes starting in the bursty phase, 3 seeds; metrics
over all requests and per phase (004 Table 2): violation ratio (late or rejected), goodput ratio
(correct and on time), accuracy-weighted goodput (Σ g_i ν_i per second), heavy scheduling ratio.
Also evaluated on Poisson and on the Azure trace's timestamps at the same mean rate (not trained
on). The PPO policy is exported to ONNX. Also evaluated: the best fixed split (one routing
distribution for every slot, a share of the traffic per model searched on a grid by training-episode
return; `training.policies.rl.slot_teacher`), what 004's action achieves without reading the state;
`--teacher fixed_split` starts PPO from it. `--dispatch biased_shortest_queue` (not 004's action)
lets PPO set a bias per instance each slot instead, and routes each request by shortest queue less
the biases; `--teacher shortest_queue` starts it at zero biases, join-shortest-queue exactly.
`--paired-baseline` trains on the reward less the teacher's on the same arrivals
(`training.policies.rl.paired_baseline`).

    .venv/bin/python -m benchmarks.rl_slot_distribution [--steps 60000] [--n-envs 2 --subprocess]
        [--teacher fixed_split] [--keep-best-round] [--out NAME]
        [--dispatch biased_shortest_queue --teacher shortest_queue [--paired-baseline]]
Writes benchmarks/results/rl_slot_distribution/: rl_slot_distribution.json, .png and the ONNX policy (git-ignored).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from routeforge.training.policies.learned.ppo_queue_bias.training import PpoSettings, env_policy, train_ppo
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import run_episode
from routeforge.training.policies.rl.slot_teacher import best_fixed_split
from routeforge.training.policies.simulator.baselines import JoinShortestQueue, RandomPolicy, RoundRobin
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.metrics import mean_std, summarize
from routeforge.training.policies.simulator.slot_distribution_env import SlotDistributionEnv
from routeforge.training.policies.simulator.traces import read_trace, trace_window
from routeforge.training.policies.simulator.workloads import SPP_D0, SPP_D1, arrivals, switched_poisson

from benchmarks.common import DATA, gate_over, parse_trainer_args, results_dir, trainer_parser
from benchmarks.routerbench_fleet import TIERS, routerbench_pool, save_bar_panel, tier_profile

OUT = results_dir("rl_slot_distribution")
HEAVY, LIGHT = "gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat"
SEEDS = (101, 102, 103)
BUFFER = 15


def main() -> None:
    parser = trainer_parser(__doc__)
    parser.add_argument("--steps", type=int, default=60_000, help="PPO training steps (slots)")
    parser.add_argument("--slots", type=int, default=128, help="slots per training episode")
    parser.add_argument("--eval-slots", type=int, default=300)
    parser.add_argument("--burst-load", type=float, default=0.9)
    parser.add_argument("--n-envs", type=int, default=1, help="environment copies (PpoSettings.n_envs)")
    parser.add_argument("--subprocess", action="store_true",
                        help="step the copies in worker processes (PpoSettings.subprocess; long budgets)")
    parser.add_argument("--dispatch", choices=["sample", "biased_shortest_queue"], default="sample",
                        help="the action: 004's routing distribution per slot (sample), or a bias per instance "
                             "for shortest-queue dispatch (SlotDistributionEnv.dispatch)")
    parser.add_argument("--teacher", choices=["fixed_split", "shortest_queue"], default=None,
                        help="start PPO from the best fixed split (sample dispatch) or from zero biases, "
                             "join-shortest-queue (biased_shortest_queue dispatch) (PpoSettings.teacher)")
    parser.add_argument("--pretrain-steps", type=int, default=2000, help="with --teacher (PpoSettings.pretrain_steps)")
    parser.add_argument("--keep-best-round", action="store_true",
                        help="return the pretrained or a later rollout's actor, whichever earns the best validation "
                             "return (PpoSettings.keep_best_round)")
    parser.add_argument("--validation-episodes", type=int, default=2,
                        help="episodes each keep_best_round candidate is judged on (PpoSettings.validation_episodes)")
    parser.add_argument("--paired-baseline", action="store_true",
                        help="with --teacher: train on the reward less the teacher's on the same arrivals "
                             "(PpoSettings.paired_baseline)")
    parser.add_argument("--out", default="rl_slot_distribution")
    args = parse_trainer_args(parser)
    if args.quick:
        args.steps, args.eval_slots = 1024, 50

    timings: dict[str, float] = {}
    models = [HEAVY, LIGHT]
    pool, accuracy = routerbench_pool(models, predictions=False, timings=timings)
    instance_models = [0, 0, 1, 1]
    profiles = [tier_profile(TIERS[models[m]]) for m in instance_models]
    g = [accuracy[models[m]] for m in instance_models]
    service = [p.prefill_intercept_s + p.prefill_s_per_token * pool.prompt_tokens.mean()
               + pool.output_tokens[:, m].mean() * p.decode_w_s for p, m in zip(profiles, instance_models)]
    capacity = float(sum(1 / s for s in service))
    k = 180.0 / (args.burst_load * capacity)  # time stretch
    slot, requirement = 1.0 * k, 0.300 * k
    d0, d1 = np.asarray(SPP_D0) / k, np.asarray(SPP_D1) / k
    phases: dict[tuple[int, int], int] = {}  # (seed, rid) -> phase of its arrival

    def spp(seed: int, slots: int, phase0: int, record: bool = False):
        times, ph = switched_poisson(int(180 * slots) + 1, d0, d1, seed=seed, phase0=phase0, with_phases=True,
                                    until=slots * slot)
        reqs = pool.requests(times, seed=seed)
        if record:  # evaluation episodes only: every training episode has its own seed
            phases.update({(seed, r.rid): int(p) for r, p in zip(reqs, ph)})
        return reqs

    def make_env(slots=args.slots, workload=None, dispatch=args.dispatch):
        return SlotDistributionEnv(profiles, instance_models, g, workload or (lambda s: spp(s, slots, s % 2)),
                      requirement_s=requirement, slot_s=slot, buffer=BUFFER, max_slots=slots, dispatch=dispatch)

    print(f"service times {np.round(service, 3)} s, capacity {capacity:.2f} req/s, stretch k = {k:.1f}: "
          f"slot {slot:.1f} s, requirement {requirement:.1f} s, bursty {180 / k:.2f} req/s, "
          f"normal {10 / k:.3f} req/s", flush=True)
    env = make_env()
    info = train_ppo(make_env, PpoSettings(total_steps=args.steps, n_envs=args.n_envs,
                                           subprocess=args.subprocess, teacher=args.teacher,
                                           pretrain_steps=args.pretrain_steps,
                                           keep_best_round=args.keep_best_round,
                                           validation_episodes=args.validation_episodes,
                                           paired_baseline=args.paired_baseline))
    net = info.network
    obs, _ = env.reset(seed=SEEDS[0])
    checks = [obs]
    for _ in range(40):  # observations from a busy cluster too
        obs, *_ = env.step(np.zeros(4, dtype=np.float32))
        checks.append(obs)
    output = "bias" if args.dispatch == "biased_shortest_queue" else "probabilities"
    spec = export_policy(net, OUT / f"{args.out}_policy", env.observation_spec(), env.action_spec(),
                         np.stack(checks), output=output)

    def eval_spp(seed):
        return spp(seed, args.eval_slots, 0, record=True)

    mean_rate = None

    def poisson(seed):
        return pool.requests(arrivals("poisson", 4000, rate=mean_rate, seed=seed), seed=seed)

    trace_times = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")[0]

    def trace(seed, n=4000):
        return pool.requests(trace_window(trace_times, n, mean_rate, seed)[1], seed=seed)

    heavy = tuple(i for i, m in enumerate(instance_models) if m == 0)
    light = tuple(i for i, m in enumerate(instance_models) if m == 1)
    # what 004's action does without reading the state: the best fixed split (also PPO's teacher)
    fixed = best_fixed_split(lambda: make_env(dispatch="sample"), range(2000, 2002 if args.quick else 2006),
                             5 if args.quick else 20)
    baselines = {"heavy_only_shortest_queue": lambda: JoinShortestQueue(among=heavy),
                 "light_only_shortest_queue": lambda: JoinShortestQueue(among=light),
                 "shortest_queue": JoinShortestQueue, "round_robin": RoundRobin, "random": RandomPolicy}
    result = {"fleet": {"heavy": [HEAVY, TIERS[HEAVY]], "light": [LIGHT, TIERS[LIGHT]]}, "instances": instance_models,
              "dispatch": args.dispatch,
              "accuracy_g": g, "service_s": service, "capacity_rps": capacity, "stretch_k": k, "slot_s": slot,
              "requirement_p98_s": requirement, "buffer": BUFFER, "timings": timings, "training": info.summary(),
              "onnx": {key: spec[key] for key in ("onnx_max_abs_diff", "onnx_action_agreement")},
              "best_fixed_split": {key: fixed[key] for key in ("shares", "return", "grid")}, "workloads": {}}
    for wname, workload in {"switched_poisson": eval_spp, "poisson_same_mean": poisson,
                            "azure_trace_same_mean": trace}.items():
        table = {}
        for pname in ["ppo", "best_fixed_split", *baselines]:
            runs = []
            for seed in SEEDS:
                t0 = time.perf_counter()
                if pname == "ppo":
                    outcomes = run_episode(make_env(slots=None, workload=workload), env_policy(net, output), seed)
                elif pname == "best_fixed_split":
                    outcomes = run_episode(make_env(slots=None, workload=workload, dispatch="sample"),
                                           lambda _obs: fixed["logits"], seed)
                else:
                    cluster = Cluster(make_env().profiles, models=instance_models)
                    outcomes = cluster.run(workload(seed), baselines[pname]())
                runs.append(score(outcomes, seed, phases if wname == "switched_poisson" else None, requirement, g,
                                  heavy) | {"wall_s": time.perf_counter() - t0})
            table[pname] = mean_std(runs)
            row = table[pname]
            row["goodput_ratio_by_seed"] = [r["goodput_ratio"] for r in runs]
            print(f"{wname:<22} {pname:<26} within L {row['within_requirement'][0]:.4f}, "
                  f"goodput ratio {row['goodput_ratio'][0]:.4f}, violation {row['violation_ratio'][0]:.4f}, "
                  f"heavy {row['heavy_ratio'][0]:.3f}, p98 {row['e2e_p98_s'][0]:.1f} s", flush=True)
        result["workloads"][wname] = table
        if mean_rate is None:  # the other workloads run at the switched process's realised mean rate
            mean_rate = float(np.mean([len(eval_spp(s)) / (args.eval_slots * slot) for s in SEEDS]))
            result["mean_rate_rps"] = mean_rate
    # the fixed split is a reference for what the slot action can do blind, not a policy the runtime ships
    result["gate"] = gate_over(result["workloads"], ["ppo"], [b for b in baselines if b != "random"],
                               "goodput_ratio", trained_on="switched_poisson")
    print(f"gate: recommends {result['gate']['recommended']}: {result['gate']['reason']}")
    (OUT / f"{args.out}.json").write_text(json.dumps(result, indent=2))
    plot(result, OUT / f"{args.out}.png")


def score(outcomes, seed, phases, requirement, g, heavy) -> dict[str, float]:
    """004's ratios over every arrival, overall and per phase (when the workload has phases)."""
    base = summarize(outcomes, slo_e2e_s=requirement, accuracy=g)
    out = {"within_requirement": base["slo_attainment"], "e2e_p98_s": base["e2e_p98_s"],
           "e2e_mean_s": base["e2e_mean_s"], "rejected": base["rejected"],
           "accuracy_weighted_goodput_rps": base["accuracy_weighted_goodput_rps"]}
    groups = {"": outcomes}
    if phases is not None:
        groups |= {"_bursty": [o for o in outcomes if phases[(seed, o.request.rid)] == 0],
                   "_normal": [o for o in outcomes if phases[(seed, o.request.rid)] == 1]}
    for suffix, group in groups.items():
        n = max(1, len(group))
        on_time = [o for o in group if o.served and o.e2e <= requirement]
        out[f"violation_ratio{suffix}"] = 1 - len(on_time) / n
        out[f"goodput_ratio{suffix}"] = sum(o.request.quality[o.model] for o in on_time) / n
        out[f"heavy_ratio{suffix}"] = sum(o.instance in heavy for o in group) / n
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    curve = result["training"]["curve"]
    a.plot([c["steps"] for c in curve], [c["return"] for c in curve], lw=0.8)
    paired = result["training"].get("curve_return", "return") != "return"
    a.set(xlabel="training slots", ylabel="episode return" + (" less the teacher's" if paired else ""),
          title="PPO learning curve (004 reward" + (", paired with the teacher's)" if paired else ")"))
    a.grid(alpha=0.3)
    table = result["workloads"]["switched_poisson"]
    names = list(table)
    x = np.arange(len(names))
    for j, key in enumerate(("goodput_ratio_bursty", "goodput_ratio_normal", "violation_ratio_bursty",
                             "violation_ratio_normal")):
        b.bar(x + (j - 1.5) * 0.2, [table[n][key][0] for n in names], 0.2,
              yerr=[table[n][key][1] for n in names], label=key)
    save_bar_panel(fig, b, names, path, title="switched Poisson, per phase (mean ± std over 3 seeds)")


if __name__ == "__main__":
    main()
