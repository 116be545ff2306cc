"""Per-tier latency heads from static-batch profiles (002 §4.3) and their held-out evaluation.

A head maps what is known at dispatch to an observed latency (TPOT or TTFT). For static-batch
profiles (splitwise, the in-process batch profiler) the observable state is the batch itself:
batch size, prompt and output tokens per request, prefill tokens and mean context tokens.

The analytic line per target (`profiling.head_models` fits it, slopes ≥ 0):
- decode iteration (TPOT) = W + H · context tokens + S · batch size: 000/001's W + H·context plus a
  per-sequence cost, which a CPU shows plainly (its iteration time grows with the number of
  sequences more than with their context);
- prefill (TTFT) = c + k1 · b·p + k2 · b·p²: the prefill gradient plus attention's quadratic term.
The residual head adds trees non-decreasing in batch size. The classic two-term line (W + H·context,
k1·b·p + c), the fuller line, line + residual trees or plain trees serve each target, whichever has
the lowest error in grouped K-fold over configurations.

Evaluation holds out whole configurations, never random rows of one, since repeats of a cell are
near-identical: leave-one-configuration-out, with the choice of kind and the interval made again
inside every training set (nested), so what is reported is what the procedure would deliver on a
configuration it never saw. A configuration is (batch, prompt, requested output) by default;
`by="generated"` keys it by the generated count instead, the protocol of the first heads (a run
that stopped early is then its own configuration, and its siblings stay in training). E2E is
analytic as in 002: for a static batch, whose decode slots are all free, the prefill yields the
first token and n − 1 decode iterations follow (TTFT + (n − 1) × TPOT), compared with the measured E2E.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.latency import Head
from routeforge.profiling.batch_fits import BatchMeasurement, TierFit, fit_tier
from routeforge.profiling.head_models import (
    HeadRecipe,
    choose_by_groups,
    feature_range,
    group_folds,
    relative_error_quantiles,
)

FEATURES = ("batch_size", "prompt_tokens", "output_tokens", "prefill_tokens", "mean_context_tokens")
TERMS = {
    "tpot": ((), ("mean_context_tokens",), ("batch_size",)),
    "ttft": ((), ("prefill_tokens",), ("batch_size", "prompt_tokens", "prompt_tokens")),
}
LOAD = ("batch_size",)
TARGET_OF = {"tpot": "decode_iter_s", "ttft": "prefill_s"}
CANDIDATES = ("classic_line", "line", "residual", "trees")
QUANTILES = (0.5, 0.9, 0.95, 0.99)
CV_FOLDS = 5  # inner: choosing the kind
OUTER_FOLDS = 5  # the pipeline's held-out evaluation (benchmarks hold out one configuration at a time)


def features(ms: list[BatchMeasurement]) -> np.ndarray:
    return np.array([[m.batch_size, m.prompt_tokens, m.output_tokens, m.prefill_tokens, m.mean_context_tokens]
                     for m in ms], dtype=np.float64)


def configuration(by: str) -> Callable[[BatchMeasurement], tuple[int, int, int]]:
    if by not in ("requested", "generated"):
        raise ValueError(f"by: 'requested' or 'generated', not {by!r}")

    def key(m: BatchMeasurement) -> tuple[int, int, int]:
        out = m.requested_output_tokens if by == "requested" and m.requested_output_tokens else m.output_tokens
        return (m.batch_size, m.prompt_tokens, out)

    return key


CLASSIC_TERMS = {"tpot": ((), ("mean_context_tokens",)), "ttft": ((), ("prefill_tokens",))}


def recipes(seed: int = 0) -> dict[str, HeadRecipe]:
    return {t: HeadRecipe(FEATURES, TERMS[t], LOAD, seed, CLASSIC_TERMS[t]) for t in TARGET_OF}


def _targets(ms: list[BatchMeasurement]) -> dict[str, np.ndarray]:
    return {t: np.array([getattr(m, a) for m in ms]) for t, a in TARGET_OF.items()}


def _e2e(ms: list[BatchMeasurement], ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    return np.array([m.e2e_from(a, b) for m, a, b in zip(ms, ttft, tpot)])


@dataclass
class ServedHeads:
    """The chosen head per target, fitted on every measurement, and the held-out errors behind it."""

    heads: dict[str, Head]
    selection: dict[str, dict]
    intervals: dict[str, dict]  # target -> {"kind": "relative", "quantiles": {q: value}}


def serve(ms: list[BatchMeasurement], by: str = "requested", seed: int = 0,
          quantiles: tuple[float, ...] = QUANTILES) -> ServedHeads:
    """Choose each target's kind by grouped K-fold over configurations, fit it on everything, and
    take the SLO intervals from the chosen kinds' out-of-fold errors (E2E's from the analytic sum),
    the largest over batch sizes so that every batch size is covered."""
    x, y = features(ms), _targets(ms)
    groups = [configuration(by)(m) for m in ms]
    heads, selection, oof = {}, {}, {}
    for target, recipe in recipes(seed).items():
        choice = choose_by_groups(recipe, x, y[target], groups, folds=CV_FOLDS)
        heads[target] = recipe.fit(choice.kind, x, y[target])
        selection[target] = choice.record()
        oof[target] = choice.out_of_fold[choice.kind]
    observed = {**y, "e2e": np.array([m.e2e_s if m.e2e_s is not None else np.nan for m in ms])}
    predicted = {**oof, "e2e": _e2e(ms, oof["ttft"], oof["tpot"])}
    batch = np.array([m.batch_size for m in ms])
    intervals = {}
    for t in observed:
        seen = ~np.isnan(observed[t])
        if seen.any():
            intervals[t] = {"kind": "relative", "groups": "batch_size", "quantiles": relative_error_quantiles(
                observed[t][seen], predicted[t][seen], quantiles, groups=batch[seen])}
    return ServedHeads(heads, selection, intervals)


@dataclass
class HeldOutReport:
    configurations: int
    by: str
    outer_folds: int | None
    tpot_mae_ms_served: float
    tpot_mae_ms_linear: float  # the classic W + H·context fit (`profiling.batch_fits`)
    tpot_mae_ms_prior: float
    ttft_mae_ms_served: float
    ttft_mae_ms_linear: float
    e2e_mape_served: float
    e2e_mape_linear: float
    kinds: dict[str, dict[str, float]]  # per candidate fitted alone: tpot/ttft MAE (ms), e2e MAPE
    chosen: dict[str, dict[str, int]]  # target -> candidate -> configurations where it was chosen
    coverage_p95: dict[str, float]  # target -> held-out rows under the served p95 bound
    coverage_p95_by_batch: dict[str, dict[str, float]]  # target -> batch size -> fraction
    per_configuration: list[dict] = field(default_factory=list)
    residuals: dict[str, list[float]] = field(default_factory=dict)  # observed − served prediction

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("per_configuration", "residuals")}


def _ape(predicted: np.ndarray, true: np.ndarray) -> float:
    return float((np.abs(predicted - true) / true).mean())


def _classic_line(fit: TierFit, ms: list[BatchMeasurement]) -> dict[str, np.ndarray]:
    return {"tpot": np.array([fit.decode_iter_s(m.mean_context_tokens, m.batch_size) for m in ms]),
            "ttft": np.array([fit.prefill_s(m.prefill_tokens) for m in ms])}


def leave_one_configuration_out(ms: list[BatchMeasurement], by: str = "requested", seed: int = 0,
                                outer_folds: int | None = None) -> HeldOutReport:
    """For every configuration: choose, fit and bound the heads on all the others (exactly as
    `serve` does for the bundle), then predict the held-out one. Compared on the same rows: each
    candidate fitted alone, the classic linear fit (`profiling.batch_fits`: W + H·context,
    k1·tokens + c, unbounded, the baseline the first heads were compared with) and the static prior
    (batch-1 decode time per token, for TPOT). With `outer_folds`, configurations are held out a
    fold at a time (grouped K-fold) instead of one at a time: K times fewer fits, for the pipeline."""
    key = configuration(by)
    cells = sorted({key(m) for m in ms})
    fold_of = dict(zip(cells, group_folds(cells, outer_folds or len(cells), seed)))
    rows: list[dict] = []
    residuals: dict[str, list[float]] = {"tpot": [], "ttft": [], "e2e": []}
    covered: dict[str, list[tuple[int, bool]]] = {"tpot": [], "ttft": [], "e2e": []}
    chosen: dict[str, dict[str, int]] = {t: defaultdict(int) for t in TARGET_OF}
    for fold in sorted(set(fold_of.values())):
        train = [m for m in ms if fold_of[key(m)] != fold]
        served = serve(train, by, seed)
        x_train, y_train = features(train), _targets(train)
        models = {k: {t: served.heads[t] if served.selection[t]["chosen"] == k else r.fit(k, x_train, y_train[t])
                      for t, r in recipes(seed).items()} for k in CANDIDATES}
        fit = fit_tier(train)
        for cell in (c for c in cells if fold_of[c] == fold):
            test = [m for m in ms if key(m) == cell]
            x_test = features(test)
            truth = {**_targets(test), "e2e": np.array([m.e2e_s for m in test])}
            pred = {t: h.predict(x_test, FEATURES) for t, h in served.heads.items()}
            pred["e2e"] = _e2e(test, pred["ttft"], pred["tpot"])
            for t in residuals:
                residuals[t] += (truth[t] - pred[t]).tolist()
                bound = pred[t] * (1 + served.intervals[t]["quantiles"]["0.95"])
                covered[t] += [(m.batch_size, bool(o <= b)) for m, o, b in zip(test, truth[t], bound)]
            for t in TARGET_OF:
                chosen[t][served.selection[t]["chosen"]] += 1
            alone = {}
            for k in CANDIDATES:
                p = {t: h.predict(x_test, FEATURES) for t, h in models[k].items()}
                alone[k] = {**p, "e2e": _e2e(test, p["ttft"], p["tpot"])}
            line = _classic_line(fit, test)
            line["e2e"] = _e2e(test, line["ttft"], line["tpot"])
            row = {"batch_size": cell[0], "prompt_tokens": cell[1], "output_tokens": cell[2],
                   "chosen": {t: served.selection[t]["chosen"] for t in TARGET_OF},
                   "tpot_ae_ms_prior": float(np.abs(fit.decode_d_s - truth["tpot"]).mean() * 1e3)}
            for name, p in {"served": pred, "linear": line, **alone}.items():
                row[f"tpot_ae_ms_{name}"] = float(np.abs(p["tpot"] - truth["tpot"]).mean() * 1e3)
                row[f"ttft_ae_ms_{name}"] = float(np.abs(p["ttft"] - truth["ttft"]).mean() * 1e3)
                row[f"e2e_ape_{name}"] = _ape(p["e2e"], truth["e2e"])
            rows.append(row)

    def mean(k: str) -> float:
        return float(np.mean([r[k] for r in rows]))

    def coverage(pairs: list[tuple[int, bool]]) -> dict[str, float]:
        by_batch: dict[int, list[bool]] = defaultdict(list)
        for b, ok in pairs:
            by_batch[b].append(ok)
        return {str(b): float(np.mean(v)) for b, v in sorted(by_batch.items())}

    return HeldOutReport(
        configurations=len(cells), by=by, outer_folds=outer_folds,
        tpot_mae_ms_served=mean("tpot_ae_ms_served"), tpot_mae_ms_linear=mean("tpot_ae_ms_linear"),
        tpot_mae_ms_prior=mean("tpot_ae_ms_prior"),
        ttft_mae_ms_served=mean("ttft_ae_ms_served"), ttft_mae_ms_linear=mean("ttft_ae_ms_linear"),
        e2e_mape_served=mean("e2e_ape_served"), e2e_mape_linear=mean("e2e_ape_linear"),
        kinds={k: {"tpot_mae_ms": mean(f"tpot_ae_ms_{k}"), "ttft_mae_ms": mean(f"ttft_ae_ms_{k}"),
                   "e2e_mape": mean(f"e2e_ape_{k}")} for k in CANDIDATES},
        chosen={t: dict(v) for t, v in chosen.items()},
        coverage_p95={t: float(np.mean([ok for _, ok in v])) for t, v in covered.items()},
        coverage_p95_by_batch={t: coverage(v) for t, v in covered.items()},
        per_configuration=rows, residuals=residuals,
    )


def write_batch_heads(ms: list[BatchMeasurement], folder: Path, tier: str,
                      quantiles: tuple[float, ...] = QUANTILES, seed: int = 0) -> dict:
    """The served heads of a tier (see `serve`), evaluated first by holding out configurations
    (`OUTER_FOLDS` grouped folds, choice and intervals nested inside each), then written
    as XGBoost JSON (for residual and tree heads) plus `heads.json`: features, each head's kind,
    line and selection record, the SLO intervals, the prior and fit, and golden predictions for
    the loader check."""
    fit = fit_tier(ms)
    held = leave_one_configuration_out(ms, seed=seed, outer_folds=OUTER_FOLDS)
    served = serve(ms, seed=seed, quantiles=quantiles)
    x = features(ms)
    folder.mkdir(parents=True, exist_ok=True)
    heads_spec = {t: h.save(folder, t, served.selection[t]) for t, h in served.heads.items()}
    golden = list(range(min(16, len(ms))))
    spec = {
        "tier": tier, "kind": "batch", "format": 2, "features": list(FEATURES), "heads": heads_spec,
        "length_feature": "output_tokens", "units": "seconds",
        "prior": {"ttft_s": fit.ttft_p_s, "tpot_s": fit.decode_d_s},
        "intervals": served.intervals, "range": feature_range(x, FEATURES),
        "residual_quantiles": {k: {str(q): float(np.quantile(v, q)) for q in quantiles}
                               for k, v in held.residuals.items()},
        "e2e": "analytic: ttft + max(n - 1, 0) * tpot (a static batch: every decode slot is free)",
        "golden": {"x": x[golden].tolist(),
                   **{k: h.predict(x[golden], FEATURES).tolist() for k, h in served.heads.items()}},
        "evaluation": {"held_out": held.summary(), "per_configuration": held.per_configuration},
        "fit": fit.to_dict(),
    }
    (folder / "heads.json").write_text(json.dumps(spec, indent=2))
    return spec
