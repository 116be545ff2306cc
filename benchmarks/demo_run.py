"""Wall time of the main job on the demo fleet from empty state (what `make demo` does on a fresh clone).

Runs the pipeline in a fresh state folder with an ephemeral Dagster instance, twice unless
`--runs` says otherwise (the first run also builds the random-init models), then the last one once
more in its own state, with the Dagster instance that ran it (nothing is stale: only the prompt set
is re-read) and with a new one (every stage re-runs on warm caches and registers nothing), and writes per-stage timings,
the totals and the peak resident memory to `benchmarks/results/demo_run/demo_run.json`.

    .venv/bin/python -m benchmarks.demo_run [--config configs/demo.yaml] [--runs 2]
"""

from __future__ import annotations

import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import dagster as dg

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default=str(results_dir("demo_run") / "demo_run.json"))
    args = parser.parse_args()
    if args.quick:
        args.runs = 1

    from routeforge.pipelines.run import run_pipeline

    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="routeforge-demo-bench-") as state:
            os.environ["ROUTEFORGE_STATE"] = state
            start = time.perf_counter()
            skipped = None
            with dg.instance_for_test() as instance:
                out = run_pipeline(args.config, instance, log_level="WARNING")
                total = time.perf_counter() - start
                if i == args.runs - 1:  # again with the instance that remembers the first: nothing stale
                    start = time.perf_counter()
                    same = run_pipeline(args.config, instance, log_level="WARNING")
                    skipped = {"total_s": round(time.perf_counter() - start, 2),
                               "materialized": {k: sorted(v) for k, v in same["materialized"].items() if v}}
            rerun = None
            if i == args.runs - 1:  # the same fleet in the same state, a new instance: every stage re-runs
                start = time.perf_counter()
                with dg.instance_for_test() as instance:
                    again = run_pipeline(args.config, instance, log_level="WARNING")
                rerun = {"total_s": round(time.perf_counter() - start, 2), "registered": not again.get("unchanged"),
                         "same_bundle_version": again["bundle_version"] == out["bundle_version"]}
        runs.append({"run": i, "total_s": round(total, 2),
                     "stages_s": {k: round(v, 2) for k, v in out["timings_s"].items()},
                     "uri": out["uri"], "knn": out["knn"], "release": out.get("release"),
                     "rerun_unchanged": rerun, "rerun_same_instance": skipped})
        print(f"run {i}: {total:.1f}s  {out['uri']}" + (f"; re-run {rerun}" if rerun else ""))
    result = {
        "config": args.config,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "runs": runs,
        "note": "models are random-weight; timings measure the machinery, quality numbers mean nothing",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
