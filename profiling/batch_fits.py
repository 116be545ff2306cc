"""Latency fits per tier from batch measurements (000 eq. 13–15, 001 §5.2, 003 §6).

A batch measurement is one static batch: b requests of p prompt tokens generating t tokens each,
with the batch's prefill time (its TTFT) and the mean decode-iteration time (its TPOT).

- Prefill: time = k1 · (b · p) + c, least squares over all measurements (k1 is 000/001's prefill
  gradient, seconds per prompt token).
- Decode iteration: time = W + H · (tokens in the running batch), where a static batch holds on
  average b · (p + t/2) context tokens over its generation (H is the decode gradient).
- QLM's RWT parameters: P = prefill time of one request of the median prompt length; d = decode
  iteration time at batch 1; ε = the iteration time at the largest measured batch B over d (static
  batches see no preemption, so ε is the batching slowdown only; a live sweep adds preemption);
  Θ = B / (d · ε), the decode throughput in tokens per second at that batch.

R² is reported for both fits so a user can see when the linear model does not hold (large prompts
make attention's quadratic term visible in the prefill). Each fit is robust to a few anomalous
measurements: a point off the line by more than 5 × the median absolute residual and by more than
half of the larger of observed and predicted time is left out, the line refit, and every point
judged again against the new line; what stays out is reported with the fit. (splitwise's
Llama-2-70B on two GPUs reports 0.8 s of prefill for 64 × 512 tokens where its other batches put
it near 13 s.)
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class BatchMeasurement:
    batch_size: int
    prompt_tokens: int  # per request
    output_tokens: int  # per request, generated
    prefill_s: float  # the batch's prefill = TTFT
    decode_iter_s: float  # mean time of one decode iteration = TPOT
    e2e_s: float | None = None
    requested_output_tokens: int | None = None  # the cap asked for, when it differs from the output

    def e2e_from(self, ttft_s: float, tpot_s: float) -> float:
        """E2E of a static batch: its prefill (which yields the first token), then n − 1 iterations."""
        return ttft_s + (self.output_tokens - 1) * tpot_s

    @property
    def prefill_tokens(self) -> int:
        return self.batch_size * self.prompt_tokens

    @property
    def mean_context_tokens(self) -> float:
        return self.batch_size * (self.prompt_tokens + self.output_tokens / 2)


@dataclass
class TierMeasurements:
    tier: str
    model: str
    hardware: str
    tensor_parallel: int
    measurements: list[BatchMeasurement] = field(default_factory=list)


def import_splitwise(path: Path) -> dict[str, TierMeasurements]:
    """splitwise-sim's perf_model.csv (times in ms) → measurements per `model@hardware-tpN` tier.

    The file's E2E is exactly prompt_time + (n − 1) · token_time, and for `token_size` ≥ 1024 the
    runs stopped early (about 697 tokens), so `token_size` is the requested cap. The generated count
    is recovered as n = round((e2e − prompt_time) / token_time) + 1, capped by the request. The
    identity fails only where a batch did not fit at once (Llama-2-70B on two GPUs, 32+ requests):
    there E2E holds time beyond its decode iterations, which is what QLM's ε accounts for."""
    tiers: dict[str, TierMeasurements] = {}
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                tp = int(row["tensor_parallel"])
                name = f"{row['model']}@{row['hardware']}-tp{tp}"
                prefill, tpot, e2e = (float(row[k]) / 1e3 for k in ("prompt_time", "token_time", "e2e_time"))
                requested = int(row["token_size"])
                generated = max(1, min(requested, round((e2e - prefill) / tpot) + 1))
                m = BatchMeasurement(
                    batch_size=int(row["batch_size"]), prompt_tokens=int(row["prompt_size"]),
                    output_tokens=generated, prefill_s=prefill, decode_iter_s=tpot, e2e_s=e2e,
                    requested_output_tokens=requested,
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}:{i}: not a splitwise perf-model row ({exc})") from exc
            tier = tiers.setdefault(name, TierMeasurements(name, row["model"], row["hardware"], tp))
            tier.measurements.append(m)
    return tiers


