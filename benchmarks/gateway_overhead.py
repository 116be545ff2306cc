"""What `routeforge gateway` itself adds to a request (issue 72): its own time on the path to the
first token (reading and parsing the body, the model's choice, the dispatcher's decision, the send,
and the first token's passing through) and the decision alone, on a core of its own.

    .venv/bin/python -m benchmarks.gateway_overhead [--requests 600] [--rate 8] [--policies ...] [--quick]

One vLLM CPU server (`benchmarks.live_fleet`'s fast Llama) pinned to core 1 with the load generator,
the gateway pinned to core 0, alone there; the bundle's fleet is that server twice (two backends
naming the same URL, so a policy has a choice to make and a prefix index to keep; they keep
`live_fleet`'s two tier names). Requests: the
Mooncake trace's rows as token-id prompts (at most 16 blocks of 64 tokens, outputs up to 48),
arriving with the trace's own gaps rescaled to `--rate` (about the live fleet's rate at load 0.8). The
gateway's figures come from its decision log (`timing.gateway_s`, `routing.attempts[].decision_s`).
Compared with `benchmarks/live_fleet.py`'s figures, where the gateway shares both cores with the
servers, this is the gateway's cost without contention. Writes
benchmarks/results/gateway_overhead/gateway_overhead.json.
"""

from __future__ import annotations

import json
import os
import platform
import time

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import DATA, parser, results_dir
from benchmarks.live_fleet import (
    BLOCK_TOKENS,
    MAX_NUM_SEQS,
    SERVERS,
    Gateway,
    gateway_times,
    model_source,
    window,
    write_bundle,
)

POLICIES = ("round_robin", "join_shortest_queue", "llm_d", "linear_scorer")
LAG = "routeforge_gateway_event_loop_lag_seconds"


def loop_lag(metrics: str) -> dict:
    """The gateway's event-loop lag probe (its `/metrics` histogram): samples, and the share of them
    later than each bucket's bound. A request's read waits on the loop as much as on the client's
    bytes; this tells the two apart."""
    counts = {float(sample.labels["le"]): sample.value for family in text_string_to_metric_families(metrics)
              for sample in family.samples if sample.name == f"{LAG}_bucket"}
    total = counts.get(float("inf"), 0.0)
    later = {f"{bound * 1e3:g}": (1 - n / total) if total else None
             for bound, n in sorted(counts.items()) if bound != float("inf")}
    return {"samples": int(total), "share_later_than_ms": later}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--rate", type=float, default=8.0, help="requests per second")
    p.add_argument("--policies", nargs="+", default=list(POLICIES))
    p.add_argument("--vllm-python", default=os.path.join(os.getcwd(), ".venv-vllm", "bin", "python"))
    args = p.parse_args()
    if args.quick:
        args.requests, args.policies = 60, ["join_shortest_queue", "llm_d"]
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("this benchmark pins the gateway and the server to cores of their own: it needs 2 cores")
    from routeforge.artifacts.common.state_folder import state_root
    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init
    from routeforge.core.vllm_env import kv_cache_bytes
    from routeforge.generation.local_server import vllm_serve
    from routeforge.profiling.server_requests import Measured, send
    from routeforge.training.policies.simulator.instance import InstanceProfile

    from benchmarks.simulator_vs_vllm import kv_tokens_of, profile_server

    os.sched_setaffinity(0, {1})  # the load generator beside the server, off the gateway's core
    started = time.perf_counter()
    work = state_root() / "gateway_overhead"
    work.mkdir(parents=True, exist_ok=True)
    layers, step_tokens, kv_asked = SERVERS["fast"]
    model_dir = build_random_init(RandomInitSource(**model_source(layers)), state_root() / "models")
    vocab = int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
    result = {"requests": args.requests, "rate_rps": args.rate, "machine": platform.platform(),
              "pinning": "gateway alone on core 0; the vLLM server and the load generator on core 1", "policies": {}}
    with vllm_serve(model_dir, work / "server.log", args.vllm_python, dtype="float32", max_model_len=1024 + 48 + 64,
                    max_num_seqs=MAX_NUM_SEQS, enforce_eager=True, cpus="1",
                    kv_cache_memory_bytes=kv_cache_bytes(model_dir, kv_asked, 1, "float32"),
                    extra_args=["--enable-prefix-caching", "--max-num-batched-tokens", str(step_tokens)]) as url:
        kv = kv_tokens_of(work / "server.log", kv_asked)
        fit, _ = profile_server(url, str(model_dir), vocab, MAX_NUM_SEQS, lambda line: None, kv, 1024, step_tokens)
        profile = InstanceProfile.from_fit(fit, max_running=MAX_NUM_SEQS, kv_capacity_tokens=kv,
                                           max_num_batched_tokens=step_tokens)
        bundle, public = write_bundle(work, [fit, fit], [profile, profile], {}, "join_shortest_queue")
        base = url.removesuffix("/v1")
        for k, policy in enumerate(args.policies):
            log = work / f"decisions-{policy}.jsonl"
            log.unlink(missing_ok=True)
            gateway = Gateway(bundle, public, [base, base], policy, log, cpus="0")
            try:
                requests = window(DATA / "traces" / "mooncake_synthetic_trace.jsonl", args.requests, 0, args.rate, 16)
                measured = send(gateway.url + "/v1", "auto", requests, BLOCK_TOKENS, vocab, salt=50_000 + k)
                lag = loop_lag(httpx.get(gateway.url + "/metrics", timeout=10).text)
            finally:
                gateway.stop()
            served = sum(isinstance(m, Measured) for m in measured)
            result["policies"][policy] = {**gateway_times(log), "served": served, "event_loop_lag": lag}
            print(policy, result["policies"][policy], flush=True)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["goal"] = "≤ 2 ms p99 of the gateway's own time at the live fleet's rate (issue 72)"
    out = results_dir("gateway_overhead") / f"gateway_overhead{'_quick' if args.quick else ''}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}; p99 {np.max([v['p99_ms'] for v in result['policies'].values()]):.2f} ms at most")


if __name__ == "__main__":
    main()
