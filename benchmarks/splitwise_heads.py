"""Imported splitwise tiers: batch fits and XGBoost latency heads held out by configuration.

Per tier (model × hardware × tensor parallelism): R² of the prefill and decode-iteration fits, QLM's
P, d, ε, Θ, and leave-one-configuration-out errors of the TPOT/TTFT heads next to the linear fit and
the static prior, with E2E computed analytically (TTFT + (n − 1) · TPOT); 002's Table 12 reports
TPOT MAE 0.22–0.88 ms/token and E2E MAPE 1.2–5.6% from live-telemetry heads.

    .venv/bin/python -m benchmarks.splitwise_heads
Writes benchmarks/results/splitwise_heads/splitwise_heads.json.
"""

from __future__ import annotations

import json

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser
from profiling.batch_fits import fit_tier, import_splitwise
from profiling.latency_heads import leave_one_configuration_out


def main() -> None:
    bench_parser(__doc__).parse_args()  # --quick: the benchmark is seconds long either way
    tiers = import_splitwise(DATA / "profiles" / "splitwise_perf_model.csv")
    out = {}
    for name, tier in tiers.items():
        fit = fit_tier(tier.measurements)
        held = leave_one_configuration_out(tier.measurements)
        out[name] = {
            "fit": fit.to_dict(),
            "held_out": held.summary(),
            "per_configuration": held.per_configuration,
        }
        print(f"{name:28s} R2 prefill {fit.prefill_r2:.3f} decode {fit.decode_r2:.3f} | TPOT MAE ms head "
              f"{held.tpot_mae_ms_head:.2f} linear {held.tpot_mae_ms_linear:.2f} prior {held.tpot_mae_ms_prior:.2f}"
              f" | E2E MAPE head {100 * held.e2e_mape_head:.1f}% linear {100 * held.e2e_mape_linear:.1f}%", flush=True)
    path = results_dir("splitwise_heads") / "splitwise_heads.json"
    path.write_text(json.dumps(out, indent=2, sort_keys=True))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
