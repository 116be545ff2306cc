"""Latency heads from a QPS sweep (002 §4.3): state at dispatch → TPOT, TTFT and E2E.

Split by time, never by random rows: within each phase and rate, requests in send order, the
earliest train the heads, the next slice picks the early-stopping point and the kind of head, and
the latest `held_out_fraction` is the held-out test.

Each target has an analytic line over the load features a client always knows (linear, slopes ≥ 0,
`profiling.head_models`): TTFT = own prefill (prompt tokens) + the prefill and requests queued ahead
+ the interference of running decodes, with the recent TTFT the client observed; TPOT = the
running batch (decoding requests, their context, requests in flight, pending prefill) with the
recent inter-token gap; E2E = the line of TTFT plus the predicted output length times the recent gap
and the running batch. The line, line + residual trees (monotone non-decreasing in the request
counts) or plain trees serve each target: the one with the lowest validation MAE. Server features
(vLLM's running/waiting) join the lines where the server exposes them.

Compared on the test rows: the served heads, each kind alone, and the static prior (the tier's idle
TPOT and TTFT: nominal TPOT × predicted length, 002's prior); E2E analytic from the heads
(TTFT + (n − 1) · TPOT, 002's formula with its queueing term carried by the TTFT head, whose features
see the queue) and direct.

SLO intervals: the conformal quantile of the relative error (observed − predicted) / predicted on the
validation slice, the largest over the offered rates below saturation; a head's bound is
predicted × (1 + q). The test rows report, per offered rate, how often that bound held.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.latency import HEAD_KINDS
from routeforge.profiling.head_models import Choice, HeadRecipe, feature_range, relative_error_quantiles
from routeforge.profiling.live_state import FEATURES
from routeforge.profiling.plots import plot_heads
from routeforge.profiling.rwt import RwtParams, group_stats, waiting_time
from routeforge.profiling.sweep import FEATURE_COLUMNS

TARGETS = ("tpot", "ttft", "e2e")


@dataclass
class SweepData:
    x: np.ndarray
    y: dict[str, np.ndarray]  # seconds
    n: np.ndarray  # predicted output tokens
    rate: np.ndarray
    phase: np.ndarray
    split: np.ndarray  # "train" | "val" | "test"
    group: np.ndarray
    sent_s: np.ndarray


def time_split(phase: list[str], rate: list[float], sent_s: list[float], held_out: float) -> np.ndarray:
    """'train' / 'val' / 'test' per row: the latest `held_out` of each (phase, rate) is test, the
    `held_out` of the remainder just before it is validation."""
    split = np.empty(len(phase), dtype=object)
    cells: dict[tuple[str, float], list[int]] = {}
    for i, key in enumerate(zip(phase, rate)):
        cells.setdefault(key, []).append(i)
    for rows in cells.values():
        rows.sort(key=lambda i: sent_s[i])
        n_test = int(round(len(rows) * held_out))
        n_val = int(round((len(rows) - n_test) * held_out))
        n_train = len(rows) - n_test - n_val
        for j, i in enumerate(rows):
            split[i] = "train" if j < n_train else "val" if j < n_train + n_val else "test"
    return split


def sweep_data(records: pa.Table, held_out: float) -> SweepData:
    """Successful requests with at least two output tokens (TPOT needs a second token)."""
    t = records.filter(pa.compute.and_(pa.compute.is_null(records.column("error")),
                                       pa.compute.greater_equal(records.column("output_tokens"), 2)))
    t = t.filter(pa.compute.not_equal(t.column("phase"), "warmup"))
    cols = t.to_pydict()
    x = np.column_stack([np.asarray(cols[c], dtype=np.float64) for c in FEATURE_COLUMNS])
    split = time_split(cols["phase"], cols["rate"], cols["sent_s"], held_out)
    return SweepData(
        x=x, y={k: np.asarray(cols[f"{k}_s"], dtype=np.float64) for k in TARGETS},
        n=np.asarray(cols["f_predicted_output_tokens"]), rate=np.asarray(cols["rate"]),
        phase=np.asarray(cols["phase"]), split=split, group=np.asarray(cols["group"]),
        sent_s=np.asarray(cols["sent_s"]),
    )


def lightest_load(in_flight: np.ndarray) -> np.ndarray:
    """Rows sent with nothing else in flight, else the lightest tenth: the closest a log comes to a
    sweep's idle phase."""
    none = in_flight == 0
    return none if none.any() else in_flight <= np.nanquantile(in_flight, 0.1)


