"""Use a bundle the way a router service does, with only the runtime installed, and say what it cost.

Run with the interpreter of an environment that holds `pip install routeforge` alone (the test
`tests/test_end_to_end.py::test_the_runtime_alone_serves_the_demo_bundle` and
`benchmarks/runtime_footprint.py` make one):

    python tools/runtime_probe.py BUNDLE_FOLDER [PUBLIC_KEY]

It verifies and loads the bundle, routes prompts with its router, predicts with a latency head and
asks the recommended routing policy for a decision, then prints one JSON object: the answers, the
seconds from interpreter start to the first routed prompt, and which heavy packages (the training
stack) ended up imported. Imports only the standard library and routeforge's runtime.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

HEAVY = ("torch", "transformers", "sentence_transformers", "dagster", "mlflow", "pandas", "pyarrow", "xgboost",
         "sklearn", "scipy", "pydantic", "datasets")
STATE = {"batch_size": 1, "prompt_tokens": 40, "output_tokens": 24, "prefill_tokens": 40, "mean_context_tokens": 52}
PROMPTS = ["What is 15 plus 27?", "Translate to French: The garden is full of flowers.",
           "Summarise: the meeting moved to Thursday because the room was booked."]


def main(folder: str, public_key: str | None = None) -> dict:
    from pathlib import Path

    import numpy as np
    from routeforge.artifacts.bundle.loader import load_bundle

    bundle = load_bundle(folder, public_key=Path(public_key) if public_key else None)
    routed = bundle.router().predict(PROMPTS)
    first = time.perf_counter() - START
    tier = bundle.tiers_with_latency[0]
    latency = bundle.latency(tier).predict([STATE])
    policy = bundle.routing_policy()
    if hasattr(policy, "act"):  # learned: an observation vector in, an action out
        decision = np.asarray(policy.act(np.zeros(policy.spec["observation"]["size"], dtype=np.float32))).tolist()
    else:  # heuristic: router telemetry in, an instance index out
        m = policy.spec.get("instances", 2)
        idle = {"max_running": 4, "tpot_s": 0.01, "prefill_s_per_token": 0.001, "running": [], "waiting": [],
                "busy_for_s": 0.0}
        decision = policy.route({"prompt_tokens": 40, "predicted_output_tokens": [24.0] * m,
                                 "predicted_quality": [0.5] * m}, [dict(idle) for _ in range(m)])
    return {"route_to": routed.best_model(0.0), "quality": routed.quality.tolist(), "tier": tier,
            "tpot_s": float(latency["tpot"][0]), "ttft_s": float(latency["ttft"][0]),
            "policy": bundle.recommended_policy, "decision": decision, "seconds_to_first_route": first,
            "heavy_imported": sorted(m for m in HEAVY if m in sys.modules)}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
