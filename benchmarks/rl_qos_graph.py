"""000's setting: 6 heterogeneous experts, Poisson arrivals, a per-token latency requirement;
discrete SAC over the HAN state abstraction with the QoS-aware reward (action impact estimator,
drop action) against 000's baseline RL (expert-level features, completion reward, MLP) and every
non-learned baseline, in average QoS and latency per token.

Experts: six open models of RouterBench (their true 0/1 correctness on each test prompt is the
score s), each on a different splitwise Llama-2-70B tier (A100 / H100 × 2, 4, 8 GPUs), KV-cache
capacity from the tier's memory (0.9 · (80 GB · GPUs − 140 GB weights) / 327,680 bytes per token),
5 running and 5 waiting requests at most (000's queue capacity 5). RouterBench's answers are a
letter (5–7 tokens); a per-token latency requirement needs generations, so each request's output
length comes from the Azure conversation trace (the same length on every expert). Policies see the
KNN estimator's predicted scores (000's PS) and the true lengths (TL). L = `--requirement-ms`.

Training on Poisson at `--load` × the fleet's capacity; evaluation on unseen Poisson seeds and on
the Azure trace's timestamps rescaled to the same mean rate (not trained on), 3 seeds, 1,000
requests each. Each SAC policy is evaluated greedily (its most probable action) and as trained (an action drawn
from its distribution); both are exported to ONNX.

    .venv/bin/python -m benchmarks.rl_qos_graph [--steps 6000] [--learn-every 2] [--n-envs 1] [--torch-threads 1]
Writes benchmarks/results/rl_qos_graph/: rl_qos_graph.json, .png and the ONNX policies (git-ignored).

000's ablation of the predictors (PS/PL/ZS/ZL; here with true lengths in place of PL):

    .venv/bin/python -m benchmarks.rl_qos_graph --ablation [--steps 6000] [--signals PS+TL ZS+ZL ...]
Writes benchmarks/results/rl_qos_graph/rl_qos_graph_ablation.{json,png}.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from routeforge.training.policies.learned.sac_qos.training import SacSettings, train_sac
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import greedy, run_episode, sampled
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.metrics import mean_std
from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv, qos
from routeforge.training.policies.simulator.traces import read_trace, trace_window
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

from benchmarks.common import DATA, gate_over, parse_trainer_args, results_dir, trainer_parser
from benchmarks.routerbench_fleet import routerbench_pool, save_bar_panel, tier_profile

OUT = results_dir("rl_qos_graph")
EXPERTS = {  # model -> (splitwise tier, GPUs)
    "mistralai/mistral-7b-chat": ("llama2-70b@h100-80gb-tp8", 8),
    "WizardLM/WizardLM-13B-V1.2": ("llama2-70b@h100-80gb-tp4", 4),
    "meta/code-llama-instruct-34b-chat": ("llama2-70b@h100-80gb-tp2", 2),
    "zero-one-ai/Yi-34B-Chat": ("llama2-70b@a100-80gb-tp8", 8),
    "mistralai/mixtral-8x7b-chat": ("llama2-70b@a100-80gb-tp4", 4),
    "meta/llama-2-70b-chat": ("llama2-70b@a100-80gb-tp2", 2),
}
SEEDS = (101, 102, 103)
N_EVAL = 1000
PAD = 5


def kv_tokens(gpus: int) -> int:
    return int(0.9 * (80e9 * gpus - 140e9) / 327_680)


SIGNALS = {  # 000's ablation (RouterBench's lengths are replaced by the trace's, so no PL): (quality, length)
    "PS+TL": ("predicted", "true"), "TS+TL": ("true", "true"), "ZS+TL": ("zero", "true"),
    "PS+ZL": ("predicted", "zero"), "ZS+ZL": ("zero", "zero")}
SIGNAL_BASELINES = ("quality_only", "route_balance", "least_work_left", "join_shortest_queue")


class Setting:
    """The experts, their pool of labelled requests and the two evaluation workloads."""

    def __init__(self, args, predictor: str = "knn"):
        self.timings: dict[str, float] = {}
        self.models = list(EXPERTS)
        table_pool, _ = routerbench_pool(self.models, predictions=True, timings=self.timings, predictor=predictor)
        trace_times, _, trace_output = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")
        lengths = np.random.default_rng(0).choice(trace_output, size=len(table_pool))
        self.pool = RequestPool(table_pool.prompt_tokens, np.repeat(lengths[:, None], len(self.models), axis=1),
                                table_pool.quality, table_pool.tasks, self.models, None, table_pool.predicted_quality)
        self.profiles = [tier_profile(tier, max_running=PAD, buffer=PAD, kv_capacity_tokens=kv_tokens(gpus))
                         for tier, gpus in EXPERTS.values()]
        self.capacity = sum(p.capacity_rps(self.pool.prompt_tokens.mean(), lengths.mean()) for p in self.profiles)
        self.rate = args.load * self.capacity
        self.requirement = args.requirement_ms / 1000
        self.trace_times = trace_times
        self.experts = list(range(len(self.models)))
        self.header = {"experts": EXPERTS, "rate_rps": self.rate, "capacity_rps": self.capacity, "load": args.load,
                       "requirement_s_per_token": self.requirement, "pad": PAD, "timings": self.timings}
        print(f"capacity {self.capacity:.2f} req/s, rate {self.rate:.2f} req/s, L {args.requirement_ms} ms/token, "
              f"KV tokens {[p.kv_capacity_tokens for p in self.profiles]}", flush=True)

    def poisson(self, seed, n=N_EVAL, pool=None):
        return (pool or self.pool).requests(arrivals("poisson", n, rate=self.rate, seed=seed), seed=seed)

    def trace(self, seed, n=N_EVAL, pool=None):
        return (pool or self.pool).requests(trace_window(self.trace_times, n, self.rate, seed)[1], seed=seed)

    def env(self, variant, workload):
        return QosGraphEnv(self.profiles, self.experts, workload, self.requirement, variant=variant, pad=PAD)

    def evaluate(self, policies: dict, workload, label: str) -> dict:
        """policies: name -> (variant, seed -> act) for SAC, or a baseline class; 3 seeds each."""
        table = {}
        for pname, policy in policies.items():
            runs = []
            for seed in SEEDS:
                t0 = time.perf_counter()
                if isinstance(policy, tuple):
                    variant, act_for = policy
                    outcomes = run_episode(self.env(variant, workload), act_for(seed), seed)
                else:
                    outcomes = Cluster(self.profiles, models=self.experts).run(workload(seed), policy())
                runs.append(score(outcomes, self.requirement) | {"wall_s": time.perf_counter() - t0})
            table[pname] = row = mean_std(runs)
            row["qos_mean_by_seed"] = [r["qos_mean"] for r in runs]
            print(f"{label:<24} {pname:<22} QoS {row['qos_mean'][0]:.4f} ± {row['qos_mean'][1]:.4f}, "
                  f"latency/token {1000 * row['latency_per_token_s'][0]:.1f} ms, dropped {row['dropped'][0]:.0f}, "
                  f"rejected {row['rejected'][0]:.0f}", flush=True)
        return table


def main() -> None:
    parser = trainer_parser(__doc__)
    parser.add_argument("--steps", type=int, default=6000, help="SAC training steps (decisions) per policy")
    parser.add_argument("--learn-every", type=int, default=2,
                        help="decisions per SAC update (SacSettings.learn_every): the budget's update-to-data ratio")
    parser.add_argument("--n-envs", type=int, default=1,
                        help="environment copies stepped together behind one batched forward (SacSettings.n_envs)")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--requirement-ms", type=float, default=60.0)
    parser.add_argument("--episode", type=int, default=500, help="requests per training episode")
    parser.add_argument("--ablation", action="store_true",
                        help="instead of the comparison: 000's signal ablation, one SAC + HAN policy trained and "
                             "evaluated per signal setting (the baseline RL sees no per-request signal)")
    parser.add_argument("--signals", nargs="+", choices=list(SIGNALS), default=list(SIGNALS),
                        help="the ablation's signal settings")
    parser.add_argument("--teacher", default=None,
                        help="start SAC from a heuristic: auto (the best on training seeds) or a name")
    parser.add_argument("--target-entropy-weight", type=float, default=0.5)
    parser.add_argument("--bc-floor", type=float, default=0.0,
                        help="with --teacher: the least weight of the behaviour-cloning pull (SacSettings.bc_floor)")
    parser.add_argument("--demo-episodes", type=int, default=4,
                        help="with --teacher: episodes of demonstrations (SacSettings.demo_episodes)")
    parser.add_argument("--clone-steps", type=int, default=0,
                        help="with --teacher: actor-only cloning updates first (SacSettings.clone_steps)")
    parser.add_argument("--teacher-choice", choices=["return", "clone"], default="return",
                        help="with --teacher auto: judge the teachers by their own returns or their clones' "
                             "(SacSettings.teacher_choice)")
    parser.add_argument("--keep-best-round", action="store_true",
                        help="return the pretrained or a later round's actor, whichever earns the best validation "
                             "return (SacSettings.keep_best_round)")
    parser.add_argument("--paired-baseline", action="store_true",
                        help="with --teacher: train on the reward less the teacher's on the same arrivals "
                             "(SacSettings.paired_baseline)")
    parser.add_argument("--out", default="rl_qos_graph")
    args = parse_trainer_args(parser)
    if args.quick:
        args.steps, args.episode = 200, 100
    setting = Setting(args)
    if args.ablation:
        ablation(setting, args)
    else:
        compare(setting, args)


def compare(setting: Setting, args) -> None:
    result = setting.header | {"training": {}, "workloads": {}}
    learned = {}
    for variant in ("han", "baseline"):
        env = setting.env(variant, lambda s: setting.poisson(s, args.episode))
        info = train_sac(env, SacSettings(total_steps=args.steps, learn_every=args.learn_every,
                                          n_envs=args.n_envs, teacher=args.teacher,
                                          paired_baseline=args.paired_baseline,
                                          target_entropy_weight=args.target_entropy_weight,
                                          bc_floor=args.bc_floor, clone_steps=args.clone_steps,
                                          demo_episodes=args.demo_episodes,
                                          teacher_choice=args.teacher_choice,
                                          keep_best_round=args.keep_best_round))
        net = info.network
        result["training"][variant] = info.summary()
        learned[f"sac_{variant}"] = (variant, lambda seed, net=net: greedy(net))
        learned[f"sac_{variant}_sampled"] = (variant, lambda seed, net=net: sampled(net, seed))
        obs, _ = env.reset(seed=SEEDS[0])
        checks = [obs]
        for _ in range(60):  # observations of a filling cluster too
            obs, *_ = env.step(1 + len(checks) % len(setting.models))
            checks.append(obs)
        spec = export_policy(net, OUT / f"{args.out}_policy_{variant}", env.observation_spec(), env.action_spec(),
                             np.stack(checks), output="logits")
        result.setdefault("onnx", {})[variant] = {k: spec[k] for k in ("onnx_max_abs_diff",
                                                                        "onnx_action_agreement")}
    for wname, workload in {"poisson": setting.poisson, "azure_trace_timestamps": setting.trace}.items():
        table = setting.evaluate(learned | dict(BASELINES), workload, wname)
        for row in table.values():
            row["qos_vs_baseline_rl"] = row["qos_mean"][0] / table["sac_baseline"]["qos_mean"][0] - 1
        result["workloads"][wname] = table
    result["paper_000"] = {"qos_vs_baseline_rl_poisson": 0.3578, "qos_vs_baseline_rl_trace": ">= 0.3347"}
    result["teacher"], result["target_entropy_weight"] = args.teacher, args.target_entropy_weight
    result.update(bc_floor=args.bc_floor, clone_steps=args.clone_steps, teacher_choice=args.teacher_choice,
                  demo_episodes=args.demo_episodes, keep_best_round=args.keep_best_round,
                  learn_every=args.learn_every, n_envs=args.n_envs, paired_baseline=args.paired_baseline)
    result["gate"] = gate_over(result["workloads"], list(learned), [b for b in BASELINES if b != "random"],
                               "qos_mean", trained_on="poisson")
    print(f"gate: recommends {result['gate']['recommended']}: {result['gate']['reason']}")
    (OUT / f"{args.out}.json").write_text(json.dumps(result, indent=2))
    plot(result, OUT / f"{args.out}.png")


def ablation(setting: Setting, args) -> None:
    """000's study: SAC + HAN trained and evaluated (Poisson, unseen seeds) with the predicted, true
    or zero quality scores and lengths in its features and its action impact estimate; the baselines
    that read those signals alongside. The policy acts by sampling, as trained (its greedy action
    collapses to drop, see the comparison)."""
    variant = "han"
    result = setting.header | {"variant": variant, "steps": args.steps, "signals": {}}
    for name in args.signals:
        quality, length = SIGNALS[name]
        pool = setting.pool.ablated(quality=quality, length=length)
        env = setting.env(variant, lambda s, pool=pool: setting.poisson(s, args.episode, pool))
        t0 = time.perf_counter()
        info = train_sac(env, SacSettings(total_steps=args.steps, learn_every=2, teacher=args.teacher))
        net = info.network
        policies = {"sac_sampled": (variant, lambda seed, net=net: sampled(net, seed))}
        policies |= {b: BASELINES[b] for b in SIGNAL_BASELINES}
        table = setting.evaluate(policies, lambda s, pool=pool: setting.poisson(s, pool=pool), name)
        result["signals"][name] = {"quality": quality, "length": length, "train_s": time.perf_counter() - t0,
                                   "curve": info.curve, "policies": table}
    if "PS+TL" in result["signals"]:
        base = result["signals"]["PS+TL"]["policies"]["sac_sampled"]["qos_mean"][0]
        for entry in result["signals"].values():
            entry["sac_sampled_qos_vs_ps_tl"] = entry["policies"]["sac_sampled"]["qos_mean"][0] / base - 1
    result["paper_000"] = {"ps_pl_qos_vs_zs_zl": 0.1794, "ps_pl_latency_per_token_vs_zs_zl": -0.0133}
    (OUT / "rl_qos_graph_ablation.json").write_text(json.dumps(result, indent=2))
    plot_ablation(result, OUT / "rl_qos_graph_ablation.png")


def score(outcomes, requirement: float) -> dict[str, float]:
    """000's metrics over every request: average QoS (0 for dropped or rejected), mean latency per
    token over served requests, counts."""
    phi = [qos(o.job, o.request, o.model, requirement) if o.job is not None else 0.0 for o in outcomes]
    served = [o for o in outcomes if o.served]
    per_token = [o.e2e / max(1, o.job.output_tokens) for o in served]
    return {"qos_mean": float(np.mean(phi)), "latency_per_token_s": float(np.mean(per_token)) if per_token else np.nan,
            "served": float(len(served)), "dropped": float(sum(o.instance == -1 for o in outcomes)),
            "rejected": float(sum(o.instance >= 0 and not o.served for o in outcomes)),
            "quality_served": float(np.mean([o.request.quality[o.model] for o in served])) if served else np.nan}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for variant, info in result["training"].items():
        a.plot([c["steps"] for c in info["curve"]], [c["return"] for c in info["curve"]], "-o", ms=2, label=variant)
    a.set(xlabel="training steps (decisions)", ylabel="episode return", title="SAC learning curves")
    a.legend()
    a.grid(alpha=0.3)
    names = list(result["workloads"]["poisson"])
    x = np.arange(len(names))
    for j, (wname, table) in enumerate(result["workloads"].items()):
        b.bar(x + (j - 0.5) * 0.4, [table[n]["qos_mean"][0] for n in names], 0.4,
              yerr=[table[n]["qos_mean"][1] for n in names], label=wname)
    save_bar_panel(fig, b, names, path, ylabel="average QoS",
                   title=f"000 setting, L = {1000 * result['requirement_s_per_token']:.0f} ms/token")


def plot_ablation(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    signals = list(result["signals"])
    names = list(result["signals"][signals[0]]["policies"])
    width = 0.8 / len(signals)
    for j, sig in enumerate(signals):
        table = result["signals"][sig]["policies"]
        ax.bar(np.arange(len(names)) + (j - (len(signals) - 1) / 2) * width, [table[n]["qos_mean"][0] for n in names],
               width, yerr=[table[n]["qos_mean"][1] for n in names], label=sig)
    save_bar_panel(fig, ax, names, path, ylabel="average QoS (Poisson)",
                   title=f"000's signal ablation, SAC + HAN trained {result['steps']} steps")


if __name__ == "__main__":
    main()
