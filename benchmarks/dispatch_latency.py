"""Per-request decision latency of the runtime's dispatch call (issue 49, item 5) on one CPU core.

    python -m benchmarks.dispatch_latency BUNDLE [--rate 12] [--seconds 30]

Decisions arrive at `--rate` per second (open loop, paced), each for a prompt of dcrouter's test
split and a random live state of every instance (requests running 0..max, waiting 0..20, KV-cache
usage 0..1, as vLLM's `/metrics` would give them). Timed per decision: the router's estimates from
the prompt's embedding, the prompt's block hashes (`prompt_blocks`, which the deployed routers match
against their own prefix index) plus `Dispatcher.decide` (policy, predicted TTFT/E2E, quality, cost); the
sentence encoder's time for the same prompt is timed apart and reported beside it, since a service
may embed once for several uses. One thread: ONNX Runtime, BLAS and this process are pinned to one
core (`os.sched_setaffinity`). Writes benchmarks/results/dispatch_latency/<bundle>.json.
RouteBalance reports 32 ms per decision at 12 req/s.
"""

from __future__ import annotations

import json
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import DATA, parser, results_dir  # noqa: E402


def main() -> None:
    p = parser(__doc__)
    p.add_argument("bundle", help="bundle folder or models:/ URI (one with a routing_simulator)")
    p.add_argument("--rate", type=float, default=12.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--allow-unsigned", action="store_true")
    p.add_argument("--policy", default=None, help="the routing policy to decide with (default: the recommended)")
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from routeforge.artifacts.bundle.loader import load_bundle
    from routeforge.artifacts.deciding.dispatch import BLOCK_CHARS, Dispatcher, LiveState, prompt_blocks

    bundle = load_bundle(args.bundle, allow_unsigned=args.allow_unsigned)
    dispatcher = Dispatcher(bundle, policy=args.policy)
    router = bundle.router() if bundle.has_kind("router") else bundle.knn_estimator()
    encoder = bundle.sentence_encoder()
    side = router.meta["encoder"].get("truncation_side", "right")
    tokenizer = encoder.tokenizer.tokenizer
    prompts = [row["question"] for row in json.loads((DATA / "responses" / "dcrouter_test.json").read_text())]
    n = int(args.rate * (args.seconds if not args.quick else 3))
    rng = np.random.default_rng(0)
    order = [list(router.models).index(m) for m in dispatcher.models]
    for text in prompts[:5]:  # warm the sessions
        dispatcher.decide_prompt(text, [LiveState(0, 0)] * len(dispatcher.instances))
    decide_ms, encode_ms, policies, instances_chosen = [], [], {}, {}
    start = time.perf_counter()
    for i in range(n):
        due = start + i / args.rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(0.001, due - now))
        text = prompts[i % len(prompts)]
        states = [LiveState(float(rng.integers(0, dispatcher.max_running + 1)), float(rng.integers(0, 21)),
                            float(rng.random())) for _ in dispatcher.instances]
        tokenizer.no_truncation()
        tokens = max(1, len(tokenizer.encode(text).ids))
        t0 = time.perf_counter()
        x = encoder.encode([text], truncation_side=side)
        t1 = time.perf_counter()
        prediction = router.predict_embeddings(x)
        blocks = prompt_blocks(text)
        decision = dispatcher.decide(states, tokens, np.asarray(prediction.quality)[0, order],
                                     np.asarray(prediction.output_tokens, dtype=float)[0, order], hash_ids=blocks,
                                     block_tokens=max(1, round(tokens * BLOCK_CHARS / len(text))) if blocks else None)
        t2 = time.perf_counter()
        encode_ms.append((t1 - t0) * 1e3)
        decide_ms.append((t2 - t1) * 1e3)
        policies[decision.model] = policies.get(decision.model, 0) + 1
        instances_chosen[decision.instance] = instances_chosen.get(decision.instance, 0) + 1
    wall = time.perf_counter() - start

    def pct(values, q):
        return round(float(np.percentile(values, q)), 3)

    result = {"bundle": bundle.manifest.name, "bundle_version": bundle.manifest.version,
              "instances": len(dispatcher.instances), "policy": dispatcher.policy_name, "notes": list(dispatcher.notes),
              "rate_rps": args.rate, "decisions": n, "wall_s": round(wall, 2), "achieved_rps": round(n / wall, 2),
              "decision_ms": {"p50": pct(decide_ms, 50), "p99": pct(decide_ms, 99), "max": pct(decide_ms, 100)},
              "encoder_ms": {"p50": pct(encode_ms, 50), "p99": pct(encode_ms, 99)},
              "models_chosen": policies, "instances_chosen": dict(sorted(instances_chosen.items())), "cores": 1,
              "machine": platform.platform(),
              "targets_ms": {"p50": 2.0, "p99": 5.0}, "routebalance_ms": 32.0}
    suffix = f"-{dispatcher.policy_name}" if args.policy else ""
    out = results_dir("dispatch_latency") / f"{bundle.manifest.name}{suffix}.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
