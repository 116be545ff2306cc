"""Learning from outcomes between retrains: the router's Thompson-sampling update on a replayed stream.

    .venv/bin/python -m benchmarks.online_outcomes [--fleet dcrouter] [--steps 5000] [--seeds 3] [--batch 50] [--quick]

The router is selected on the training split (the fleet file's settings, the KNN's truncation
side). The stream: `--steps` requests drawn at random from the test split (production repeats
prompts), in batches of `--batch`: the router picks a model for each request of a batch, the
outcome is that model's true score on the prompt (dcrouter's test labels), and `Router.update`
learns from the batch before the next one. Three policies see the same stream per seed: the static
router (no update, as today), the updating router routing by Thompson sampling (`choose(rng=...)`),
and the oracle (the best model per prompt). Regret is the oracle's cumulative score minus the
policy's; the report gives the curves (plot) and the final regret against the oracle and the static
router. Writes benchmarks/results/online_outcomes/<fleet>.json and a plot beside it.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_selection import select_router

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.score_fleets import CONFIGS, score_fleet, selection_settings


def replay(router, x: np.ndarray, y: np.ndarray, steps: int, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Per step: the score each policy got on one seeded stream: static (no update), thompson
    (update, route by a posterior draw), greedy (update, route by the posterior mean), oracle."""
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, len(x), size=steps)
    static_pick = np.argmax(router.predict_embeddings(x).quality, axis=1)
    got = {"static": y[stream, static_pick[stream]], "oracle": np.nanmax(y[stream], axis=1)}
    for name, draw in (("thompson", np.random.default_rng(seed + 10_000)), ("greedy", None)):
        learner = copy.deepcopy(router)
        got[name] = np.empty(steps)
        for start in range(0, steps, batch):
            rows = stream[start:start + batch]
            picks = np.argmax(learner.predict_embeddings(x[rows], rng=draw).quality, axis=1)
            scores = y[rows, picks]
            got[name][start:start + len(rows)] = scores
            learner.update_embeddings(x[rows], [learner.models[p] for p in picks], scores)
    return got


def drifted(router, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, str]:
    """Production unlike training: the model the static router sends most prompts to fails half of
    them (scores halved), as after a bad deployment of it; returns the labels and its name."""
    picks = np.argmax(router.predict_embeddings(x).quality, axis=1)
    top = int(np.bincount(picks, minlength=y.shape[1]).argmax())
    out = y.copy()
    out[:, top] *= 0.5
    return out, router.models[top]


def plot(curves: dict[str, np.ndarray], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, label=name)
    ax.set(xlabel="requests", ylabel="cumulative regret against the oracle (score)", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(fleet: str, steps: int, seeds: int, batch: int, quick: bool) -> dict:
    data = score_fleet(fleet, every_model=True)  # the stream needs every model's outcome
    config, models, train, test, quality, timings = (data.config, data.models, data.train, data.test, data.quality,
                                                     data.timings)
    settings = selection_settings(config, quick)
    steps = min(steps, 1000) if quick else steps
    routing = data.routing
    side = config.training.knn.truncation_side
    cache = Path(config.storage_root) / "cache" / "embeddings"
    x = encode_cached(routing.column("text").to_pylist(), config.encoder, side, cache)
    t0 = time.perf_counter()
    selection = select_router(x[train], quality[train], models, settings,
                              {"ref": config.encoder, "truncation_side": side},
                              tasks=list(np.asarray(routing.column("task").to_pylist())[train]),
                              log=lambda _: None)
    router = selection.router
    timings["selection_s"] = time.perf_counter() - t0
    out_dir = results_dir("online_outcomes")
    out = {"fleet": fleet, "models": models, "chosen": selection.chosen, "test_prompts": int(test.sum()),
           "steps": steps, "seeds": seeds, "batch": batch, "prior_strength": 20.0, "scenarios": {},
           "timings_s": timings, "quick": quick}
    shifted, failing = drifted(router, x[test], quality[test])
    for scenario, labels in (("as_labelled", quality[test]), ("drift", shifted)):
        t0 = time.perf_counter()
        runs = [replay(router, x[test], labels, steps, batch, seed) for seed in range(seeds)]
        timings[f"replay_{scenario}_s"] = time.perf_counter() - t0
        learners = ("static", "thompson", "greedy")
        regret = {name: np.mean([np.cumsum(r["oracle"] - r[name]) for r in runs], axis=0) for name in learners}
        final = {name: [float(np.sum(r["oracle"] - r[name])) for r in runs] for name in learners}
        figure = plot(regret, out_dir / f"{fleet}_{scenario}_regret.png",
                      f"{fleet}, {scenario.replace('_', ' ')}: {steps} requests, {seeds} seeds")
        out["scenarios"][scenario] = {
            "mean_score": {name: float(np.mean([r[name].mean() for r in runs])) for name in runs[0]},
            "final_regret_vs_oracle": {k: {"mean": float(np.mean(v)), "per_seed": v} for k, v in final.items()},
            "minus_static": {k: {"mean": float(np.mean(np.subtract(final["static"], final[k]))),
                                 "per_seed": np.subtract(final["static"], final[k]).tolist()}
                             for k in ("thompson", "greedy")},
            "regret_curve_every_100": {k: v[99::100].tolist() for k, v in regret.items()},
            "plot": figure.name, **({"failing_model": failing} if scenario == "drift" else {})}
        final_means = {k: round(float(np.mean(v)), 1) for k, v in final.items()}
        print(f"{fleet} {scenario}: final regret vs oracle {final_means}", flush=True)
    path = out_dir / f"{fleet}.json"
    path.write_text(json.dumps(out, indent=2))
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--fleet", default="dcrouter", choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    run(args.fleet, args.steps, args.seeds, args.batch, args.quick)


if __name__ == "__main__":
    main()