def analytic_e2e(ttft: np.ndarray, tpot: np.ndarray, n: np.ndarray) -> np.ndarray:
    return ttft + np.maximum(n - 1, 0) * tpot


def _mae_ms(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).mean() * 1e3)


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float((np.abs(pred - true) / true).mean())


TERMS = {
    "ttft": ((), ("prompt_tokens",), ("pending_prefill_tokens",), ("waiting_first_token",), ("decoding",),
             ("decode_context_tokens",), ("recent_ttft_ms",), ("backlog_s",), ("server_waiting",)),
    "tpot": ((), ("decoding",), ("decode_context_tokens",), ("in_flight",), ("pending_prefill_tokens",),
             ("recent_itl_ms",), ("pending_decode_tokens",), ("server_running",)),
    "e2e": ((), ("predicted_output_tokens",), ("predicted_output_tokens", "recent_itl_ms"),
            ("predicted_output_tokens", "decoding"), ("prompt_tokens",), ("recent_ttft_ms",), ("backlog_s",),
            ("pending_decode_tokens",), ("server_waiting",)),
}
LOAD = ("in_flight", "waiting_first_token", "decoding", "server_running", "server_waiting")


def train_sweep_heads(records: pa.Table, folder: Path, tier: str, held_out: float = 0.2,
                      quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99), seed: int = 0,
                      plot: Path | None = None, rwt: RwtParams | None = None,
                      saturation_rps: float | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Train, choose, evaluate and write the heads of one tier to `folder` (and the held-out scatter
    to `plot`). Returns the spec written as heads.json (evaluation included) and the training-time
    predictions of every served head for every row of `sweep_data(records, held_out)`. With `rwt`,
    QLM's predicted against observed wait per rate joins the evaluation (`rwt_per_rate`). The SLO
    intervals are calibrated on the validation rows of the idle phase and of every offered rate
    below `saturation_rps` (all rates when not given), each rate covered (see
    `profiling.head_models.relative_error_quantiles`); past saturation the queue grows for as long
    as the phase lasts and no bound learned earlier holds."""
    d = sweep_data(records, held_out)
    train, val, test = (d.split == s for s in ("train", "val", "test"))
    if min(train.sum(), val.sum(), test.sum()) < 5:
        raise ValueError(f"{tier}: too few sweep records for train/validation/test ({int(train.sum())}/"
                         f"{int(val.sum())}/{int(test.sum())}); sweep more requests")
    # the static prior: the idle phase of a sweep; for traffic, the lightest load the log saw
    idle = d.phase == "idle"
    if not idle.any():
        idle = lightest_load(d.x[:, FEATURES.index("in_flight")])
    prior = {"ttft_s": float(np.median(d.y["ttft"][idle])), "tpot_s": float(np.median(d.y["tpot"][idle]))}
    by_kind: dict[str, dict[str, np.ndarray]] = {}
    heads, selection = {}, {}
    for target in TARGETS:
        recipe = HeadRecipe(FEATURES, TERMS[target], LOAD, seed)
        fitted = {k: recipe.fit(k, d.x[train], d.y[target][train], validation=(d.x[val], d.y[target][val]))
                  for k in HEAD_KINDS}
        by_kind[target] = {k: h.predict(d.x, FEATURES) for k, h in fitted.items()}
        choice = Choice.lowest({k: np.abs(p[val] - d.y[target][val]) for k, p in by_kind[target].items()})
        heads[target], selection[target] = fitted[choice.kind], choice.record() | {"on": "validation slice"}
    folder.mkdir(parents=True, exist_ok=True)
    pred = {k: by_kind[k][selection[k]["chosen"]] for k in TARGETS}
    pred["e2e_analytic"] = analytic_e2e(pred["ttft"], pred["tpot"], d.n)
    prior_pred = {"tpot": np.full(len(d.n), prior["tpot_s"]), "ttft": np.full(len(d.n), prior["ttft_s"])}
    prior_pred["e2e"] = analytic_e2e(prior_pred["ttft"], prior_pred["tpot"], d.n)
    # keyed by the runtime loader's outputs: its `e2e` is the analytic one, `e2e_direct` the E2E head
    named = {"tpot": pred["tpot"], "ttft": pred["ttft"], "e2e": pred["e2e_analytic"], "e2e_direct": pred["e2e"]}
    observed = {k: d.y[k.removesuffix("_direct")] for k in named}
    residuals = {k: {str(q): float(np.quantile(observed[k][val] - v[val], q)) for q in quantiles}
                 for k, v in named.items()}
    # every load below saturation: the idle phase, each offered rate below it, and logged traffic
    calibrate = val & ((d.phase == "idle") | (d.phase == "traffic")
                       | ((d.phase == "rate") & (d.rate < (saturation_rps or np.inf))))
    cells = np.array([f"{p}@{r:g}" for p, r in zip(d.phase, d.rate)])
    intervals = {k: {"kind": "relative", "groups": "offered rate below saturation",
                     "quantiles": relative_error_quantiles(observed[k][calibrate], v[calibrate], quantiles,
                                                           groups=cells[calibrate])}
                 for k, v in named.items()}

    def errors(mask: np.ndarray) -> dict[str, float]:
        y = {k: v[mask] for k, v in d.y.items()}
        p = {k: v[mask] for k, v in pred.items()}
        q = {k: v[mask] for k, v in prior_pred.items()}
        out = {
            "requests": int(mask.sum()),
            "tpot_mae_ms_served": _mae_ms(p["tpot"], y["tpot"]), "tpot_mae_ms_prior": _mae_ms(q["tpot"], y["tpot"]),
            "ttft_mae_ms_served": _mae_ms(p["ttft"], y["ttft"]), "ttft_mae_ms_prior": _mae_ms(q["ttft"], y["ttft"]),
            "e2e_mape_analytic": _mape(p["e2e_analytic"], y["e2e"]), "e2e_mape_direct": _mape(p["e2e"], y["e2e"]),
            "e2e_mape_prior": _mape(q["e2e"], y["e2e"]),
        }
        for k in HEAD_KINDS:
            out[f"tpot_mae_ms_{k}"] = _mae_ms(by_kind["tpot"][k][mask], y["tpot"])
            out[f"ttft_mae_ms_{k}"] = _mae_ms(by_kind["ttft"][k][mask], y["ttft"])
            out[f"e2e_mape_analytic_{k}"] = _mape(analytic_e2e(by_kind["ttft"][k][mask], by_kind["tpot"][k][mask],
                                                               d.n[mask]), y["e2e"])
        if "0.95" in intervals["e2e"]["quantiles"]:
            for k, v in named.items():
                bound = v[mask] * (1 + intervals[k]["quantiles"]["0.95"])
                out[f"{k}_within_p95_bound"] = float((observed[k][mask] <= bound).mean())
        return out

    evaluation = {"held_out": errors(test), "per_rate": []}
    if (test & (d.phase == "rate")).any():  # a sweep (logged traffic has no offered rates)
        evaluation["held_out_rate_phases"] = errors(test & (d.phase == "rate"))
    for rate in sorted(set(d.rate[test & (d.phase == "rate")])):
        evaluation["per_rate"].append({"rate": float(rate), **errors(test & (d.phase == "rate") & (d.rate == rate))})
    if rwt is not None:
        evaluation["rwt_per_rate"] = evaluate_rwt(records, rwt)
    heads_spec = {t: h.save(folder, t, selection[t]) for t, h in heads.items()}
    if plot is not None:
        plot_heads({k: d.y[k][test] for k in TARGETS},
                   {"tpot": pred["tpot"][test], "ttft": pred["ttft"][test], "e2e": pred["e2e_analytic"][test]},
                   {k: v[test] for k, v in prior_pred.items()}, plot, f"{tier}: held-out requests (latest by time)")
    golden = np.flatnonzero(test)[:16]
    spec = {
        "tier": tier, "kind": "sweep", "format": 2, "features": list(FEATURES), "heads": heads_spec,
        "units": "seconds", "prior": prior, "intervals": intervals, "residual_quantiles": residuals,
        "range": feature_range(d.x[train | val], FEATURES),
        "e2e": "analytic: ttft + max(n - 1, 0) * tpot; direct: the e2e head",
        "golden": {"x": d.x[golden].tolist(), **{k: pred[k][golden].tolist() for k in TARGETS}},
        "evaluation": evaluation,
        "split": {s: int((d.split == s).sum()) for s in ("train", "val", "test")},
    }
    (folder / "heads.json").write_text(json.dumps(_finite(spec), indent=2))
    return spec, {k: pred[k] for k in TARGETS}


def _finite(value):
    """JSON has no NaN: missing features in golden rows become null (the loader reads them back as NaN)."""
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def sweep_rwt(summary: list[dict[str, Any]], max_output_tokens: int) -> RwtParams:
    """P and d from the idle phase, Θ from the saturation phase, ε = saturated TPOT / idle TPOT."""
    idle = next(s for s in summary if s["phase"] == "idle")
    sat = next(s for s in summary if s["phase"] == "saturation")
    d = idle["tpot_p50_ms"] / 1e3
    return RwtParams(prefill_s=idle["ttft_p50_ms"] / 1e3, decode_s=d, epsilon=sat["tpot_p50_ms"] / 1e3 / d,
                     theta_tok_s=sat["output_tok_s"], max_output_tokens=max_output_tokens)


def evaluate_rwt(records: pa.Table, params: RwtParams) -> list[dict[str, Any]]:
    """QLM's W_q against the observed wait per offered rate.

    Queue ahead at dispatch: the client's count of requests sent and still without a first token
    (the server's waiting queue as the client sees it; vLLM's `num_requests_waiting` where scraped).
    Observed wait: TTFT − P. The request mix's μ_o, σ_o are the observed output lengths of the
    sweep; QLM's own claim is accuracy for long queues, conservative for short ones."""
    t = records.filter(pa.compute.and_(pa.compute.is_null(records.column("error")),
                                       pa.compute.equal(records.column("phase"), "rate")))
    cols = t.to_pydict()
    mix = group_stats(("all", n) for n in cols["output_tokens"])["all"]
    server_waiting = np.asarray(cols["f_server_waiting"], dtype=float)
    client_waiting = np.asarray(cols["f_waiting_first_token"], dtype=float)
    queue = np.where(np.isnan(server_waiting), client_waiting, server_waiting)
    observed = np.maximum(np.asarray(cols["ttft_s"]) - params.prefill_s, 0.0)
    predicted = np.array([waiting_time(q, mix, params.theta_tok_s) for q in queue])
    upper = np.array([waiting_time(q, mix, params.theta_tok_s, 0.95) for q in queue])
    rates = np.asarray(cols["rate"])
    rows = []
    for rate in sorted(set(rates)):
        m = rates == rate
        rows.append({"rate": float(rate), "requests": int(m.sum()), "mean_queue_ahead": float(queue[m].mean()),
                     "observed_wait_ms": float(observed[m].mean() * 1e3),
                     "predicted_wait_ms": float(predicted[m].mean() * 1e3),
                     "mae_ms": float(np.abs(predicted[m] - observed[m]).mean() * 1e3),
                     "within_p95_bound": float((observed[m] <= upper[m]).mean())})
    return rows