def _lstsq(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    design = np.column_stack([x, np.ones_like(x)])
    (slope, intercept), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / total if total > 0 else 1.0
    return float(slope), float(intercept), r2


def _anomalies(x: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> np.ndarray:
    """Points off the line by more than 5 × the median absolute residual and by more than half."""
    predicted = slope * x + intercept
    residual = np.abs(y - predicted)
    gross = residual > 0.5 * np.maximum(np.abs(y), np.abs(predicted))
    return (residual > 5 * float(np.median(residual))) & gross


def _linear(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """(slope, intercept, R², mask of points kept) of y ≈ slope · x + intercept. Anomalies found
    against the first line are left out; the refit line then judges every point again, so a good
    point that only looked off next to an anomaly comes back."""
    slope, intercept, r2 = _lstsq(x, y)
    keep = ~_anomalies(x, y, slope, intercept)
    if keep.all() or keep.sum() < 3:
        return slope, intercept, r2, np.ones_like(y, dtype=bool)
    slope, intercept, _ = _lstsq(x[keep], y[keep])
    keep = ~_anomalies(x, y, slope, intercept)
    return (*_lstsq(x[keep], y[keep]), keep)


@dataclass(frozen=True)
class TierFit:
    prefill_grad_s_per_token: float
    prefill_intercept_s: float
    prefill_r2: float
    decode_w_s: float
    decode_h_s_per_token: float
    decode_r2: float
    ttft_p_s: float
    decode_d_s: float
    epsilon: float
    theta_tokens_per_s: float
    batch_for_theta: int
    n_measurements: int
    prefill_dropped: list[tuple[int, int, int]]  # (batch, prompt, output) left out as anomalous
    decode_dropped: list[tuple[int, int, int]]
    # the longest prompt measured: a simulator using the fit on longer prompts extrapolates
    # (training.policies.simulator.extrapolation says how far); None in profiles written before it was kept
    fitted_prompt_tokens_max: float | None = None
    # prefill's attention: each prompt token attends to every token before it, a·(p²/2) seconds for a prompt
    # of p alone (compute-bound, quadratic; 0 where the rows cannot tell it from the linear term)
    prefill_attention_s_per_token2: float = 0.0
    # decode's cost per sequence in the step (its token through the layers, its sampling): S of
    # W + S·b + H·tokens; 0 where the rows cannot tell it from the context term (a GPU's decode reads the
    # weights once for the batch, a CPU computes each sequence's token)
    decode_s_per_seq: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def prefill_s(self, prefill_tokens: float) -> float:
        return self.prefill_intercept_s + self.prefill_grad_s_per_token * prefill_tokens

    def decode_iter_s(self, context_tokens: float, batch: float = 1.0) -> float:
        return self.decode_w_s + self.decode_s_per_seq * batch + self.decode_h_s_per_token * context_tokens


def fit_tier(measurements: list[BatchMeasurement], step_tokens: int | None = None) -> TierFit:
    """The tier's step model from its static batches. `step_tokens`: the server's per-step token budget
    (vLLM's max_num_batched_tokens) where it chunks prefills: the prefill intercept is then charged per
    step (⌈b·p / step_tokens⌉ of them), as the simulator charges it."""
    if len(measurements) < 3:
        raise ValueError(f"need at least 3 batch measurements to fit a tier, got {len(measurements)}")
    prefill = np.array([m.prefill_s for m in measurements])
    k1, c1, r2p, kept_p = _linear(np.array([m.prefill_tokens for m in measurements], dtype=float), prefill)
    c1, k1, attention, r2p = _with_attention(measurements, prefill, kept_p, (c1, k1, 0.0, r2p), step_tokens)
    decode = np.array([m.decode_iter_s for m in measurements])
    h, w, r2d, kept_d = _linear(np.array([m.mean_context_tokens for m in measurements], dtype=float), decode)
    w, per_seq, h, r2d = _with_batch_term(measurements, decode, kept_d, (w, 0.0, h, r2d))

    def dropped(kept: np.ndarray) -> list[tuple[int, int, int]]:
        return sorted({(m.batch_size, m.prompt_tokens, m.output_tokens) for m, k in zip(measurements, kept) if not k})

    singles = [m for m in measurements if m.batch_size == 1] or measurements
    median_prompt = float(np.median([m.prompt_tokens for m in singles]))
    at_median = [m.prefill_s for m in singles if m.prompt_tokens == median_prompt]
    p = float(np.mean(at_median)) if at_median else c1 + k1 * median_prompt
    by_batch: dict[int, list[float]] = defaultdict(list)
    for m in measurements:
        by_batch[m.batch_size].append(m.decode_iter_s)
    smallest, largest = min(by_batch), max(by_batch)
    d = float(np.mean(by_batch[smallest]))
    eps = float(np.mean(by_batch[largest])) / d
    return TierFit(
        prefill_grad_s_per_token=k1, prefill_intercept_s=c1, prefill_r2=r2p,
        decode_w_s=w, decode_h_s_per_token=h, decode_r2=r2d,
        ttft_p_s=p, decode_d_s=d, epsilon=eps, theta_tokens_per_s=largest / (d * eps),
        batch_for_theta=largest, n_measurements=len(measurements),
        prefill_dropped=dropped(kept_p), decode_dropped=dropped(kept_d),
        fitted_prompt_tokens_max=float(max(m.prompt_tokens for m in measurements)),
        prefill_attention_s_per_token2=attention, decode_s_per_seq=per_seq,
    )


def _nnls_r2(design: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Non-negative least squares of `y` on `design`'s columns (each scaled to its largest value so that
    terms of very different units are solved alike; `weight` per row, e.g. 1/y for relative errors),
    with the fit's R² on `y` itself."""
    from scipy.optimize import nnls

    scale = np.maximum(design.max(axis=0), 1e-12)
    w = np.ones_like(y) if weight is None else weight
    coef, _ = nnls(design / scale * w[:, None], y * w)
    coef = coef / scale
    total = float(((y - y.mean()) ** 2).sum())
    return coef, (1.0 - float(((y - design @ coef) ** 2).sum()) / total if total > 0 else 1.0)


def _with_batch_term(measurements, decode: np.ndarray, kept: np.ndarray,
                     linear: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """(W, S, H, R²) of decode step ≈ W + S·b + H·tokens (non-negative least squares on the kept rows)
    where the per-sequence term explains the rows better than the line (R² up by 0.01 or more, with at
    least three batch sizes); else the line, S = 0. Why: on a CPU each sequence's token costs its pass
    through the layers, so a batch of many short prompts steps far slower than one of a single prompt
    holding as many tokens (benchmarks/simulator_vs_vllm.py's vLLM CPU server), and a simulator without
    it has capacity the server does not near saturation."""
    b = np.array([m.batch_size for m in measurements], dtype=float)[kept]
    tokens = np.array([m.mean_context_tokens for m in measurements], dtype=float)[kept]
    y = decode[kept]
    if len({int(v) for v in b}) < 3 or len(y) < 4:
        return linear
    coef, r2 = _nnls_r2(np.column_stack([np.ones_like(b), b, tokens]), y)
    if r2 < linear[3] + 0.01 or coef[1] <= 0 or coef[0] <= 0:
        return linear
    return float(coef[0]), float(coef[1]), float(coef[2]), r2


def _with_attention(measurements, prefill: np.ndarray, kept: np.ndarray,
                    linear: tuple[float, float, float, float], step_tokens: int | None = None
                    ) -> tuple[float, float, float, float]:
    """(c, k1, a, R²) of prefill ≈ c + k1 · b·p + a · b·p²/2 (non-negative least squares on the kept rows,
    relative errors) where the quadratic term explains the rows better than the line (R² up by 0.01 or
    more, with at least three prompt lengths); else the line, a = 0. Why: at long prompts each token's
    attention over the ones before it dominates a prefill (a 4,096-token prompt costs 12× a 768-token one
    on a small CPU model), which a line through short prompts underestimates."""
    b = np.array([m.batch_size for m in measurements], dtype=float)[kept]
    p = np.array([m.prompt_tokens for m in measurements], dtype=float)[kept]
    y = prefill[kept]
    if len({int(v) for v in p}) < 3 or len(y) < 4:
        return linear
    steps = np.ceil(b * p / step_tokens) if step_tokens else np.ones_like(p)
    coef, r2 = _nnls_r2(np.column_stack([steps, b * p, b * p * p / 2]), y, weight=1.0 / np.maximum(y, 1e-9))
    if (r2 < linear[3] + 0.01 and not step_tokens) or coef[2] <= 0:
        return linear
    return float(coef[0]), float(coef[1]), float(coef[2]), r2
