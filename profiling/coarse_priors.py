"""Coarse end-to-end priors from LLM-Inference-Bench (argonne-lcf): E2E only, no TTFT/TPOT split.

Each row is one static batch of b requests with input length = output length = L, its end-to-end
latency (s) and throughput in input + output tokens per second. Per tier (model × hardware count ×
framework) and batch size, E2E(L) ≈ a_b + c_b · L is fitted by least squares. Because prefill per
token is far cheaper than decode (QLM: ~100×), c_1 is an upper bound on the nominal TPOT with the
prefill folded in, and a_1 the fixed per-request overhead; ε = c_B / c_1 at the largest batch B and
Θ = B · L / E2E (output tokens/s) at the longest length. Good enough as a static prior and RWT
parameters for a tier nobody has profiled yet; a sweep replaces it.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class CoarsePrior:
    tier: str
    tpot_s: float  # c_1
    overhead_s: float  # a_1
    epsilon: float
    theta_tok_s: float
    batch_for_theta: int
    r2_batch1: float
    rows: int
    per_batch: dict[int, dict[str, float]]

    def to_dict(self) -> dict:
        return asdict(self)


def tier_key(row: dict[str, str]) -> str:
    return f"{row['Model']}@{row['Hardware']}x{row['Num of Hardware']}@{row['Framework']}"


def read_llm_inference_bench(path: Path) -> dict[str, list[tuple[int, int, float]]]:
    """tier key → [(L, batch, e2e_s)]; a malformed row raises naming its line."""
    tiers: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                length, batch, e2e = int(row["Input Output Length"]), int(row["Batch Size"]), float(row["Latency"])
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{i}: not an LLM-Inference-Bench row ({exc})") from exc
            if not (e2e > 0 and length > 0 and batch > 0):
                raise ValueError(f"{path}:{i}: Latency, length and batch must be positive")
            tiers[tier_key(row)].append((length, batch, e2e))
    return dict(tiers)


def coarse_prior(tier: str, rows: list[tuple[int, int, float]]) -> CoarsePrior:
    by_batch: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for length, batch, e2e in rows:
        by_batch[batch].append((length, e2e))
    fits = {}
    for batch, points in sorted(by_batch.items()):
        if len({p[0] for p in points}) < 2:
            continue
        x, y = np.array([p[0] for p in points], float), np.array([p[1] for p in points])
        (slope, intercept), *_ = np.linalg.lstsq(np.column_stack([x, np.ones_like(x)]), y, rcond=None)
        residual = y - (slope * x + intercept)
        total = float(((y - y.mean()) ** 2).sum())
        fits[batch] = {"c_s_per_token": float(slope), "a_s": float(intercept),
                       "r2": 1 - float((residual**2).sum()) / total if total > 0 else 1.0, "points": len(points)}
    if not fits:
        raise ValueError(f"{tier}: no batch size has two or more lengths; cannot fit a prior")
    smallest, largest = min(fits), max(fits)
    if fits[smallest]["c_s_per_token"] <= 0 or fits[largest]["c_s_per_token"] <= 0:
        raise ValueError(f"{tier}: E2E does not grow with length (slope {fits[smallest]['c_s_per_token']:.2e} s/token "
                         f"at batch {smallest}); the rows contradict each other")
    longest = max(length for length, batch, _ in rows if batch == largest)
    e2e_longest = float(np.mean([e for length, b, e in rows if b == largest and length == longest]))
    return CoarsePrior(
        tier=tier, tpot_s=fits[smallest]["c_s_per_token"], overhead_s=max(fits[smallest]["a_s"], 0.0),
        epsilon=fits[largest]["c_s_per_token"] / fits[smallest]["c_s_per_token"],
        theta_tok_s=largest * longest / e2e_longest, batch_for_theta=largest, r2_batch1=fits[smallest]["r2"],
        rows=len(rows), per_batch=fits,
    )


def continuous_batching_fit(tier: str, rows: list[tuple[int, int, float]]) -> dict[str, float]:
    """The simulator's step model fitted to a tier's static-batch rows (non-negative least squares).

    The simulator (`training.policies.simulator.instance`) runs prefill steps of c + k1 · prompt tokens
    and decode steps of W + H · context tokens. A static batch of b requests of L input and L output
    tokens is one prefill of b·L tokens, then L − 1 decode steps whose context grows from b·(L + 1)
    to b·(2L − 1):
        E2E(L, b) = c + k1 · b·L + W · (L − 1) + H · 1.5 · b · L · (L − 1)
    so each row is one linear equation in (c, k1, W, H). Prefill is a small share of these rows'
    E2E (a few %), so k1 is the least certain term; `r2` and `rows` say how well the rest is pinned.
    Returns the terms under the names of a batch fit (`profiling.batch_fits.TierFit`)."""
    from scipy.optimize import nnls

    data = np.array(rows, dtype=float)
    if len(data) < 4 or len({(int(r[0]), int(r[1])) for r in rows}) < 4:
        raise ValueError(f"{tier}: {len(rows)} rows; the step model needs four distinct (length, batch) cells")
    length, batch, e2e = data[:, 0], data[:, 1], data[:, 2]
    design = np.column_stack([np.ones_like(length), batch * length, length - 1, 1.5 * batch * length * (length - 1)])
    scale = design.max(axis=0)
    scale[scale == 0] = 1.0
    # relative errors: a 2,048-token batch of 64 must not outweigh every short row
    weight = 1.0 / e2e
    coef, _ = nnls(design / scale * weight[:, None], e2e * weight)
    coef = coef / scale
    predicted = design @ coef
    total = float(((e2e - e2e.mean()) ** 2).sum())
    r2 = 1.0 - float(((e2e - predicted) ** 2).sum()) / total if total > 0 else 1.0
    if coef[2] <= 0:
        raise ValueError(f"{tier}: the fitted decode step is not positive; the rows cannot calibrate a simulator")
    return {"prefill_intercept_s": float(coef[0]), "prefill_grad_s_per_token": float(coef[1]),
            "decode_w_s": float(coef[2]), "decode_h_s_per_token": float(coef[3]), "r2": r2,
            "fitted_prompt_tokens_max": float(length.max()),
            "median_relative_error": float(np.median(np.abs(predicted - e2e) / e2e)), "rows": int(len(rows)),
            "source": "LLM-Inference-Bench static batches, fitted to the simulator's step model (NNLS)"}


def import_coarse_priors(path: Path) -> tuple[dict[str, CoarsePrior], dict[str, str]]:
    """Every tier of the file that can be fitted, and the reason for each that cannot."""
    priors, skipped = {}, {}
    for tier, rows in read_llm_inference_bench(path).items():
        try:
            priors[tier] = coarse_prior(tier, rows)
        except ValueError as exc:
            skipped[tier] = str(exc)
    return priors, skipped
