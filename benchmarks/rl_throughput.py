"""Environment decisions per second of the three learned-routing settings, with the policy network
in the loop (issue 16's first obstacle: the papers train 10^6-10^7 decisions).

For each environment: decisions per second stepping it with random actions (the simulator and the
observation alone), and with the policy network choosing every action (one forward pass per
decision, no gradients: the cost of collecting experience, before any learning update), and with
`--copies` environments (16 and 64 by default) stepped together behind one batched forward pass. Actions are random in
every row (the network's output is computed, then ignored), so the simulated dynamics, and so the
simulator's share of the cost, are the same in all three: an untrained network's actions (always
"wait", say) would make steps artificially cheap or dear. One process,
this machine's 2 cores, one torch thread; `--seconds` of stepping each, episodes reset as they end.
This measures what collection can reach; the trainers also update every 2–4 decisions, which
`--training` includes (below).

- 001 (`WorkloadAwareEnv`, workload-guided): 4 Llama-2-70B@A100x4 instances (splitwise fit), Azure
  conversation trace lengths, Poisson at 0.9 load; the DDQN's MLP Q network;
- 000 (`QosGraphEnv`, HAN): the 6 splitwise tiers of `benchmarks.rl_qos_graph`, trace lengths, random
  scores (throughput does not depend on their values); SAC's HAN actor;
- 004 (`SlotDistributionEnv`): `benchmarks.rl_slot_distribution`'s setting (2 heavy + 2 light
  instances, 004's switched Poisson time-stretched, 128-slot episodes); PPO's MLP actor.

    .venv/bin/python -m benchmarks.rl_throughput [--seconds 20] [--environments NAME ...] [--out NAME]
Writes benchmarks/results/rl_throughput/rl_throughput.json.

`--training`: decisions per second of the double DQN's whole training loop (collection, replay
buffer and one update per 4 decisions) in 001's setting, from scratch, `--episodes` episodes of
2,000 requests, with one environment and with `--copies` environments stepped together
(`DdqnSettings.n_envs`). Writes rl_throughput_training.json.
"""

from __future__ import annotations

import json
import time
from functools import partial

import numpy as np
import torch
from routeforge.training.policies.learned.sac_qos.training import SacSettings, networks
from routeforge.training.policies.rl.networks import mlp
from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv
from routeforge.training.policies.simulator.slot_distribution_env import SlotDistributionEnv
from routeforge.training.policies.simulator.traces import read_trace
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv
from routeforge.training.policies.simulator.workloads import SPP_D0, SPP_D1, RequestPool, arrivals, switched_poisson

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser
from benchmarks.rl_slot_distribution import HEAVY, LIGHT
from benchmarks.routerbench_fleet import TIERS, tier_profile

OUT = results_dir("rl_throughput")
QOS_TIERS = ["llama2-70b@h100-80gb-tp8", "llama2-70b@h100-80gb-tp4", "llama2-70b@h100-80gb-tp2",
             "llama2-70b@a100-80gb-tp8", "llama2-70b@a100-80gb-tp4", "llama2-70b@a100-80gb-tp2"]


def _pool(n_models: int) -> RequestPool:
    _, prompt, output = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")
    pool = RequestPool.from_trace(prompt, output, n_models)
    scores = np.random.default_rng(0).random(pool.quality.shape)
    return RequestPool(pool.prompt_tokens, pool.output_tokens, scores, pool.tasks, pool.models, None, scores)


def workload_aware() -> tuple[WorkloadAwareEnv, torch.nn.Module]:
    profile = tier_profile("llama2-70b@a100-80gb-tp4", max_running=64, kv_capacity_tokens=400_000)
    pool = _pool(1)
    rate = 0.9 * 4 * profile.capacity_rps(pool.prompt_tokens.mean(), pool.output_tokens.mean())
    env = WorkloadAwareEnv([profile] * 4, lambda s: pool.requests(arrivals("poisson", 2000, rate=rate, seed=s), seed=s),
                           variant="guided")
    return env, mlp(env.observation_space.shape[0], env.action_space.n, (64, 64))


def qos_graph() -> tuple[QosGraphEnv, torch.nn.Module]:
    profiles = [tier_profile(t, max_running=5, buffer=5) for t in QOS_TIERS]
    pool = _pool(len(profiles))
    rate = 0.9 * sum(p.capacity_rps(pool.prompt_tokens.mean(), pool.output_tokens.mean()) for p in profiles)
    def workload(seed: int):
        return pool.requests(arrivals("poisson", 1000, rate=rate, seed=seed), seed=seed)

    env = QosGraphEnv(profiles, list(range(len(profiles))), workload, 0.05, variant="han")
    actor, _ = networks(env, SacSettings())
    return env, actor


def slot_distribution(dispatch: str = "sample") -> tuple[SlotDistributionEnv, torch.nn.Module]:
    """`benchmarks.rl_slot_distribution`'s training environment: GPT-4 (BLOOM-176B tier) x 2 and
    Mixtral (Llama-2-70B tier) x 2, 004's switched Poisson stretched by k so the bursty phase is 0.9
    of capacity, episodes of 128 slots, half starting bursty (trace lengths stand in for RouterBench's);
    `dispatch`: 004's sampled distribution, or biases for shortest-queue dispatch (routes request by request)."""
    models = [0, 0, 1, 1]
    profiles = [tier_profile(TIERS[m]) for m in (HEAVY, HEAVY, LIGHT, LIGHT)]
    pool = _pool(2)
    service = [p.prefill_intercept_s + p.prefill_s_per_token * pool.prompt_tokens.mean()
               + pool.output_tokens[:, m].mean() * p.decode_w_s for p, m in zip(profiles, models)]
    k = 180.0 / (0.9 * float(sum(1 / s for s in service)))
    slot, slots = 1.0 * k, 128
    d0, d1 = np.asarray(SPP_D0) / k, np.asarray(SPP_D1) / k

    def workload(seed: int):
        times = switched_poisson(int(180 * slots) + 1, d0, d1, seed=seed, phase0=seed % 2,
                                 until=slots * slot)
        return pool.requests(times, seed=seed)

    env = SlotDistributionEnv(profiles, models, [0.9, 0.9, 0.7, 0.7], workload, requirement_s=0.3 * k, slot_s=slot,
                              buffer=15, max_slots=slots, dispatch=dispatch)
    return env, mlp(env.observation_space.shape[0], env.action_space.shape[0], (64, 64))


