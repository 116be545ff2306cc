"""Static-batch profiling in-process on this CPU: the same random-weight Llama as the CPU sweep.

Grid: batch 1, 2, 4, 8, 16 × prompt 32, 128, 256 tokens × 16 output tokens, 2 repeats after a
warm-up; fits the prefill gradient and the decode iteration W + H · context with R², QLM's P, d,
ε, Θ, and evaluates the batch heads leave-one-configuration-out.

    .venv/bin/python -m benchmarks.cpu_batch_profile
Writes benchmarks/results/cpu_batch_profile/cpu_batch_profile.json and cpu_batch_profile.png.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from routeforge.core.config import BatchGrid
from routeforge.core.model_sources import build_random_init
from routeforge.profiling.batch_fits import fit_tier
from routeforge.profiling.batch_profiler import profile_model
from routeforge.profiling.latency_heads import leave_one_configuration_out
from routeforge.profiling.plots import plot_batch_fit

from benchmarks.common import REPO, results_dir
from benchmarks.common import parser as bench_parser
from benchmarks.cpu_sweep import MODEL

OUT = results_dir("cpu_batch_profile")


def main() -> None:
    quick = bench_parser(__doc__).parse_args().quick
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = build_random_init(MODEL, REPO / ".state" / "bench_cpu_sweep" / "models")
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    grid = (BatchGrid(batch_sizes=[1, 2], prompt_tokens=[32, 64], output_tokens=[4], repeats=1) if quick else
            BatchGrid(batch_sizes=[1, 2, 4, 8, 16], prompt_tokens=[32, 128, 256], output_tokens=[16], repeats=2))
    start = time.perf_counter()
    ms = profile_model(model, grid, max_positions=model.config.max_position_embeddings)
    seconds = time.perf_counter() - start
    fit = fit_tier(ms)
    held = leave_one_configuration_out(ms)
    plot_batch_fit(ms, fit, OUT / "cpu_batch_profile.png", "llama-4x256-random@cpu: static batches, 2 CPU threads")
    out = {"model": MODEL.model_dump(), "grid": grid.model_dump(), "torch_threads": torch.get_num_threads(),
           "measurements": len(ms), "profile_s": seconds, "fit": fit.to_dict(), "held_out": held.summary()}
    (OUT / "cpu_batch_profile.json").write_text(json.dumps(out, indent=2))
    print(f"{len(ms)} batches in {seconds:.1f} s; prefill {fit.prefill_grad_s_per_token * 1e6:.1f} µs/token "
          f"(R² {fit.prefill_r2:.3f}); decode W {fit.decode_w_s * 1e3:.2f} ms + H {fit.decode_h_s_per_token * 1e6:.2f} "
          f"µs/token (R² {fit.decode_r2:.3f}); P {fit.ttft_p_s * 1e3:.1f} ms, d {fit.decode_d_s * 1e3:.2f} ms, "
          f"ε {fit.epsilon:.2f}, Θ {fit.theta_tokens_per_s:.0f} tok/s; held-out TPOT MAE served "
          f"{held.tpot_mae_ms_served:.3f} ms vs linear {held.tpot_mae_ms_linear:.3f} vs trees "
          f"{held.kinds['trees']['tpot_mae_ms']:.3f} vs prior {held.tpot_mae_ms_prior:.3f}; TTFT MAE served "
          f"{held.ttft_mae_ms_served:.2f} ms vs linear {held.ttft_mae_ms_linear:.2f} vs trees "
          f"{held.kinds['trees']['ttft_mae_ms']:.2f}; chosen {held.chosen}; p95 coverage {held.coverage_p95}")


if __name__ == "__main__":
    main()
