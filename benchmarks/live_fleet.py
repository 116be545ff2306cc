"""A live fleet on this machine (issue 72, item 2): two real vLLM CPU servers of different speeds behind
`routeforge gateway`, the same trace windows sent through it under each routing policy, and the same
requests run in the simulator calibrated from those servers, side by side.

    .venv/bin/python -m benchmarks.live_fleet [--requests 120] [--seeds 3] [--loads 0.8] [--trace FILE] [--quick]

1. The servers (`.venv-vllm`, prefix caching on, each pinned to a core of its own; the gateway and the
   load generator share both cores with them, unpinned): two Llamas of random weights, `fast` (4 layers)
   and `slow` (8 layers, half the step token budget and KV space), standing in for two tiers of one
   model. Both are profiled through their own API (static batches, `server_requests.static_batches`, to
   the traffic's prompt lengths), fitted as every tier is (`profiling.batch_fits.fit_tier`) and become
   the simulated instances (their sequence limit, KV tokens and step budget).
2. Saturation, measured live: a window offered all at once through the gateway (round-robin), its
   completions per second between the 10th and 90th percentile completion times. Each load is a share
   of it.
3. The bundle: the simulator's fleet (both fits), every policy below as a spec, signed with a key of
   this run; `linear_scorer`'s weights learned by the pipeline's CMA-ES (`training.policies.
   weight_search`) in that simulator (router-visible observation) on training windows (trace rows
   after every evaluation window's); the recommendation is the policy with the least simulated mean
   TTFT on those training windows among those serving 99.5%.
4. Per policy, load and seed: a window of the trace (token-id prompts, one 64-token block per trace
   block id, at most `--max-blocks` blocks, outputs forced to their length up to 48), salted apart so no
   run starts with another's cache, sent open loop through a gateway running that policy; and the same
   requests in the simulator with that policy. Requests carry no model (`auto`): the gateway picks.

Reported per policy and load, live and simulated: mean and p95 TTFT, mean TPOT, mean and p95 E2E, goodput
(E2E within 5 × the request's E2E alone on the faster idle server, the same bound on both sides), served
share, prefix hit rate (live: the servers' counters); the simulator's error per policy, Kendall's τ
between the two rankings by mean TTFT, the learned scorer against the best deployed router with the
paired noise, the gateway's own time per request (decision and proxying, from its decision log), and the
room: each request's prefill alone on the idle fast server with its prefix cached (measured).
Not run: `llm_d_predicted_latency` (its latency model is trained by the pipeline's evaluation) and the RL
policies (their training takes longer than this benchmark). Writes
benchmarks/results/live_fleet/live_fleet.json (the decision logs stay in $ROUTEFORGE_STATE/live_fleet).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA, parser, results_dir

SHAPE = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "intermediate_size": 512,
         "max_position_embeddings": 8192}
SERVERS = {  # name: (layers, max_num_batched_tokens, KV cache tokens)
    "fast": (4, 1024, 16384),
    "slow": (8, 512, 8192),
}
MODEL = "llama-random"  # the bundle's one model, served by both
POLICIES = ("round_robin", "join_shortest_queue", "llm_d", "dynamo_kv", "sglang_cache_aware", "lmetric",
            "linear_scorer")
DEPLOYED = ("llm_d", "dynamo_kv", "sglang_cache_aware", "lmetric")
DIRECT = "round_robin (no gateway)"  # the control row: what the gateway itself costs
BLOCK_TOKENS, MAX_OUTPUT, MAX_NUM_SEQS = 64, 48, 16
# how often the gateway scrapes each server's /metrics, and the simulated observation's staleness: vLLM's
# CPU build serves /metrics (66 KB) from the API process pinned to the engine's core, 11-50 ms each, so
# a 50 ms interval took a fifth to a third of each server's core (`live_fleet_scrape50ms.json`)
SCRAPE_INTERVAL_S = 0.5


def tiers() -> list[str]:
    return [f"{MODEL}@cpu-{name}" for name in SERVERS]


def model_source(layers: int) -> dict:
    return {"kind": "random_init", "architecture": "llama", "seed": 11,
            "config": {**SHAPE, "num_hidden_layers": layers}}


def window(path: Path, n: int, start: int, rate: float, max_blocks: int):
    """`n` consecutive rows of the trace at `path` from `start`, arrivals rescaled to `rate` req/s
    (their gaps kept), prompts of at most `max_blocks` blocks, outputs of at most 48 tokens."""
    from benchmarks.simulator_vs_vllm import trace_requests

    return trace_requests(n, start, rate, max_blocks=max_blocks, path=path)


def router_for(policy: str, parameters: dict | None):
    """`policy` in the simulator, with its parameters as the bundle carries them."""
    from routeforge.training.policies.simulator.baselines import BASELINES, tuned_baseline

    return tuned_baseline(policy, parameters) if parameters else BASELINES[policy]()


def simulated(profiles, requests, router):
    """The requests in the simulator under `router`, observed as the gateway observes the servers."""
    from routeforge.training.policies.simulator.cluster import Cluster, Request

    reqs = [Request(i, r.arrival_s, len(r.block_ids) * BLOCK_TOKENS, np.array([float(r.output_tokens)]),
                    np.array([np.nan]), hash_ids=r.block_ids) for i, r in enumerate(requests)]
    return Cluster(profiles, models=[0] * len(profiles), block_tokens=BLOCK_TOKENS,
                   scrape_interval_s=SCRAPE_INTERVAL_S).run(reqs, router)


def bounds(profiles, requests) -> np.ndarray:
    """Each request's E2E bound: 5 × its E2E alone on the idle instance that would serve it fastest."""
    return np.array([5.0 * min(p.unloaded_e2e(len(r.block_ids) * BLOCK_TOKENS, r.output_tokens) for p in profiles)
                     for r in requests])


