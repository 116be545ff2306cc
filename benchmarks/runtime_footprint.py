"""What a router service pays to use a bundle: install size and cold start to the first routed prompt,
for the runtime alone (`pip install routeforge`) against the full pipeline install.

    python -m benchmarks.runtime_footprint [--quick] [--bundle FOLDER]

Without `--bundle` it runs the demo pipeline into a scratch state and uses the registered bundle.
Three cold starts each (a fresh interpreter every time, `tools/runtime_probe.py`):
- `runtime`: a fresh virtual environment with the runtime alone (this checkout's wheel + its
  declared dependencies), the bundle's ONNX encoder;
- `full_install_onnx`: the same probe in this project's full environment (`.venv`, the `dev` extra);
- `full_install_pytorch_encoder`: what a service ran before the encoder shipped in the bundle:
  the full environment, the PyTorch sentence-transformers encoder embedding the prompts for the
  bundle's router (`routeforge.training.embeddings.encode`).
Writes benchmarks/results/runtime_footprint/runtime_footprint.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, parser, results_dir
from tools.runtime_venv import clean_env, installed, make_runtime_venv, site_packages_bytes

PYTORCH_PROBE = """
import time; start = time.perf_counter()
import sys, json
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.training.embeddings import encode
from tools.runtime_probe import PROMPTS
bundle = load_bundle(sys.argv[1], public_key=sys.argv[2])
router = bundle.router()
side = router.meta["encoder"].get("truncation_side", "right")
pred = router.apply_recall(PROMPTS, router.predict_embeddings(encode(PROMPTS, router.meta["encoder"]["ref"],
                                                                     truncation_side=side)))
print(json.dumps({"route_to": pred.best_model(0.0), "seconds_to_first_route": time.perf_counter() - start}))
"""


def _demo_bundle(work: Path) -> tuple[Path, Path]:
    import os

    import dagster as dg
    from routeforge.artifacts.bundle.loader import load_bundle
    from routeforge.fleet import load_fleet
    from routeforge.pipelines.run import run_pipeline

    os.environ["ROUTEFORGE_STATE"] = str(work / "state")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    config = REPO / "configs" / "demo.yaml"
    with dg.instance_for_test() as instance:
        out = run_pipeline(config, instance)
    fleet = load_fleet(config)
    load_bundle(out["uri"], work / "bundle", fleet.registry.tracking_uri)
    return work / "bundle", fleet.storage_root / "keys" / "bundle-signing.key.pub"


def _cold_starts(command: list[str], runs: int) -> dict:
    results = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO, env=clean_env())
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        results.append({"wall_s": wall, "to_first_route_s": probe["seconds_to_first_route"],
                        "route_to": probe["route_to"], "heavy_imported": probe.get("heavy_imported")})
    return {"runs": results, "median_wall_s": statistics.median(r["wall_s"] for r in results),
            "median_to_first_route_s": statistics.median(r["to_first_route_s"] for r in results)}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--bundle", type=Path, default=None, help="a bundle folder (default: run the demo pipeline)")
    p.add_argument("--public-key", type=Path, default=None, help="the key --bundle is signed with")
    args = p.parse_args()
    runs = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="runtime-footprint-") as tmp:
        work = Path(tmp)
        bundle, key = (args.bundle, args.public_key) if args.bundle else _demo_bundle(work)
        start = time.perf_counter()
        python = make_runtime_venv(work / "runtime")
        install_s = time.perf_counter() - start
        probe = str(REPO / "tools" / "runtime_probe.py")
        out = {
            "bundle_bytes": sum(f.stat().st_size for f in Path(bundle).rglob("*") if f.is_file()),
            "runtime": {"install_s": install_s, "site_packages_bytes": site_packages_bytes(python),
                        "packages": installed(python),
                        **_cold_starts([str(python), probe, str(bundle), str(key)], runs)},
            "full_install_onnx": {"site_packages_bytes": site_packages_bytes(Path(sys.executable)),
                                  "packages": len(installed(Path(sys.executable))),
                                  **_cold_starts([sys.executable, probe, str(bundle), str(key)], runs)},
            "full_install_pytorch_encoder": _cold_starts([sys.executable, "-c", PYTORCH_PROBE, str(bundle), str(key)],
                                                         runs),
        }
    out["runtime"]["package_count"] = len(out["runtime"]["packages"])
    out["size_ratio_full_over_runtime"] = (out["full_install_onnx"]["site_packages_bytes"]
                                           / out["runtime"]["site_packages_bytes"])
    out["cold_start_ratio_pytorch_over_runtime"] = (out["full_install_pytorch_encoder"]["median_to_first_route_s"]
                                                    / out["runtime"]["median_to_first_route_s"])
    path = results_dir("runtime_footprint") / "runtime_footprint.json"
    path.write_text(json.dumps(out, indent=2))
    for name in ("runtime", "full_install_onnx", "full_install_pytorch_encoder"):
        row = out[name]
        size = row.get("site_packages_bytes")
        print(f"{name:<30} {'' if size is None else f'{size / 1e6:8.0f} MB'}  cold start to first route "
              f"{row['median_to_first_route_s']:.2f} s (wall {row['median_wall_s']:.2f} s)")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
