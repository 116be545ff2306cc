"""How much room is there above join-shortest-queue in 001's setting? A clairvoyant lookahead router
as a reference point for issue 16's target (the guided DDQN ≤ −5% mean E2E against round-robin).

The learned policies of 001's setting have not beaten join-shortest-queue (−1.99% against
round-robin on Poisson; docs/results.md). Before spending more training on them, this asks what a
far better-informed rule reaches. The lookahead router knows every request's *true* output length
(the DDQN sees a predicted bucket), and for each arriving request it simulates every instance to
completion twice, with and without the request, and routes to the instance where the request adds
the least total completion time (its own E2E plus the delay it causes to the jobs already there).
It is greedy: it ignores future arrivals, so it is a reference, not a bound. It needs the
simulator's state, so no runtime could execute it; it is not a policy the bundle ships.

Same setting, workloads and unseen seeds as `rl_workload_aware.py` (4 × Llama-2-70B on 4 A100s,
2,000 Azure-sized requests at 0.9 of capacity; Poisson, gamma CV 2, the Azure trace's timestamps).

    .venv/bin/python -m benchmarks.routing_headroom [--load 0.9] [--seeds 101 102 103]
Writes benchmarks/results/routing_headroom/routing_headroom.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time

from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.instance import Instance, Job
from routeforge.training.policies.simulator.metrics import mean_std, summarize

from benchmarks.common import gate_over, results_dir
from benchmarks.common import parser as bench_parser
from benchmarks.rl_workload_aware import SEEDS, setting

OUT = results_dir("routing_headroom")
REJECTED_COST_S = 1e6  # a rejection costs more than any completion time


def drained(inst: Instance, extra=None, at: str = "finished") -> dict[int, float]:
    """Finish time (or, with `at="first_token"`, first-token time) of every job on a copy of `inst`
    (its prefix cache copied too) when it runs with no further arrivals, `extra` (a Job) enqueued
    first; rejected jobs get `REJECTED_COST_S`. The instance itself is untouched."""
    copy = inst.clone()
    if extra is not None:
        copy.enqueue(extra, extra.enqueued)
    copy.advance(math.inf)
    return {j.rid: (REJECTED_COST_S if j.rejected else getattr(j, at)) for j in copy.done}


def served_alone_e2e(profile, requests) -> float:
    """Mean E2E with each request alone on an idle instance: no queueing, no batch slowing its steps."""
    total = 0.0
    for r in requests:
        total += drained(Instance("alone", profile), Job(r.rid, r.prompt_tokens, int(r.output_tokens[0]), 0.0))[r.rid]
    return total / len(requests)


def ttft_lower_bound(requests, profiles, block_tokens: int, served: float = 0.995) -> float:
    """A lower bound on the mean TTFT over served requests of *any* router (online or not) that serves at
    least `served` of `requests`, in this simulator (issue 60's bound for the TTFT target).

    Each request's TTFT is at least its own prefill step on the instance it lands on (the simulator's
    step: intercept + seconds per token × the step's uncached prompt tokens, plus decode time when
    others are running; queueing only adds), and its cached prefix is at most the leading blocks of
    its prompt that some *other* request of the window also holds (a block is cached only once a
    request carrying it was prefilled), capped at its prompt less one token as the simulator caps it.
    So per request: the least, over every instance, of that step with every such block cached; the
    mean over the `served` share with the smallest bounds is below any router's mean. It ignores
    queueing and batching altogether, so it is loose under load: it says how much room there could be,
    never that a router reaches it."""
    holders: dict[int, int] = {}
    for r in requests:
        for h in set(r.hash_ids):
            holders[h] = holders.get(h, 0) + 1
    bounds = []
    for r in requests:
        shared = 0
        for h in r.hash_ids:
            if holders[h] < 2:
                break
            shared += 1
        uncached = max(1, r.prompt_tokens - min(shared * block_tokens, r.prompt_tokens - 1))
        bounds.append(min(p.prefill_intercept_s + p.prefill_s_per_token * uncached for p in profiles))
    bounds.sort()
    kept = bounds[:math.ceil(served * len(bounds))]
    return sum(kept) / len(kept)


@dataclasses.dataclass
class ClairvoyantLookahead:
    """Routes each request where it adds the least total completion time, by simulating each
    instance to completion with and without it (true output lengths; see the module docstring).
    `at="first_token"`: the least own TTFT plus first-token delay caused to the jobs there
    (benchmarks/kv_routing.py's `clairvoyant_ttft`; a running job's first token is already out)."""

    at: str = "finished"
    reads_simulator_state = True  # a reference, not a router: it simulates each instance's true future
    _without: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)

    def assign(self, queue, cluster: Cluster, now: float) -> list[int]:
        return [self._choose(req, cluster, now) for req in queue]

    def _choose(self, req, cluster: Cluster, now: float) -> int:
        costs = []
        for i, inst in enumerate(cluster.instances):
            # without the request an instance's future is deterministic, so its drained finish times
            # stay valid until a request is routed to it
            base = self._without.get(i)
            if base is None or any(rid not in base for rid in list(inst.running) + [j.rid for j in inst.waiting]):
                base = self._without[i] = drained(inst, at=self.at)
            job = Job(req.rid, req.prompt_tokens, int(req.output_tokens[inst.model]), now, hash_ids=req.hash_ids)
            with_req = drained(inst, job, at=self.at)
            # the jobs' delays, and the request's own completion time (it has no base entry)
            costs.append(sum(t - base.get(rid, now) for rid, t in with_req.items()))
        choice = min(range(len(costs)), key=costs.__getitem__)
        self._without.pop(choice, None)
        return choice


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    profile, rate, workloads = setting(args.load)
    policies = {name: BASELINES[name] for name in ("round_robin", "join_shortest_queue", "earliest_available",
                                                     "least_work_left", "route_balance")}
    policies["clairvoyant_lookahead"] = ClairvoyantLookahead
    result = {"load": args.load, "rate_rps": rate, "seeds": seeds, "policies": {}, "served_alone_e2e_mean_s": {}}
    for wname, workload in workloads.items():
        # the floor no router reaches: each request alone on an idle instance (no queue, no batch)
        alone = [served_alone_e2e(profile, workload(seed)[:300] if args.quick else workload(seed)) for seed in seeds]
        result["served_alone_e2e_mean_s"][wname] = alone
        for pname, make in policies.items():
            runs, t0 = [], time.perf_counter()
            for seed in seeds:
                requests = workload(seed)
                if args.quick:
                    requests = requests[:300]
                runs.append(summarize(Cluster([profile] * 4).run(requests, make())))
            stats = mean_std(runs, ("e2e_mean_s", "e2e_p95_s", "ttft_mean_s", "served"))
            stats["e2e_mean_s_by_seed"] = [r["e2e_mean_s"] for r in runs]
            stats["wall_s"] = time.perf_counter() - t0
            result["policies"].setdefault(wname, {})[pname] = stats
        rr = result["policies"][wname]["round_robin"]["e2e_mean_s"][0]
        print(f"{wname:<24} {'served alone (floor)':<22} E2E {sum(alone) / len(alone):7.2f} s "
              f"({100 * (sum(alone) / len(alone) / rr - 1):+.2f}% vs round-robin)", flush=True)
        for pname, stats in result["policies"][wname].items():
            stats["e2e_vs_round_robin"] = stats["e2e_mean_s"][0] / rr - 1
            print(f"{wname:<24} {pname:<22} E2E {stats['e2e_mean_s'][0]:7.2f} ± {stats['e2e_mean_s'][1]:.2f} s "
                  f"({100 * stats['e2e_vs_round_robin']:+.2f}% vs round-robin; {stats['wall_s']:.0f} s)", flush=True)
    # the same paired-noise test the routing gate applies, here between the lookahead and the heuristics
    result["lookahead_vs_heuristics"] = gate_over(result["policies"], ["clairvoyant_lookahead"],
                                                  [p for p in policies if p != "clairvoyant_lookahead"],
                                                  "e2e_mean_s", trained_on="poisson")
    print(f"lookahead against the heuristics: {result['lookahead_vs_heuristics']['reason']}")
    (OUT / "routing_headroom.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
