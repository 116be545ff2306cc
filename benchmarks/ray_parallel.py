"""Embedding and router-selection CV folds as Ray tasks against the single process (issue 39, item 4).

    python -m benchmarks.ray_parallel [--prompts 2000] [--quick]

On a local Ray cluster of two CPUs on loopback (two workers, one thread each) against this process
alone (PyTorch's and NumPy's threads over both cores), on dcrouter's training prompts: the time to
embed `--prompts` prompts with an empty cache, and the time of the router family's
cross-validation (`training.router` of configs/dcrouter.yaml on one truncation side; every
candidate × fold one task). Also how far apart the results are: the largest embedding difference
and the smallest cosine, the largest out-of-fold prediction difference, and whether the CV picks
the same candidate. Writes benchmarks/results/ray_parallel/ray_parallel.json.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import parser, results_dir
from benchmarks.score_fleets import score_fleet, selection_settings


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--prompts", type=int, default=2000)
    args = p.parse_args(argv)
    import ray
    from routeforge.training.embeddings import encode_cached
    from routeforge.training.parallel import RayTasks, parallel_tasks
    from routeforge.training.predictors.router_family import candidates
    from routeforge.training.predictors.router_selection import cross_validate, fold_ids, score_at_argmax

    fleet = score_fleet("dcrouter")
    n = 300 if args.quick else args.prompts
    rows = np.flatnonzero(fleet.train)
    texts = [fleet.texts[i] for i in rows[:n]]
    ref = fleet.config.encoder
    out: dict = {"prompts": len(texts), "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                 "quick": args.quick}
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    try:
        pool = RayTasks()
        _warm(ref)  # this process loads the encoder before the clock starts, as the workers do
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            here = encode_cached(texts, ref, "right", Path(tmp) / "serial")
            serial_s = time.perf_counter() - start
            with parallel_tasks(pool):
                pool.map(_warm, [(ref,)] * pool.workers)  # workers load the encoder before the clock starts
                start = time.perf_counter()
                spread = encode_cached(texts, ref, "right", Path(tmp) / "ray")
                ray_s = time.perf_counter() - start
        out["embedding"] = {"serial_s": round(serial_s, 2), "ray_s": round(ray_s, 2), "workers": pool.workers,
                            "speedup": round(serial_s / ray_s, 3),
                            "max_abs_difference": float(np.abs(spread - here).max()),
                            "min_cosine": float(np.sum(spread * here, axis=1).min())}
        print(json.dumps(out["embedding"]), flush=True)

        settings = selection_settings(fleet.config, args.quick)
        x = encode_cached([fleet.texts[i] for i in rows], ref, "right",
                          fleet.config.storage_root / "cache" / "embeddings")
        y = fleet.quality[rows]
        folds = fold_ids(len(x), settings.folds, seed=0)
        tasks = list(fleet.tasks[rows])
        cands = candidates(settings)
        start = time.perf_counter()
        oof_here = cross_validate(cands, x, y, folds, 0, lambda _: None, tasks)
        cv_serial = time.perf_counter() - start
        with parallel_tasks(pool):
            start = time.perf_counter()
            oof_ray = cross_validate(cands, x, y, folds, 0, lambda _: None, tasks)
            cv_ray = time.perf_counter() - start
        scores = {name: (score_at_argmax(oof_here[name], y), score_at_argmax(oof_ray[name], y)) for name in oof_here}
        out["cross_validation"] = {
            "rows": len(x), "candidates": len(cands), "folds": settings.folds, "serial_s": round(cv_serial, 2),
            "ray_s": round(cv_ray, 2), "speedup": round(cv_serial / cv_ray, 3),
            "max_abs_difference": max(float(np.abs(oof_ray[k] - oof_here[k]).max()) for k in oof_here),
            "max_abs_difference_by_candidate": {k: float(np.abs(oof_ray[k] - oof_here[k]).max()) for k in oof_here},
            "same_best": max(scores, key=lambda k: scores[k][0]) == max(scores, key=lambda k: scores[k][1]),
            "cv_scores": {k: [round(a, 6), round(b, 6)] for k, (a, b) in scores.items()}}
        print(json.dumps({k: v for k, v in out["cross_validation"].items() if k != "cv_scores"}), flush=True)
    finally:
        ray.shutdown()
    path = results_dir("ray_parallel") / ("ray_parallel-quick.json" if args.quick else "ray_parallel.json")
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
    return 0


def _warm(ref: str) -> int:
    from routeforge.training.embeddings import encode

    return len(encode(["warm up"], ref))


if __name__ == "__main__":
    raise SystemExit(main())
