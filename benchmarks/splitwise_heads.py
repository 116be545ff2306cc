"""Imported splitwise tiers: batch fits and latency heads held out by configuration.

Per tier (model × hardware × tensor parallelism): R² of the prefill and decode-iteration fits, QLM's
P, d, ε, Θ, and nested leave-one-configuration-out errors of the served heads (line, line +
residual trees, or trees, chosen by grouped K-fold inside each training set), of each kind alone,
of the classic linear fit (W + H·context, k1·tokens + c) and of the static prior, with E2E computed
analytically (TTFT + (n − 1) · TPOT), and the coverage of the served p95 bound per batch size.
002's Table 12 reports TPOT MAE 0.22–0.88 ms/token and E2E MAPE 1.2–5.6% from live-telemetry heads.

Two protocols: `generated` keys a configuration by (batch, prompt, generated tokens), the protocol
of the first heads (runs that stopped early are their own configuration); `requested` by the
requested tokens, so every repeat of a configuration is held out together (stricter).

    .venv/bin/python -m benchmarks.splitwise_heads
Writes benchmarks/results/splitwise_heads/splitwise_heads.json.
"""

from __future__ import annotations

import json
import time

import numpy as np
from routeforge.profiling.batch_fits import fit_tier, import_splitwise
from routeforge.profiling.latency_heads import leave_one_configuration_out

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser

PROTOCOLS = ("generated", "requested")


def main() -> None:
    quick = bench_parser(__doc__).parse_args().quick
    tiers = import_splitwise(DATA / "profiles" / "splitwise_perf_model.csv")
    if quick:  # one tier, one protocol: the code path in seconds
        tiers = dict(list(tiers.items())[:1])
    protocols = PROTOCOLS[:1] if quick else PROTOCOLS
    out: dict = {"tiers": {}, "median_over_tiers": {}}
    for name, tier in tiers.items():
        fit = fit_tier(tier.measurements)
        out["tiers"][name] = {"fit": fit.to_dict()}
        for by in protocols:
            started = time.perf_counter()
            held = leave_one_configuration_out(tier.measurements, by=by)
            out["tiers"][name][by] = {"held_out": held.summary(), "per_configuration": held.per_configuration,
                                      "seconds": time.perf_counter() - started}
            print(f"{name:26s} [{by}] TPOT MAE ms served {held.tpot_mae_ms_served:.2f} linear "
                  f"{held.tpot_mae_ms_linear:.2f} trees {held.kinds['trees']['tpot_mae_ms']:.2f} | E2E MAPE served "
                  f"{100 * held.e2e_mape_served:.1f}% linear {100 * held.e2e_mape_linear:.1f}% trees "
                  f"{100 * held.kinds['trees']['e2e_mape']:.1f}% | chosen {held.chosen} | p95 coverage "
                  f"{ {k: round(v, 3) for k, v in held.coverage_p95.items()} }", flush=True)
    for by in protocols:
        rows = [t[by]["held_out"] for t in out["tiers"].values()]
        out["median_over_tiers"][by] = {
            key: float(np.median([r[key] for r in rows]))
            for key in ("tpot_mae_ms_served", "tpot_mae_ms_linear", "e2e_mape_served", "e2e_mape_linear",
                        "ttft_mae_ms_served", "ttft_mae_ms_linear")
        } | {f"{k}_{m}": float(np.median([r["kinds"][k][m] for r in rows]))
             for k in ("line", "residual", "trees") for m in ("tpot_mae_ms", "e2e_mape")}
        out["median_over_tiers"][by]["served_not_worse_than_linear_on_every_tier"] = all(
            r["tpot_mae_ms_served"] <= r["tpot_mae_ms_linear"] and r["e2e_mape_served"] <= r["e2e_mape_linear"]
            for r in rows)
        print(f"median over tiers [{by}]: {out['median_over_tiers'][by]}")
    path = results_dir("splitwise_heads") / "splitwise_heads.json"
    path.write_text(json.dumps(out, indent=2, sort_keys=True))
    plot(out, protocols[0], path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")


def plot(out: dict, by: str, path) -> None:
    """Per tier: held-out TPOT MAE and E2E MAPE of the served heads, the classic line and the trees."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(out["tiers"])
    rows = [out["tiers"][n][by]["held_out"] for n in names]
    series = {"served": (lambda r: r["tpot_mae_ms_served"], lambda r: 100 * r["e2e_mape_served"]),
              "classic line": (lambda r: r["tpot_mae_ms_linear"], lambda r: 100 * r["e2e_mape_linear"]),
              "trees (heads before)": (lambda r: r["kinds"]["trees"]["tpot_mae_ms"],
                                       lambda r: 100 * r["kinds"]["trees"]["e2e_mape"])}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    pos = np.arange(len(names))
    for i, (label, (tpot, e2e)) in enumerate(series.items()):
        axes[0].bar(pos + (i - 1) * 0.27, [tpot(r) for r in rows], 0.27, label=label)
        axes[1].bar(pos + (i - 1) * 0.27, [e2e(r) for r in rows], 0.27, label=label)
    short = [n.replace("-80gb", "").replace("llama2-", "") for n in names]
    for ax, ylabel in zip(axes, ("TPOT MAE (ms/token)", "E2E MAPE (%)")):
        ax.set_xticks(pos, short, rotation=30, ha="right")
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle(f"splitwise tiers, held out by configuration ({by} tokens)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
