"""QPS sweep on this CPU against a real `transformers serve --continuous-batching`, then the heads.

A random-weight Llama (4 layers, hidden 256; meaningless text, realistic mechanics) serves the
LLMRouter test queries (14 tasks, prompts cut to 256 tokens), each asking for a seeded uniform
8–96 output tokens (random weights rarely stop early). Phases: warm-up, idle, saturation, then
Poisson arrivals at 7 fractions (0.1–1.3) of the measured saturation rate, 300 requests each.
Then: TPOT/TTFT/E2E heads trained on the earliest requests of every rate and tested on the latest
20% (time split), against the static prior; QLM's waiting time against the observed one per rate;
the heads reloaded through the bundle's runtime loader and compared with training predictions.

    .venv/bin/python -m benchmarks.cpu_sweep [--requests-per-rate 300] [--from-records]
Writes benchmarks/results/cpu_sweep/cpu_sweep.json, cpu_sweep_records.parquet and two PNG figures.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow.parquet as pq
from routeforge.artifacts.deciding.latency import LatencyModel
from routeforge.core.config import RandomInitSource, SweepSettings
from routeforge.core.model_sources import build_random_init
from routeforge.generation.local_server import transformers_serve
from routeforge.profiling.plots import plot_sweep
from routeforge.profiling.sweep import SweepPrompt, SweepResult, records_table, run_sweep
from routeforge.profiling.sweep_heads import evaluate_rwt, sweep_data, sweep_rwt, train_sweep_heads

from benchmarks.common import DATA, REPO, results_dir
from benchmarks.common import parser as bench_parser

OUT = results_dir("cpu_sweep")
MODEL = RandomInitSource(kind="random_init", architecture="llama", seed=11, config={
    "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 1024})


def prompts(tokenizer, seed: int = 0) -> list[SweepPrompt]:
    rng = np.random.default_rng(seed)
    out = []
    for line in filter(None, (DATA / "prompts" / "llmrouter_query_test.jsonl").read_text().split("\n")):
        row = json.loads(line)
        ids = tokenizer(row["query"], add_special_tokens=False)["input_ids"][:256]
        text = tokenizer.decode(ids)
        out.append(SweepPrompt(text=text, prompt_tokens=len(tokenizer(text)["input_ids"]),
                               max_tokens=int(rng.integers(8, 97)), group=row["task_name"]))
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--requests-per-rate", type=int, default=300)
    parser.add_argument("--from-records", action="store_true",
                        help="retrain and re-evaluate from the saved records and summary, without a new sweep")
    args = parser.parse_args()
    if args.quick:
        args.requests_per_rate = 20
    from transformers import AutoTokenizer

    work = REPO / ".state" / "bench_cpu_sweep"
    model_dir = build_random_init(MODEL, work / "models")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    pool = prompts(tokenizer)
    settings = SweepSettings(requests_per_rate=args.requests_per_rate, idle_requests=40, saturation_requests=200,
                             saturation_concurrency=64, max_seconds_per_rate=300, request_timeout_s=120)
    tier = "llama-4x256-random@cpu"
    if args.from_records:
        saved = json.loads((OUT / "cpu_sweep.json").read_text())
        table = pq.read_table(OUT / "cpu_sweep_records.parquet")
        result = SweepResult(records=table.to_pylist(), rates=saved["rates_offered"],
                             saturation_rps=saved["saturation_rps"], saturation_tok_s=saved["saturation_output_tok_s"],
                             metrics_available=saved["server_metrics_endpoint"], summary=saved["summary"])
        sweep_s = saved["sweep_wall_s"]
    else:
        started = time.perf_counter()
        with transformers_serve(model_dir, work / "serve.log") as url:
            result = run_sweep(url, str(model_dir), pool, settings, tier)
        sweep_s = time.perf_counter() - started
        table = records_table(result.records)
        OUT.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, OUT / "cpu_sweep_records.parquet")

    heads_dir = work / "latency" / tier
    started = time.perf_counter()
    spec, trained = train_sweep_heads(table, heads_dir, tier, plot=OUT / "cpu_sweep_heads.png",
                                      saturation_rps=result.saturation_rps)
    train_s = time.perf_counter() - started
    params = sweep_rwt(result.summary, max_output_tokens=96)
    rwt = evaluate_rwt(table, params)
    plot_sweep(result.summary, rwt, OUT / "cpu_sweep.png", f"{tier}: transformers serve on 2 CPU cores")

    # The runtime loader, from the written folder alone, against the training-time predictions.
    loaded = LatencyModel.load(heads_dir)
    data = sweep_data(table, 0.2)
    replay = loaded.predict_matrix(data.x)
    replay["e2e"] = replay.pop("e2e_direct")
    loader_diff = max(loaded.golden_max_abs_diff(), *(float(np.abs(replay[k] - trained[k]).max()) for k in trained))

    rate_requests = sum(s["requests"] for s in result.summary if s["phase"] == "rate")
    out = {
        "tier": tier, "model": MODEL.model_dump(), "settings": settings.model_dump(),
        "requests_total": len(result.records), "requests_in_rate_phases": rate_requests,
        "rates_offered": result.rates, "saturation_rps": result.saturation_rps,
        "saturation_output_tok_s": result.saturation_tok_s, "server_metrics_endpoint": result.metrics_available,
        "sweep_wall_s": sweep_s, "heads_train_s": train_s, "summary": result.summary,
        "heads": {k: spec[k] for k in ("evaluation", "prior", "intervals", "residual_quantiles", "split")}
        | {"served": {t: {k: v for k, v in h.items() if k != "line"} for t, h in spec["heads"].items()}},
        "rwt_params": params.to_dict(), "rwt_per_rate": rwt, "loader_max_abs_diff": loader_diff,
    }
    (OUT / "cpu_sweep.json").write_text(json.dumps(out, indent=2))
    h = spec["evaluation"]["held_out_rate_phases"]
    print(f"{len(result.records)} requests ({rate_requests} at {len(result.rates)} rates) in {sweep_s:.0f} s; "
          f"saturation {result.saturation_rps:.1f} req/s; served {({t: v['kind'] for t, v in spec['heads'].items()})}")
    print(f"held-out (rate phases) TPOT MAE served {h['tpot_mae_ms_served']:.2f} ms vs line "
          f"{h['tpot_mae_ms_line']:.2f}, trees {h['tpot_mae_ms_trees']:.2f}, prior {h['tpot_mae_ms_prior']:.2f}; "
          f"TTFT MAE served "
          f"{h['ttft_mae_ms_served']:.1f} ms vs line {h['ttft_mae_ms_line']:.1f}, trees {h['ttft_mae_ms_trees']:.1f}, "
          f"prior {h['ttft_mae_ms_prior']:.1f}; "
          f"E2E MAPE analytic {100 * h['e2e_mape_analytic']:.1f}% direct {100 * h['e2e_mape_direct']:.1f}% "
          f"prior {100 * h['e2e_mape_prior']:.1f}%")
    for r in spec["evaluation"]["per_rate"]:
        print(f"  {r['rate']:6.2f} req/s: p95 bound covers TPOT {r['tpot_within_p95_bound']:.3f}, TTFT "
              f"{r['ttft_within_p95_bound']:.3f}, E2E {r['e2e_within_p95_bound']:.3f}")
    for r in rwt:
        print(f"  {r['rate']:6.2f} req/s: wait observed {r['observed_wait_ms']:.1f} ms, "
              f"QLM {r['predicted_wait_ms']:.1f} ms (queue {r['mean_queue_ahead']:.2f})")
    print(f"loader max |diff| {loader_diff:g}")


if __name__ == "__main__":
    main()
