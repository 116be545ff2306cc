"""Held-out evaluation of a quality/cost predictor as a router, against the standard anchors.

Anchors: every single model, uniform random choice (its expectation), and the oracle (best true
quality per prompt, cheapest among ties). The router picks argmax(q̂ − λ·ĉ) per prompt; sweeping λ
traces its quality–cost curve. Only prompts labelled for every model are scored, so every policy
is judged on the same prompts; the count left out is reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.knn import KnnPrediction
from routeforge.core.schemas import routing_models
from routeforge.training.routing_table import matrix


def upper_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-decreasing upper convex hull of (cost, quality) points (RouterBench): what mixing
    policies (pick A for a share of prompts, B for the rest) can reach at each cost."""
    pts = sorted(set(points))
    hull: list[tuple[float, float]] = []
    for p in pts:  # monotone chain, upper side
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    best = -np.inf
    out = []
    for c, q in hull:  # a dearer point below a cheaper one is never worth it
        if q > best:
            out.append((c, q))
            best = q
    return out


def hull_quality(hull: list[tuple[float, float]], cost: float) -> float:
    """Quality the hull reaches at `cost` (flat beyond its dearest point, NaN below its cheapest)."""
    xs, ys = [c for c, _ in hull], [q for _, q in hull]
    return float("nan") if cost < xs[0] else float(np.interp(cost, xs, ys))


def aiq(points: list[tuple[float, float]], c_min: float, c_max: float) -> float:
    """RouterBench's Average Improvement in Quality: the mean of the hull's quality over
    [c_min, c_max] (area under the non-decreasing hull divided by the cost range)."""
    hull = upper_hull(points)
    grid = np.linspace(c_min, c_max, 2001)
    values = np.array([hull_quality(hull, c) for c in grid])
    values = np.where(np.isnan(values), 0.0, values)  # below the policy's cheapest point it reaches nothing
    return float(np.trapezoid(values, grid) / (c_max - c_min)) if c_max > c_min else float(values[-1])


def hull_comparison(router: list[tuple[float, float]], singles: list[tuple[float, float]]) -> dict[str, float]:
    """AIQ of router and single-model hull over the singles' cost range, and the router's largest
    lead over the hull at equal cost (accuracy points; negative when it is below everywhere)."""
    c_min, c_max = min(c for c, _ in singles), max(c for c, _ in singles)
    hull = upper_hull(singles)
    inside = [(c, q) for c, q in router if c_min <= c <= c_max]
    gaps = [(q - hull_quality(hull, c), c) for c, q in inside]
    best = max(gaps) if gaps else (float("nan"), float("nan"))
    return {"aiq_router": aiq(router, c_min, c_max), "aiq_single_hull": aiq(singles, c_min, c_max),
            "max_gap_above_hull": float(best[0]), "max_gap_at_cost": float(best[1])}


def _point(quality: np.ndarray, cost: np.ndarray, picks: np.ndarray) -> dict[str, float]:
    rows = np.arange(len(picks))
    return {"quality": float(quality[rows, picks].mean()), "cost": float(cost[rows, picks].mean())}


def auto_lambdas(prediction: KnnPrediction, n: int = 121) -> list[float]:
    """λ = 0 plus a log grid over six decades around the fleet's own exchange rate between quality
    and cost (the spread of the models' mean predicted quality over that of their mean predicted
    cost): a fixed grid misses the whole trade-off when costs are fractions of a cent."""
    dq = float(np.ptp(np.nanmean(prediction.quality, axis=0)))
    dc = float(np.ptp(np.nanmean(prediction.cost, axis=0)))
    scale = dq / dc if dq > 0 and dc > 0 else 1.0
    return [0.0, *np.geomspace(scale * 1e-3, scale * 1e3, n - 1).tolist()]


