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

    .venv/bin/python benchmarks/rl_000.py [--steps 6000]
Writes benchmarks/results/rl_000.json, rl_000.png and rl_000_policy_{han,baseline}/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from routerbench_fleet import DATA, routerbench_pool, save_bar_panel, tier_profile  # noqa: E402

from training.rl.export import export_policy  # noqa: E402
from training.rl.rollout import greedy, run_episode, sampled  # noqa: E402
from training.rl.sac import SacSettings, train_sac  # noqa: E402
from training.simulator.baselines import BASELINES  # noqa: E402
from training.simulator.cluster import Cluster  # noqa: E402
from training.simulator.env_000 import Env000, qos  # noqa: E402
from training.simulator.metrics import mean_std  # noqa: E402
from training.simulator.workloads import RequestPool, arrivals, read_trace  # noqa: E402

OUT = REPO / "benchmarks" / "results"
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6000, help="SAC training steps (decisions) per policy")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--requirement-ms", type=float, default=60.0)
    parser.add_argument("--episode", type=int, default=500, help="requests per training episode")
    args = parser.parse_args()

    timings: dict[str, float] = {}
    models = list(EXPERTS)
    table_pool, _ = routerbench_pool(models, predictions=True, timings=timings)
    _, trace_prompt, trace_output = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")
    lengths = np.random.default_rng(0).choice(trace_output, size=len(table_pool))
    pool = RequestPool(table_pool.prompt_tokens, np.repeat(lengths[:, None], len(models), axis=1),
                       table_pool.quality, table_pool.tasks, models, None, table_pool.predicted_quality)
    profiles = [tier_profile(tier, max_running=PAD, buffer=PAD, kv_capacity_tokens=kv_tokens(gpus))
                for tier, gpus in EXPERTS.values()]
    capacity = sum(p.capacity_rps(pool.prompt_tokens.mean(), lengths.mean()) for p in profiles)
    rate = args.load * capacity
    requirement = args.requirement_ms / 1000
    trace_times = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")[0]

    def poisson(seed, n=N_EVAL):
        return pool.requests(arrivals("poisson", n, rate=rate, seed=seed), seed=seed)

    def trace(seed, n=N_EVAL):
        start = seed * n % (len(trace_times) - n)
        t = trace_times[start:start + n] - trace_times[start]
        return pool.requests(t * (n / rate) / t[-1], seed=seed)

    def make_env(variant, workload=poisson):
        return Env000(profiles, list(range(len(models))), workload, requirement, variant=variant, pad=PAD)

    print(f"capacity {capacity:.2f} req/s, rate {rate:.2f} req/s, L {args.requirement_ms} ms/token, "
          f"KV tokens {[p.kv_capacity_tokens for p in profiles]}", flush=True)
    result = {"experts": EXPERTS, "rate_rps": rate, "capacity_rps": capacity, "load": args.load,
              "requirement_s_per_token": requirement, "pad": PAD, "timings": timings, "training": {},
              "workloads": {}}
    learned = {}
    for variant in ("han", "baseline"):
        env = make_env(variant, lambda s: poisson(s, args.episode))
        net, info = train_sac(env, SacSettings(total_steps=args.steps, learn_every=2))
        result["training"][variant] = info
        learned[f"sac_{variant}"] = (variant, net, greedy)
        learned[f"sac_{variant}_sampled"] = (variant, net, sampled)
        obs, _ = env.reset(seed=SEEDS[0])
        checks = [obs]
        for _ in range(60):  # observations of a filling cluster too
            obs, *_ = env.step(1 + len(checks) % len(models))
            checks.append(obs)
        spec = export_policy(net, OUT / f"rl_000_policy_{variant}", env.observation_spec(), env.action_spec(),
                             np.stack(checks), output="logits")
        result.setdefault("onnx", {})[variant] = {k: spec[k] for k in ("onnx_max_abs_diff",
                                                                        "onnx_action_agreement")}
    for wname, workload in {"poisson": poisson, "azure_trace_timestamps": trace}.items():
        table = {}
        for pname in [*learned, *BASELINES]:
            runs = []
            for seed in SEEDS:
                t0 = time.perf_counter()
                if pname in learned:
                    variant, net, how = learned[pname]
                    act = greedy(net) if how is greedy else sampled(net, seed)
                    outcomes = run_episode(make_env(variant, workload), act, seed)
                else:
                    env = make_env("baseline")
                    outcomes = Cluster(env.profiles, models=env.models).run(workload(seed), BASELINES[pname]())
                runs.append(score(outcomes, requirement) | {"wall_s": time.perf_counter() - t0})
            table[pname] = mean_std(runs)
            row = table[pname]
            print(f"{wname:<24} {pname:<22} QoS {row['qos_mean'][0]:.4f} ± {row['qos_mean'][1]:.4f}, "
                  f"latency/token {1000 * row['latency_per_token_s'][0]:.1f} ms, dropped {row['dropped'][0]:.0f}, "
                  f"rejected {row['rejected'][0]:.0f}", flush=True)
        for row in table.values():
            row["qos_vs_baseline_rl"] = row["qos_mean"][0] / table["sac_baseline"]["qos_mean"][0] - 1
        result["workloads"][wname] = table
    result["paper_000"] = {"qos_vs_baseline_rl_poisson": 0.3578, "qos_vs_baseline_rl_trace": ">= 0.3347"}
    (OUT / "rl_000.json").write_text(json.dumps(result, indent=2))
    plot(result, OUT / "rl_000.png")


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


if __name__ == "__main__":
    main()
