"""What a retrain costs when little changed (issue 39, item 1).

    python -m benchmarks.retrain_cost [--config configs/dcrouter.yaml] [--new-fraction 0.01]

Three runs of `routeforge.pipelines.run` on one fleet, in a fresh state folder and Dagster instance:
1. the first run;
2. the same run again, nothing changed: it should materialize nothing but the re-read prompt set;
3. with `--new-fraction` new prompts added to the first training score file (copies of existing
   rows with a new opening sentence, so each is a new text with the same scores), written into the
   state folder, never into the repository: only those are embedded.

For each: wall seconds, the assets each step materialized and why (Dagster's stale causes), and the
texts the embedding steps embedded and read from the cache (the assets' metadata).
`--warm-cache FOLDER` starts the state with a copy of an earlier embedding cache (the first run
then costs what it costs once its prompts are embedded); the results say whether it was used.
Writes benchmarks/results/retrain_cost/<fleet>.json.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import REPO, parser, results_dir

EMBEDDING_ASSETS = ("knn_estimator", "router_selection")


def _embedded(instance, since_run_ids: set[str]) -> dict[str, dict[str, int]]:
    import dagster as dg

    out = {}
    for name in EMBEDDING_ASSETS:
        records = instance.fetch_materializations(dg.AssetKey(name), limit=1).records
        if records and records[0].run_id not in since_run_ids:
            meta = records[0].asset_materialization.metadata
            out[name] = {k: int(meta[k].value) for k in ("texts_embedded", "texts_from_embedding_cache") if k in meta}
    return out


def _run(config: Path, instance, label: str) -> dict:
    from routeforge.pipelines.run import run_pipeline

    before = {r.run_id for r in instance.get_runs()}
    start = time.perf_counter()
    out = run_pipeline(config, instance)
    seconds = time.perf_counter() - start
    materialized = {step: assets for step, assets in out["materialized"].items() if assets}
    print(f"{label}: {seconds:.1f}s; materialized {sum(len(a) for a in materialized.values())} asset(s) in "
          f"{len(materialized)} step(s)", flush=True)
    return {"seconds": round(seconds, 2), "materialized": materialized, "embedded": _embedded(instance, before),
            "registry_version": out["registry_version"], "bundle_version": out["bundle_version"],
            "dagster_runs": len(instance.get_runs()) - len(before)}


def _with_new_prompts(config_path: Path, state: Path, fraction: float, seed: int = 0) -> tuple[Path, int]:
    """A copy of the fleet file whose first training score file gains `fraction` new rows."""
    from routeforge.fleet import load_fleet

    raw = yaml.safe_load(config_path.read_text())
    index = next(i for i, d in enumerate(raw["datasets"]) if d.get("kind") == "score_table")
    dataset = raw["datasets"][index]
    source = Path(load_fleet(config_path).datasets[index].files["train"][0])  # as the fleet resolves it
    rows = json.loads(source.read_text())
    field = dataset.get("text_field", "text")
    rng = random.Random(seed)
    picked = rng.sample(rows, max(1, round(len(rows) * fraction)))
    new = [{**row, field: f"(Asked again on day {i % 7 + 2}.) {row[field]}"} for i, row in enumerate(picked)]
    extra = state / "new_prompts.json"
    extra.write_text(json.dumps(new))
    dataset["files"]["train"] = [*dataset["files"]["train"], str(extra)]
    out = config_path.parent / f".{config_path.stem}-with-new-prompts.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out, len(new)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "dcrouter.yaml",
                   help="a fleet whose first dataset of kind score_table gains the new prompts")
    p.add_argument("--new-fraction", type=float, default=0.01)
    p.add_argument("--warm-cache", type=Path, default=None,
                   help="copy this embedding cache folder into the fresh state first")
    args = p.parse_args(argv)
    import dagster as dg
    from routeforge.fleet import load_fleet

    name = load_fleet(args.config).name
    with tempfile.TemporaryDirectory(prefix="routeforge-retrain-") as tmp:
        state = Path(tmp) / "state"
        os.environ["ROUTEFORGE_STATE"] = str(state)
        fleet = load_fleet(args.config)
        if args.warm_cache:
            shutil.copytree(args.warm_cache, fleet.storage_root / "cache" / "embeddings")
        changed = None
        try:
            (Path(tmp) / "dagster").mkdir()
            with dg.instance_for_test(temp_dir=str(Path(tmp) / "dagster")) as instance:
                first = _run(args.config, instance, "first run")
                unchanged = _run(args.config, instance, "unchanged re-run")
                changed, added = _with_new_prompts(args.config, state, args.new_fraction)
                more = _run(changed, instance, f"+{added} new prompts")
        finally:
            if changed is not None:
                changed.unlink(missing_ok=True)
    result = {
        "fleet": name, "config": str(args.config), "warm_embedding_cache": bool(args.warm_cache),
        "first": first, "unchanged": unchanged, "new_prompts": {"added": added, **more},
        "unchanged_over_first": round(unchanged["seconds"] / first["seconds"], 4),
        "new_prompts_over_first": round(more["seconds"] / first["seconds"], 4),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "quick": args.quick,
    }
    path = results_dir("retrain_cost") / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"unchanged/first {result['unchanged_over_first']:.1%}, +{added} new/first "
          f"{result['new_prompts_over_first']:.1%}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