def _random_action(env, rng: np.random.Generator):
    return env.action_space.sample() if not hasattr(env.action_space, "n") else int(rng.integers(env.action_space.n))


def _forward(net: torch.nn.Module, observations: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.as_tensor(observations, dtype=torch.float32)).numpy()


def decisions_per_second(env, net: torch.nn.Module | None, seconds: float) -> dict:
    rng = np.random.default_rng(0)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    decisions, episodes = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        if net is not None:
            _forward(net, obs[None])
        obs, _, terminated, truncated, _ = env.step(_random_action(env, rng))
        decisions += 1
        if terminated or truncated:
            episodes += 1
            obs, _ = env.reset(seed=episodes)
    elapsed = time.perf_counter() - start
    return {"decisions": decisions, "seconds": round(elapsed, 2), "decisions_per_s": round(decisions / elapsed, 1),
            "episodes_finished": episodes}


def batched_decisions_per_second(build, copies: int, seconds: float) -> dict:
    """`copies` environments stepped together, their actions from one batched forward pass (the
    shape a vectorized collector takes; each copy resets on its own as its episode ends)."""
    pairs = [build() for _ in range(copies)]
    envs, net = [e for e, _ in pairs], pairs[0][1].eval()
    rng = np.random.default_rng(0)
    for i, env in enumerate(envs):
        env.action_space.seed(i)
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    decisions, episodes = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        _forward(net, np.stack(obs))
        for i, env in enumerate(envs):
            obs[i], _, terminated, truncated, _ = env.step(_random_action(env, rng))
            if terminated or truncated:
                episodes += 1
                obs[i], _ = env.reset(seed=copies + episodes)
        decisions += copies
    elapsed = time.perf_counter() - start
    return {"copies": copies, "decisions": decisions, "seconds": round(elapsed, 2),
            "decisions_per_s": round(decisions / elapsed, 1), "episodes_finished": episodes}


def training_decisions_per_second(copies: int, episodes: int) -> dict:
    from routeforge.training.policies.learned.ddqn_workload_guided.training import DdqnSettings, train_ddqn

    env, _ = workload_aware()
    start = time.perf_counter()
    info = train_ddqn(env, DdqnSettings(episodes=episodes, n_envs=copies, teacher=None), log=lambda _: None)
    elapsed = time.perf_counter() - start
    decisions = max(c["steps"] for c in info.curve)
    return {"copies": copies, "episodes": episodes, "decisions": decisions, "seconds": round(elapsed, 1),
            "decisions_per_s": round(decisions / elapsed, 1)}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--copies", type=int, nargs="+", default=[16, 64],
                        help="environments stepped together, one batched row per count (--training: the largest)")
    parser.add_argument("--training", action="store_true", help="the DDQN's training loop instead (see above)")
    parser.add_argument("--episodes", type=int, default=16, help="with --training")
    parser.add_argument("--environments", nargs="+", choices=list(ENVIRONMENTS), default=list(DEFAULT_ENVIRONMENTS),
                        help="which rows to measure (the biased-shortest-queue 004 row is opt-in)")
    parser.add_argument("--out", default="rl_throughput", help="result file name (without .json)")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    torch.set_num_threads(1)
    if args.training:
        episodes = 2 if args.quick else args.episodes
        rows = [training_decisions_per_second(n, episodes) for n in (1, max(args.copies))]
        for row in rows:
            print(f"DDQN training, {row['copies']} environment(s): {row['decisions']} decisions in {row['seconds']} s, "
                  f"{row['decisions_per_s']} per second", flush=True)
        (OUT / "rl_throughput_training.json").write_text(json.dumps({"torch_threads": 1, "rows": rows}, indent=2))
        return
    result = {"seconds_each": seconds, "torch_threads": 1, "environments": {}}
    for name in args.environments:
        build = ENVIRONMENTS[name]
        env, net = build()
        row = {"environment_only": decisions_per_second(env, None, seconds),
               "with_policy_network": decisions_per_second(env, net.eval(), seconds),
               "batched_policy_network": [batched_decisions_per_second(build, n, seconds) for n in args.copies]}
        result["environments"][name] = row
        batched = ", ".join(f"{b['decisions_per_s']} with {b['copies']} copies" for b in row["batched_policy_network"])
        print(f"{name}: {row['environment_only']['decisions_per_s']} decisions/s alone, "
              f"{row['with_policy_network']['decisions_per_s']} with the policy network, {batched} "
              "(batched inference)", flush=True)
    (OUT / f"{args.out}.json").write_text(json.dumps(result, indent=2))


ENVIRONMENTS = {"001_workload_aware_guided": workload_aware, "000_qos_graph_han": qos_graph,
                "004_slot_distribution": slot_distribution,
                "004_slot_distribution_biased_shortest_queue": partial(slot_distribution, "biased_shortest_queue")}
DEFAULT_ENVIRONMENTS = ("001_workload_aware_guided", "000_qos_graph_han", "004_slot_distribution")


if __name__ == "__main__":
    main()
