"""The TypeScript runtime (runtimes/typescript) beside the Python one on the same bundle: cold start and
per-decision time, and whether it reproduces the golden vectors (docs/bundle-format.md).

Each side runs in fresh processes, `--repeats` times (medians reported):
- cold start: from the start of loading (signature and checksums verified) until the encoder's ONNX
  session and the router are ready, the runtime's modules already imported on both sides (Node
  loads its `require`s before `main` runs);
- per prompt: embedding one prompt at a time (the golden prompts, batch size 1, as a router service
  sees requests) and routing it at λ = 0;
- per latency state and per heuristic case: the golden vectors' states and cases.
The Python side is `PYTHON_SIDE` below, run with `-c` in a fresh interpreter.

    .venv/bin/python -m benchmarks.typescript_runtime [--bundle .state/demo/bundle] [--repeats 5]

Needs `make demo` (the bundle) and `make ts-runtime`. Writes benchmarks/results/typescript_runtime/.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from routeforge.artifacts.common.state_folder import state_root

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir

REPO = Path(__file__).resolve().parents[1]
CHECK = REPO / "runtimes" / "typescript" / "dist" / "check_golden.js"

PYTHON_SIDE = r'''
import json, sys, time
from pathlib import Path
import onnxruntime  # as Node requires its modules
import routeforge.artifacts.deciding.router, routeforge.artifacts.deciding.sentence_encoder
from routeforge.artifacts.bundle.loader import load_bundle
t0 = time.perf_counter()
bundle = load_bundle(sys.argv[1], public_key=Path(sys.argv[2]))
router = bundle.router()
encoder = router.encoder
cold = (time.perf_counter() - t0) * 1e3
golden = bundle.component("golden_vectors").spec
prompts, side = golden["prompts"], golden["encoder"]["truncation_side"]
t = time.perf_counter()
xs = [encoder.encode([p], side) for p in prompts]
encode = (time.perf_counter() - t) * 1e3 / len(prompts)
t = time.perf_counter()
for p, x in zip(prompts, xs):
    router.apply_recall([p], router.predict_embeddings(x)).best_model(0.0)
route = (time.perf_counter() - t) * 1e3 / len(prompts)
latency = []
for part in golden["latency"]:
    model = bundle.component(part["component"])
    t = time.perf_counter()
    for s in part["states"]:
        model.predict_matrix(model.matrix([s]))
    latency.append((time.perf_counter() - t) * 1e3 / len(part["states"]))
heuristics = []
for part in golden["heuristics"]:
    policy = bundle.component(part["component"])
    t = time.perf_counter()
    for c in part["cases"]:
        policy.route(c["request"], c["instances"])
    heuristics.append((time.perf_counter() - t) * 1e3 / len(part["cases"]))
print(json.dumps({"cold_start_ms": cold, "encode_ms_per_prompt": encode, "route_ms_per_prompt": route,
                  "latency_ms_per_state": sum(latency) / len(latency),
                  "heuristic_ms_per_case": sum(heuristics) / len(heuristics), "prompts": len(prompts)}))
'''


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--bundle", type=Path, default=state_root() / "demo" / "bundle")
    parser.add_argument("--key", type=Path, default=None, help="the public key (default: the demo's)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    key = args.key or args.bundle.parent / "keys" / "bundle-signing.key.pub"
    if not CHECK.is_file():
        raise SystemExit("the TypeScript runtime is not built: make ts-runtime")
    ts, py = [], []
    for i in range(repeats):
        run = subprocess.run(["node", str(CHECK), str(args.bundle), "--public-key", str(key)],
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            raise SystemExit(f"the TypeScript runtime disagrees with the golden vectors:\n{run.stdout}{run.stderr}")
        report = json.loads(run.stdout)
        ts.append({"cold_start_ms": report["cold_start_ms"], "encode_ms_per_prompt": report["encode_ms_per_prompt"],
                   "route_ms_per_prompt": report["route_ms_per_prompt"],
                   "latency_ms_per_state": statistics.mean(p["ms_per_state"] for p in report["latency"]),
                   "heuristic_ms_per_case": statistics.mean(p["ms_per_case"] for p in report["heuristics"])})
        run = subprocess.run([sys.executable, "-c", PYTHON_SIDE, str(args.bundle), str(key)],
                             capture_output=True, text=True, timeout=600, cwd=REPO)
        if run.returncode != 0:
            raise SystemExit(run.stderr)
        py.append(json.loads(run.stdout.strip().splitlines()[-1]))
        print(f"repeat {i + 1}/{repeats}: TypeScript cold start {ts[-1]['cold_start_ms']:.0f} ms, Python "
              f"{py[-1]['cold_start_ms']:.0f} ms", flush=True)
    keys = ["cold_start_ms", "encode_ms_per_prompt", "route_ms_per_prompt", "latency_ms_per_state",
            "heuristic_ms_per_case"]
    result = {"bundle": report["bundle"], "version": report["version"], "prompts": report["prompts"],
              "repeats": repeats, "golden": {k: report[k] for k in (
                  "token_id_mismatches", "embedding_max_abs_diff", "router_quality_max_abs_diff", "decisions",
                  "decision_mismatches", "problems")} | {"latency": report["latency"],
                                                         "heuristics": report["heuristics"],
                                                         "recommendations": report.get("recommendations")},
              "typescript": {k: statistics.median(r[k] for r in ts) for k in keys},
              "python": {k: statistics.median(r[k] for r in py) for k in keys}, "quick": args.quick}
    out = results_dir("typescript_runtime") / "typescript_runtime.json"
    out.write_text(json.dumps(result, indent=2))
    for k in keys:
        print(f"{k}: TypeScript {result['typescript'][k]:.4g}, Python {result['python'][k]:.4g}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