def evaluate_router(
    test: pa.Table, prediction: KnnPrediction, prior: np.ndarray, lambdas: list[float] | None = None
) -> dict[str, Any]:
    """`prediction` must be row-aligned with `test`; `lambdas` None: `auto_lambdas`."""
    models = routing_models(test.schema)
    quality, cost = matrix(test, "quality", models), matrix(test, "cost", models)
    no_costs = bool(np.isnan(cost).all())  # a score table: quality labels only, every model costs the same
    if no_costs:
        cost = np.zeros_like(quality)
        lambdas = [0.0]
    complete = ~(np.isnan(quality).any(axis=1) | np.isnan(cost).any(axis=1))
    if not complete.any():
        raise ValueError("no test prompt has quality and cost for every model")
    quality, cost = quality[complete], cost[complete]
    pred = KnnPrediction(models, prediction.quality[complete], prediction.output_tokens[complete],
                         prediction.cost[complete])

    singles = {m: {"quality": float(quality[:, j].mean()), "cost": float(cost[:, j].mean())}
               for j, m in enumerate(models)}
    best_single = max(singles, key=lambda m: (singles[m]["quality"], -singles[m]["cost"]))
    oracle_picks = np.array([np.lexsort((cost[i], -quality[i]))[0] for i in range(len(quality))])
    router = _point(quality, cost, pred.best_index(0.0, prior))
    sweep = []
    for lam in auto_lambdas(pred) if lambdas is None else lambdas:
        picks = pred.best_index(lam, prior)
        share = np.bincount(picks, minlength=len(models)) / len(picks)
        sweep.append({"lambda": float(lam), **_point(quality, cost, picks),
                      "share": {m: float(s) for m, s in zip(models, share) if s > 0}})
    if no_costs:  # no trade-off to trace: AIQ and the lead over the hull are undefined
        hull = dict.fromkeys(("aiq_router", "aiq_single_hull", "max_gap_above_hull", "max_gap_at_cost"), float("nan"))
    else:
        hull = hull_comparison([(p["cost"], p["quality"]) for p in sweep],
                               [(p["cost"], p["quality"]) for p in singles.values()])
    return {
        "hull": hull,
        "n_test": int(len(complete)),
        "n_scored": int(complete.sum()),
        "n_left_out_incomplete_labels": int((~complete).sum()),
        "single_models": singles,
        "best_single_model": best_single,
        "random": {"quality": float(quality.mean()), "cost": float(cost.mean())},
        "oracle": _point(quality, cost, oracle_picks),
        "router_max_quality": router,
        "router_gap_to_best_single": router["quality"] - singles[best_single]["quality"],
        "lambda_sweep": sweep,
    }


def plot_quality_cost(result: dict[str, Any], path: Path, title: str,
                      others: dict[str, dict[str, Any]] | None = None) -> Path:
    """Single models, their hull, random, oracle and the router's λ sweep; `others` adds more
    routers' evaluations (label → `evaluate_router` result on the same prompts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    for name, p in result["single_models"].items():
        ax.scatter(p["cost"], p["quality"], marker="o", s=30, color="tab:gray")
        ax.annotate(name.split("/")[-1], (p["cost"], p["quality"]), fontsize=7, xytext=(3, 2),
                    textcoords="offset points")
    hull = upper_hull([(p["cost"], p["quality"]) for p in result["single_models"].values()])
    ax.plot([c for c, _ in hull], [q for _, q in hull], "--", color="tab:gray",
            label=f"single-model hull, AIQ {result['hull']['aiq_single_hull']:.3f}")
    routers = {"KNN router (q̂ − λ·ĉ sweep)": result} | (others or {})
    for (label, r), color in zip(routers.items(), ["tab:blue", "tab:orange", "tab:purple", "tab:brown"]):
        sweep = sorted(r["lambda_sweep"], key=lambda s: s["cost"])
        ax.plot([s["cost"] for s in sweep], [s["quality"] for s in sweep], "-o", ms=3, color=color,
                label=f"{label}, AIQ {r['hull']['aiq_router']:.3f}")
    ax.scatter(result["random"]["cost"], result["random"]["quality"], marker="x", s=60, color="tab:red",
               label="random")
    ax.scatter(result["oracle"]["cost"], result["oracle"]["quality"], marker="*", s=120, color="tab:green",
               label="oracle")
    if any(p["cost"] > 0 for p in result["single_models"].values()):
        ax.set_xscale("log")
    ax.set_xlabel("mean cost per prompt (USD, log scale where costs are known)")
    ax.set_ylabel("mean quality")
    ax.set_title(f"{title} (n={result['n_scored']} test prompts)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
