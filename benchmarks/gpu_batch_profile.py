"""Static-batch profiles of real model shapes on a GPU: random-weight Qwen2.5-0.5B / 1.5B / 7B and
Llama-3.1-8B (their published configs, bf16), measured with the pipeline's in-process profiler,
then fitted and evaluated here next to splitwise's published A100 / H100 tiers.

Two steps, because the GPU machine has torch and transformers but not this project's environment:
    python -m benchmarks.gpu_batch_profile --measure $OUT    # on the GPU machine (device tool)
    .venv/bin/python -m benchmarks.gpu_batch_profile --fit benchmarks/results/gpu_batch_profile
The first writes `<model>@<gpu>.measurements.json` per model; the second fits the prefill gradient
and the decode iteration (R²), evaluates the batch heads leave-one-configuration-out (held-out TTFT
and TPOT MAE), and writes gpu_batch_profile.json beside the splitwise tiers' numbers.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

# the architectures' published configs (Hugging Face hub `config.json`, fields a random init needs)
SHAPES = {
    "qwen2.5-0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                     "max_position_embeddings": 32768, "tie_word_embeddings": True},
    "qwen2.5-1.5b": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                     "max_position_embeddings": 32768, "tie_word_embeddings": True},
    "qwen2.5-7b": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "max_position_embeddings": 32768, "tie_word_embeddings": False},
    "llama-3.1-8b": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                     "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": False},
}
GRID = {"batch_sizes": [1, 4, 16, 64], "prompt_tokens": [128, 512, 2048], "output_tokens": [16], "repeats": 2,
        "warmup": 1}


def measure(out: Path, shapes: list[str]) -> None:
    from types import SimpleNamespace

    import torch
    from routeforge.profiling.batch_profiler import profile_model
    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0)
    for name in shapes:
        shape = dict(SHAPES[name])
        config = AutoConfig.for_model(shape.pop("model_type"), **shape)
        start = time.perf_counter()
        torch.manual_seed(0)
        with torch.device("cuda"):  # initialised on the GPU: an 8B random init on the CPU takes minutes
            try:
                model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
            except TypeError:  # transformers before 4.56 names it torch_dtype
                model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16).eval()
        built = time.perf_counter() - start
        ms = profile_model(model, SimpleNamespace(**GRID),  # BatchGrid's fields; no pydantic there
                           progress=lambda i, n: print(f"{name}: {i}/{n}", flush=True) if i % 6 == 0 else None)
        record = {"model": name, "gpu": gpu, "dtype": "bfloat16", "shape": SHAPES[name], "grid": GRID,
                  "torch": torch.__version__, "build_s": built, "profile_s": time.perf_counter() - start - built,
                  "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30,
                  "measurements": [asdict(m) for m in ms]}
        (out / f"{name}.measurements.json").write_text(json.dumps(record, indent=2))
        print(f"{name} on {gpu}: {len(ms)} batches in {record['profile_s']:.1f} s, "
              f"peak {record['peak_memory_gb']:.1f} GB", flush=True)
        del model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def fit(folder: Path) -> dict:
    from routeforge.profiling.batch_fits import BatchMeasurement, fit_tier
    from routeforge.profiling.latency_heads import leave_one_configuration_out

    tiers = {}
    for path in sorted(folder.glob("*.measurements.json")):
        record = json.loads(path.read_text())
        ms = [BatchMeasurement(**m) for m in record["measurements"]]
        f, held = fit_tier(ms), leave_one_configuration_out(ms)
        tiers[f"{record['model']}@{record['gpu']}"] = {
            "measurements": len(ms), "profile_s": record["profile_s"], "peak_memory_gb": record["peak_memory_gb"],
            "prefill_r2": f.prefill_r2, "decode_r2": f.decode_r2,
            "prefill_us_per_token": f.prefill_grad_s_per_token * 1e6, "decode_w_ms": f.decode_w_s * 1e3,
            "decode_h_us_per_token": f.decode_h_s_per_token * 1e6,
            "held_out": {"ttft_mae_ms_served": held.ttft_mae_ms_served, "ttft_mae_ms_linear": held.ttft_mae_ms_linear,
                         "tpot_mae_ms_served": held.tpot_mae_ms_served, "tpot_mae_ms_linear": held.tpot_mae_ms_linear,
                         "configurations": held.configurations, "chosen": held.chosen}}
    splitwise = folder.parent / "splitwise_heads" / "splitwise_heads.json"  # benchmarks/splitwise_heads.py
    published = json.loads(splitwise.read_text())["tiers"] if splitwise.exists() else {}
    result = {"grid": GRID, "tiers": tiers,
              "splitwise_vllm_tiers": {t: {"prefill_r2": v["fit"]["prefill_r2"], "decode_r2": v["fit"]["decode_r2"],
                                           "decode_w_ms": v["fit"]["decode_w_s"] * 1e3,
                                           "decode_h_us_per_token": v["fit"]["decode_h_s_per_token"] * 1e6}
                                       for t, v in published.items()}}
    (folder / "gpu_batch_profile.json").write_text(json.dumps(result, indent=2, default=float))
    for tier, t in result["splitwise_vllm_tiers"].items():
        print(f"splitwise {tier}: prefill R² {t['prefill_r2']:.4f}, decode R² {t['decode_r2']:.4f}, "
              f"decode W {t['decode_w_ms']:.1f} ms + H {t['decode_h_us_per_token']:.2f} µs/token")
    for tier, t in tiers.items():
        h = t["held_out"]
        print(f"{tier}: prefill R² {t['prefill_r2']:.4f}, decode R² {t['decode_r2']:.4f}; held-out TTFT MAE "
              f"{h['ttft_mae_ms_served']:.2f} ms (line {h['ttft_mae_ms_linear']:.2f}), TPOT MAE "
              f"{h['tpot_mae_ms_served']:.3f} ms (line {h['tpot_mae_ms_linear']:.3f})")
    return result


def main(argv: list[str]) -> None:
    if argv[:1] == ["--measure"] and len(argv) >= 2:
        measure(Path(argv[1]), argv[2:] or list(SHAPES))
    elif argv[:1] == ["--fit"] and len(argv) == 2:
        fit(Path(argv[1]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