def figures(ttft, tpot, e2e, served, bound, hit_rate) -> dict:
    """The table's figures from per-request arrays (NaN where not served)."""
    ok = served.astype(bool)

    def stat(x, q=None):
        x = x[ok & np.isfinite(x)]
        return float(np.percentile(x, q) if q else x.mean()) if x.size else float("nan")

    return {"ttft_mean_s": stat(ttft), "ttft_p95_s": stat(ttft, 95), "tpot_mean_s": stat(tpot),
            "e2e_mean_s": stat(e2e), "e2e_p95_s": stat(e2e, 95), "served_share": float(ok.mean()),
            "goodput": float((ok & (np.nan_to_num(e2e, nan=np.inf) <= bound)).mean()),
            "prefix_hit_rate": hit_rate}


def live_figures(measured, bound, hit_rate) -> dict:
    from routeforge.profiling.server_requests import Measured

    ok = np.array([isinstance(m, Measured) for m in measured])
    get = lambda f: np.array([f(m) if isinstance(m, Measured) else np.nan for m in measured])  # noqa: E731
    tpot = get(lambda m: (m.e2e_s - m.ttft_s) / (m.output_tokens - 1) if m.output_tokens > 1 else np.nan)
    return figures(get(lambda m: m.ttft_s), tpot, get(lambda m: m.e2e_s), ok, bound, hit_rate)


def sim_figures(outcomes, bound, hit_rate) -> dict:
    arr = lambda f: np.array([f(o) for o in outcomes], dtype=float)  # noqa: E731
    return figures(arr(lambda o: o.ttft), arr(lambda o: o.tpot), arr(lambda o: o.e2e),
                   np.array([o.served for o in outcomes]), bound, hit_rate)


