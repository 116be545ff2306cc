"""Figures of a tier's profile: what people would rather look at than read (PNG, matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from routeforge.profiling.batch_fits import BatchMeasurement, TierFit


def _figure(ncols: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 4.2))
    return plt, fig, np.atleast_1d(axes)


def _save(plt, fig, path: Path, title: str) -> Path:
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_batch_fit(ms: list[BatchMeasurement], fit: TierFit, path: Path, title: str) -> Path:
    """Prefill time against prompt tokens in the batch, decode iteration against context tokens,
    each with its fit and R² (the decode fit's value at each measured batch where it has a per-sequence
    term, which makes it no line in the tokens alone)."""
    plt, fig, (a, b) = _figure(2)
    x = np.array([m.prefill_tokens for m in ms], float)
    a.scatter(x, [m.prefill_s * 1e3 for m in ms], s=12, label="measured")
    grid = np.linspace(0, x.max(), 50)
    a.plot(grid, [fit.prefill_s(g) * 1e3 for g in grid], "r-", label=f"fit, R² {fit.prefill_r2:.3f}")
    a.set(xlabel="prompt tokens in the batch", ylabel="prefill (ms)", title="prefill")
    c = np.array([m.mean_context_tokens for m in ms], float)
    b.scatter(c, [m.decode_iter_s * 1e3 for m in ms], s=12, label="measured")
    grid = np.linspace(0, c.max(), 50)
    if fit.decode_s_per_seq > 0:
        b.scatter(c, [fit.decode_iter_s(m.mean_context_tokens, m.batch_size) * 1e3 for m in ms], s=16, marker="x",
                  color="r", label=f"W + S·batch + H·tokens, R² {fit.decode_r2:.3f}")
    else:
        b.plot(grid, [fit.decode_iter_s(g) * 1e3 for g in grid], "r-", label=f"W + H·tokens, R² {fit.decode_r2:.3f}")
    b.set(xlabel="context tokens in the running batch", ylabel="decode iteration (ms)", title="decode")
    for ax in (a, b):
        ax.legend()
    return _save(plt, fig, path, title)


def plot_sweep(summary: list[dict[str, Any]], rwt: list[dict[str, Any]], path: Path, title: str) -> Path:
    """TTFT and TPOT percentiles against offered load, and QLM's predicted against observed wait."""
    plt, fig, (a, b, c) = _figure(3)
    rows = [s for s in summary if s["phase"] == "rate"]
    rates = [s["offered_rps"] for s in rows]
    for key, style in (("ttft_p50_ms", "o-"), ("ttft_p99_ms", "o--")):
        a.plot(rates, [s[key] for s in rows], style, label=key.replace("_ms", ""))
    a.set(xlabel="offered rate (req/s)", ylabel="TTFT (ms)", title="TTFT under load", yscale="log")
    for key, style in (("tpot_p50_ms", "o-"), ("tpot_p99_ms", "o--")):
        b.plot(rates, [s[key] for s in rows], style, label=key.replace("_ms", ""))
    b.set(xlabel="offered rate (req/s)", ylabel="TPOT (ms/token)", title="TPOT under load")
    sat = next((s for s in summary if s["phase"] == "saturation"), None)
    for ax in (a, b):
        if sat:
            ax.axvline(sat["achieved_rps"], color="grey", ls=":", label="saturation")
        ax.legend()
    c.plot([r["rate"] for r in rwt], [r["observed_wait_ms"] for r in rwt], "o-", label="observed (TTFT − P)")
    c.plot([r["rate"] for r in rwt], [r["predicted_wait_ms"] for r in rwt], "s--", label="QLM W_q")
    c.set(xlabel="offered rate (req/s)", ylabel="mean wait (ms)", title="request waiting time")
    c.legend()
    return _save(plt, fig, path, title)


def plot_heads(observed: dict[str, np.ndarray], head: dict[str, np.ndarray], prior: dict[str, np.ndarray],
               path: Path, title: str) -> Path:
    """Held-out requests: predicted against observed TPOT, TTFT and E2E, heads and prior."""
    plt, fig, axes = _figure(3)
    for ax, key, unit in zip(axes, ("tpot", "ttft", "e2e"), ("ms/token", "ms", "ms")):
        y = observed[key] * 1e3
        ax.scatter(y, head[key] * 1e3, s=8, alpha=0.6, label="head")
        ax.scatter(y, prior[key] * 1e3, s=8, alpha=0.4, label="static prior")
        lim = [0, float(np.nanmax(y)) * 1.05]
        ax.plot(lim, lim, "k:", lw=1)
        ax.set(xlabel=f"observed {key.upper()} ({unit})", ylabel=f"predicted ({unit})", title=key.upper())
        ax.legend()
    return _save(plt, fig, path, title)


def plot_head_choice(held: dict[str, Any], path: Path, title: str) -> Path:
    """Held-out errors of the served heads next to each candidate alone (left: TPOT and TTFT MAE),
    and how often the served p95 bound held per batch size (right), from a `HeldOutReport.summary()`."""
    plt, fig, (a, b) = _figure(2)
    names = ["served", *held["kinds"]]
    tpot = [held["tpot_mae_ms_served"], *(held["kinds"][k]["tpot_mae_ms"] for k in held["kinds"])]
    ttft = [held["ttft_mae_ms_served"], *(held["kinds"][k]["ttft_mae_ms"] for k in held["kinds"])]
    pos = np.arange(len(names))
    a.bar(pos - 0.2, tpot, 0.4, label="TPOT MAE (ms/token)")
    a2 = a.twinx()
    a2.bar(pos + 0.2, ttft, 0.4, color="tab:orange", label="TTFT MAE (ms)")
    a.set_xticks(pos, names, rotation=20)
    a.set(ylabel="TPOT MAE (ms/token)", title="held-out error by head")
    a2.set_ylabel("TTFT MAE (ms)")
    a.set_ylim(0, max(tpot) * 1.3)
    a2.set_ylim(0, max(ttft) * 1.3)
    a.legend(loc="upper left", fontsize="small")
    a2.legend(loc="upper right", fontsize="small")
    batches = sorted({int(k) for cov in held["coverage_p95_by_batch"].values() for k in cov})
    for target, style in (("tpot", "o-"), ("ttft", "s--"), ("e2e", "^:")):
        cov = held["coverage_p95_by_batch"][target]
        b.plot([int(k) for k in cov], list(cov.values()), style, label=target.upper())
    b.axhline(0.95, color="grey", lw=1)
    b.set_xscale("log", base=2)
    b.set_xticks(batches, [str(x) for x in batches])
    b.set(xlabel="batch size", ylabel="held-out rows under the p95 bound", ylim=(0, 1.05),
          title="SLO bound coverage")
    b.legend()
    return _save(plt, fig, path, title)