class Gateway:
    """`routeforge gateway` for one policy, as a process of its own; stopped by its PID."""

    def __init__(self, bundle: Path, public: Path, urls: list[str], policy: str, log: Path, cpus: str | None = None,
                 names: list[str] | None = None, scrape_interval_s: float | None = None):
        from routeforge.generation.local_server import free_port

        self.port = free_port()
        self.out = log.with_suffix(".out")
        pin = ["taskset", "-c", cpus] if cpus else []
        command = [*pin, sys.executable, "-m", "routeforge.artifacts.cli", "gateway", str(bundle),
                   "--public-key", str(public), "--policy", policy, "--port", str(self.port), "--log", str(log),
                   "--block-tokens", str(BLOCK_TOKENS),
                   "--scrape-interval", str(scrape_interval_s or SCRAPE_INTERVAL_S), "--max-in-flight", "4096",
                   *(f"--backend={tier}={url}" for tier, url in zip(names or tiers(), urls))]
        with open(self.out, "w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        import requests as http

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the gateway for {policy} exited: {self.out.read_text()[-2000:]}")
            with contextlib.suppress(http.RequestException):
                if http.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise SystemExit(f"the gateway for {policy} did not answer /health: {self.out.read_text()[-2000:]}")

    def stop(self) -> None:
        from routeforge.generation.local_server import stop_group

        stop_group(self.proc)


def write_bundle(folder: Path, fits: list[dict], profiles, parameters: dict, recommended: str) -> tuple[Path, Path]:
    """The live fleet's bundle: its simulator (the servers' fits), every policy, signed by a new key."""
    from types import SimpleNamespace

    from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
    from routeforge.artifacts.bundle.signing import generate_key_pair, sign_bundle
    from routeforge.artifacts.bundle.writer import ComponentSource
    from routeforge.artifacts.bundle.writer import write_bundle as write
    from routeforge.training.policies.packaging import export_heuristics, write_simulator

    settings = SimpleNamespace(queue_capacity=MAX_NUM_SEQS, kv_capacity_tokens=int(profiles[0].kv_capacity_tokens),
                               train_load=0.8)
    gate = {"recommended": recommended, "kind": "heuristic", "objective": "ttft_mean_s",
            "reason": "the least simulated mean TTFT on the training windows among the policies serving 99.5%"}
    limits = [{"kv_capacity_tokens": int(p.kv_capacity_tokens), "max_num_batched_tokens": int(p.max_num_batched_tokens)}
              for p in profiles]
    simulator = write_simulator(folder / "src" / "simulator", tiers=tiers(), models=[MODEL], instance_models=[0, 0],
                                fits=fits, settings=settings, limits=limits,
                                report={"qos_latency_per_token_s": 0.1, "capacity_rps": 0.0, "gate": gate})
    policies = export_heuristics(list(POLICIES), len(fits), folder / "src" / "policies", parameters)
    components = [ComponentSource("routing_simulator", "routing_simulator", "json", simulator.parent,
                                  config={"recommended_policy": f"policy--{recommended}",
                                          "recommendation": gate["reason"], "objective": "ttft_mean_s"})]
    components += [ComponentSource(f"policy--{n}", "routing_policy", "json", f,
                                   config={"policy": n, "policy_kind": "heuristic", "recommended": n == recommended})
                   for n, f in policies.items()]
    bundle = folder / "bundle"
    write(bundle, "live-fleet", Fleet(name="live-fleet", models=[ModelEntry(name=MODEL, engine="vllm")]), components,
          Lineage(), "benchmarks.live_fleet")
    key = folder / "keys" / "signing.key"
    if not key.exists():
        generate_key_pair(key)
    sign_bundle(bundle, key)
    return bundle, Path(f"{key}.pub")


def gateway_times(log: Path) -> dict:
    """The gateway's own time per request (parse, decide, send; and its first token's passing through),
    from its decision log."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    own = np.array([line["timing"]["gateway_s"] for line in lines if "gateway_s" in line.get("timing", {})])
    decided = np.array([a["decision_s"] for line in lines for a in line.get("routing", {}).get("attempts", [])
                        if "decision_s" in a])
    if not own.size:
        return {}
    ms = lambda x, q: float(np.percentile(x, q) * 1e3)  # noqa: E731
    out = {"requests": int(own.size), "p50_ms": ms(own, 50), "p99_ms": ms(own, 99), "max_ms": float(own.max() * 1e3),
           "decision_p50_ms": ms(decided, 50), "decision_p99_ms": ms(decided, 99)}
    parts = [line["timing"]["gateway_parts_s"] for line in lines if "gateway_parts_s" in line.get("timing", {})]
    if parts:  # where the tail lies: each part's p50/p99, and its share of the slowest 1% of requests' time
        names = list(dict.fromkeys(k for p in parts for k in p))
        table = np.array([[p.get(name, 0.0) for name in names] for p in parts])
        sums = table.sum(axis=1)
        slowest = table[sums >= np.percentile(sums, 99)]
        out["parts"] = {name: {"p50_ms": ms(table[:, j], 50), "p99_ms": ms(table[:, j], 99),
                               "share_of_slowest_1pct": float(slowest[:, j].sum() / slowest.sum())}
                        for j, name in enumerate(names)}
    return out


def kendall(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--trace", type=Path, default=DATA / "traces" / "mooncake_synthetic_trace.jsonl",
                   help="a Mooncake-format trace (JSON lines: timestamp ms, input_length, output_length, hash_ids)")
    p.add_argument("--requests", type=int, default=120, help="requests per window")
    p.add_argument("--seeds", type=int, default=3, help="windows per load (each its own rows and salt)")
    p.add_argument("--loads", type=float, nargs="+", default=[0.8], help="shares of the live fleet's saturation")
    p.add_argument("--max-blocks", type=int, default=16, help="64-token blocks a prompt keeps at most")
    p.add_argument("--policies", nargs="+", default=list(POLICIES))
    p.add_argument("--search-evaluations", type=int, default=60, help="CMA-ES candidates for linear_scorer")
    p.add_argument("--name", default="live_fleet")
    p.add_argument("--vllm-python", default=str(Path.cwd() / ".venv-vllm" / "bin" / "python"))
    args = p.parse_args()
    if args.quick:
        args.requests, args.seeds, args.search_evaluations = 40, 1, 10
        args.policies = ["round_robin", "join_shortest_queue", "llm_d", "linear_scorer"]
    from contextlib import ExitStack

    import requests as http
    from routeforge.artifacts.common.state_folder import state_root
    from routeforge.core.config import RandomInitSource
    from routeforge.core.config.training import WeightSearch
    from routeforge.core.model_sources import build_random_init
    from routeforge.core.vllm_env import kv_cache_bytes
    from routeforge.generation.local_server import vllm_serve
    from routeforge.profiling.server_requests import Measured, send
    from routeforge.training.policies.simulator.instance import InstanceProfile
    from routeforge.training.policies.simulator.metrics import summarize
    from routeforge.training.policies.simulator.server_replay import prefix_counters
    from routeforge.training.policies.weight_search import search_weights

    from benchmarks.simulator_vs_vllm import kv_tokens_of, profile_server, trace_rows

    started = time.perf_counter()
    work = state_root() / "live_fleet"
    work.mkdir(parents=True, exist_ok=True)
    rows = trace_rows(args.trace)  # read once (cached): every window below takes its rows
    n, max_prompt = args.requests, args.max_blocks * BLOCK_TOKENS
    evaluation_rows = n * args.seeds * len(args.loads)
    if len(rows) < evaluation_rows + 4 * n:
        raise SystemExit(f"{args.trace}: {len(rows)} rows; {evaluation_rows} evaluation rows and 4 training windows of "
                         f"{n} are needed (fewer --requests or --seeds)")
    cores = os.cpu_count() or 1
    result: dict = {"trace": str(args.trace), "requests": n, "seeds": args.seeds, "loads": args.loads,
                    "block_tokens": BLOCK_TOKENS, "max_blocks": args.max_blocks, "max_output_tokens": MAX_OUTPUT,
                    "scrape_interval_s": SCRAPE_INTERVAL_S,
                    "servers": {k: {"layers": v[0], "max_num_batched_tokens": v[1], "kv_cache_tokens_asked": v[2]}
                                for k, v in SERVERS.items()},
                    "machine": platform.platform(), "cores": cores,
                    "pinning": "each server on a core of its own; the gateway and the load generator unpinned"}
    with ExitStack() as stack:
        urls, profiles, fits, model_dirs = [], [], [], []
        for k, (name, (layers, step_tokens, kv_asked)) in enumerate(SERVERS.items()):
            model_dir = build_random_init(RandomInitSource(**model_source(layers)), state_root() / "models")
            log = work / f"server-{name}.log"
            url = stack.enter_context(vllm_serve(
                model_dir, log, args.vllm_python, dtype="float32", max_model_len=max_prompt + MAX_OUTPUT + 64,
                max_num_seqs=MAX_NUM_SEQS, enforce_eager=True, cpus=str(k % cores),
                kv_cache_memory_bytes=kv_cache_bytes(model_dir, kv_asked, 1, "float32"),
                extra_args=["--enable-prefix-caching", "--max-num-batched-tokens", str(step_tokens)]))
            model_dirs.append(model_dir)
            vocab = int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
            kv = kv_tokens_of(log, kv_asked)
            print(f"{name}: {url} ({layers} layers, {step_tokens} tokens a step, {kv} KV tokens); profiling",
                  flush=True)
            fit, measured = profile_server(url, str(model_dir), vocab, MAX_NUM_SEQS, print, kv, max_prompt, step_tokens)
            urls.append(url.removesuffix("/v1"))
            fits.append(fit)
            profiles.append(InstanceProfile.from_fit(fit, max_running=MAX_NUM_SEQS, kv_capacity_tokens=kv,
                                                     max_num_batched_tokens=step_tokens))
            result["servers"][name].update({"kv_cache_tokens": kv, "fit": fit, "profile": measured})

        def metrics() -> str:
            return "\n".join(http.get(f"{u}/metrics", timeout=30).text for u in urls)

        # training windows: the rows after every evaluation window's
        def training(seed: int, rate: float):
            return window(args.trace, n, evaluation_rows + (seed % 4) * n, rate, args.max_blocks)

        # saturation, live: a window all at once, through a round-robin gateway
        provisional, public = write_bundle(work, fits, profiles, {}, "round_robin")
        gateway = Gateway(provisional, public, urls, "round_robin", work / "saturation.jsonl")
        try:
            burst = [r.__class__(0.0, r.block_ids, r.output_tokens) for r in training(0, 1.0)]
            measured = send(gateway.url + "/v1", "auto", burst, BLOCK_TOKENS, vocab, salt=900_001)
        finally:
            gateway.stop()
        done = np.sort([m.e2e_s for m in measured if isinstance(m, Measured)])  # all sent at 0: completion times
        lo, hi = np.percentile(done, 10), np.percentile(done, 90)
        saturation = float(((done >= lo) & (done <= hi)).sum() / (hi - lo))
        result["saturation_rps"] = saturation
        print(f"live saturation: {saturation:.2f} req/s", flush=True)

        # the learned scorer's weights, in the simulator calibrated from these servers, at load 0.8
        parameters: dict = {}
        if "linear_scorer" in args.policies:
            def episode(policy, seed: int) -> dict:
                return summarize(simulated(profiles, training(seed, 0.8 * saturation), policy))

            search = WeightSearch(evaluations=args.search_evaluations, episodes=2, restarts=1, validation_episodes=2)
            learned = search_weights("linear_scorer", search, "ttft_mean_s", 0, episode,
                                     lambda line: print(line, flush=True))
            parameters["linear_scorer"] = learned["parameters"]
            result["linear_scorer_search"] = {k: v for k, v in learned.items() if k != "searches"}
        # the recommendation: the least simulated mean TTFT on the training windows (serving 99.5%)
        on_training = {}
        for policy in args.policies:
            runs = [summarize(simulated(profiles, training(s, 0.8 * saturation),
                                        router_for(policy, parameters.get(policy))))
                    for s in range(2)]
            on_training[policy] = {"ttft_mean_s": float(np.mean([r["ttft_mean_s"] for r in runs])),
                                   "served_share": float(np.mean([r["served_share"] for r in runs]))}
        serving = {k: v for k, v in on_training.items() if v["served_share"] >= 0.995} or on_training
        recommended = min(serving, key=lambda k: serving[k]["ttft_mean_s"])
        result["recommendation"] = {"policy": recommended, "on_training_windows": on_training}
        bundle, public = write_bundle(work, fits, profiles, parameters, recommended)
        print(f"recommended: {recommended}", flush=True)

        cells = []
        out = results_dir("live_fleet") / f"{args.name}{'_quick' if args.quick else ''}.json"
        for index, policy in enumerate([*args.policies, DIRECT]):
            # the control: round-robin straight to the servers (no gateway), as the simulator check sends
            gateway = None if policy == DIRECT else Gateway(bundle, public, urls, policy,
                                                            work / f"decisions-{policy}.jsonl")
            try:
                for li, load in enumerate(args.loads):
                    for seed in range(args.seeds):
                        start = (li * args.seeds + seed) * n
                        requests = window(args.trace, n, start, load * saturation, args.max_blocks)
                        bound = bounds(profiles, requests)
                        salt = 1000 * (li * args.seeds + seed) + index + 1
                        hits0, queries0 = prefix_counters(metrics())
                        if gateway is None:
                            measured = send([f"{u}/v1" for u in urls], str(model_dirs[0]), requests, BLOCK_TOKENS,
                                            vocab, salt, models=[str(d) for d in model_dirs])
                        else:
                            measured = send(gateway.url + "/v1", "auto", requests, BLOCK_TOKENS, vocab, salt)
                        hits1, queries1 = prefix_counters(metrics())
                        live_hits = (hits1 - hits0) / (queries1 - queries0) if queries1 > queries0 else None
                        simulated_as = "round_robin" if gateway is None else policy
                        outcomes = simulated(profiles, requests, router_for(simulated_as, parameters.get(policy)))
                        cell = {"policy": policy, "load": load, "seed": seed, "rate_rps": load * saturation,
                                "live": live_figures(measured, bound, live_hits),
                                "simulated": sim_figures(outcomes, bound, summarize(outcomes).get("prefix_hit_rate")),
                                "failures": [m for m in measured if isinstance(m, str)][:3]}
                        cells.append(cell)
                        out.write_text(json.dumps({**result, "cells": cells, "partial": True}, indent=2))
                        print(f"{policy} load {load} seed {seed}: TTFT "
                              f"{cell['live']['ttft_mean_s'] * 1e3:.0f} ms live, "
                              f"{cell['simulated']['ttft_mean_s'] * 1e3:.0f} ms simulated; E2E "
                              f"{cell['live']['e2e_mean_s']:.2f} s / {cell['simulated']['e2e_mean_s']:.2f} s; served "
                              f"{cell['live']['served_share']:.3f}; hit rate {live_hits}", flush=True)
            finally:
                if gateway is not None:
                    gateway.stop()
            if gateway is not None:
                result.setdefault("gateway_time", {})[policy] = gateway_times(work / f"decisions-{policy}.jsonl")

        # the room on these servers: each request's prefill alone on the idle fast server, prefix cached
        requests = window(args.trace, n, (len(args.loads) - 1) * args.seeds * n, 1.0, args.max_blocks)
        alone = []
        for r in requests:
            got = send(urls[0] + "/v1", str(model_dirs[0]), [r.__class__(0.0, r.block_ids, 1)], BLOCK_TOKENS, vocab,
                       salt=777_777)[0]
            if isinstance(got, Measured):
                alone.append(got.ttft_s)
        result["room"] = {"what": "each request of the last load's first window alone on the idle fast server, "
                                  "one output token, the window's earlier prompts in its prefix cache",
                          "ttft_mean_s": float(np.mean(alone)), "requests": len(alone)}
    result["cells"] = cells
    result["summary"] = summarize_cells(cells, args.loads)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    print(f"wrote {out} ({result['wall_s']:.0f} s)")


KEYS = ("ttft_mean_s", "ttft_p95_s", "tpot_mean_s", "e2e_mean_s", "e2e_p95_s", "goodput", "served_share",
        "prefix_hit_rate")


def summarize_cells(cells: list[dict], loads: list[float]) -> dict:
    """Per load: each policy's means over seeds (live, simulated), the simulator's errors, Kendall's τ of
    the rankings by mean TTFT, and the learned scorer against the best deployed router (paired gaps)."""
    out = {}
    for load in loads:
        here = [c for c in cells if c["load"] == load]
        policies = list(dict.fromkeys(c["policy"] for c in here))
        table = {}
        for policy in policies:
            mine = [c for c in here if c["policy"] == policy]
            row = {}
            for side in ("live", "simulated"):
                row[side] = {k: float(np.nanmean([c[side][k] if c[side][k] is not None else np.nan for c in mine]))
                             for k in KEYS}
            row["error"] = {k: row["simulated"][k] / row["live"][k] - 1.0
                            for k in ("ttft_mean_s", "ttft_p95_s", "e2e_mean_s", "e2e_p95_s")}
            row["live_ttft_by_seed"] = [c["live"]["ttft_mean_s"] for c in sorted(mine, key=lambda c: c["seed"])]
            table[policy] = row
        ranked = [p for p in policies if p != DIRECT]  # the control is not a policy of its own
        summary = {"policies": table,
                   "kendall_tau_ttft": kendall([table[p]["live"]["ttft_mean_s"] for p in ranked],
                                               [table[p]["simulated"]["ttft_mean_s"] for p in ranked])
                   if len(ranked) > 1 else None}
        if DIRECT in table and "round_robin" in table:  # the same routing with and without the gateway
            summary["gateway_ttft_cost"] = (table["round_robin"]["live"]["ttft_mean_s"]
                                            / table[DIRECT]["live"]["ttft_mean_s"] - 1.0)
        deployed = [p for p in policies if p in DEPLOYED and table[p]["live"]["served_share"] >= 0.995]
        if "linear_scorer" in table and deployed:
            best = min(deployed, key=lambda p: table[p]["live"]["ttft_mean_s"])
            gaps = 1.0 - (np.array(table["linear_scorer"]["live_ttft_by_seed"])
                          / np.array(table[best]["live_ttft_by_seed"]))
            summary["learned_vs_best_deployed"] = {
                "against": best, "ttft_below": float(1.0 - table["linear_scorer"]["live"]["ttft_mean_s"]
                                                     / table[best]["live"]["ttft_mean_s"]),
                "paired_gap_mean": float(gaps.mean()), "paired_gap_std": float(gaps.std()),
                "served_share": table["linear_scorer"]["live"]["served_share"]}
        out[str(load)] = summary
    return out


if __name__ == "__main__":
    main()
