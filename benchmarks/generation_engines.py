"""Generation benchmarks on this machine: batching, the response cache, and the HTTP engine under faults.

1. Throughput: the transformers engine on the same GSM8K prompts and random-weight model, batched
   (length-bucketed batches of `--batch`) versus one request at a time: output tokens/s and the ratio.
2. Cache: a first run, a second run with nothing new (time and tokens generated), and a run with 5%
   more prompts (how many it generates).
3. HTTP: `transformers serve --continuous-batching` on 127.0.0.1 behind a proxy injecting 10% faults
   (503, 429, dropped connections, cut streams, delays past the timeout): pairs completed, duplicates,
   retries.

    .venv/bin/python -m benchmarks.generation_engines [--prompts 64] [--batch 16]
Writes benchmarks/results/generation_engines/generation_engines.json. The model's text is meaningless (random weights).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from routeforge.core.storage import Quarantine
from routeforge.fleet import load_fleet
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.generation.partition import generate_partition
from routeforge.prompts.sources import build_prompts

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser

MODEL = {"kind": "random_init", "architecture": "llama", "seed": 2,
         "config": {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 688,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 1024}}


def fleet(folder: Path, n_prompts: int, batch: int, models=None, max_tokens: int = 32, **sampling) -> Path:
    """A one-dataset fleet (GSM8K's first `n_prompts`) of `models` (the random Llama by default);
    `sampling` adds settings (e.g. ignore_eos)."""
    config = {
        "name": "bench", "storage_root": str(folder / "state"),
        "models": models or [{"name": "llama", "engine": "transformers", "source": MODEL}],
        "datasets": [{"kind": "builtin", "name": "gsm8k", "reader": "gsm8k", "limit": n_prompts,
                      "path": str(DATA / "prompts" / "gsm8k_test.jsonl")}],
        "generation": {"sampling": {"max_tokens": max_tokens, **sampling}, "batch_size": batch, "shard_size": 16},
        "scoring": {"metric": "bertscore"},
        "registry": {"tracking_uri": f"sqlite:///{folder}/mlflow.db", "experiment": "b", "model_name": "b"},
    }
    path = folder / f"fleet-{n_prompts}-{batch}-{len(list(folder.glob('fleet-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def throughput(folder: Path, n: int, batch: int) -> dict:
    out = {}
    for label, size in (("batched", batch), ("one_at_a_time", 1)):
        config = load_fleet(fleet(folder, n, size))
        prompts, _ = build_prompts(config)
        engine = make_engine(config.model("llama"), config, config.storage_root / "models")
        engine.generate(prompt_rows(prompts)[:2], Quarantine("warmup"))
        start = time.perf_counter()
        rows = engine.generate(prompt_rows(prompts), Quarantine("bench"))
        wall = time.perf_counter() - start
        tokens = sum(r["output_tokens"] for r in rows)
        out[label] = {"batch_size": size, "prompts": len(rows), "output_tokens": tokens, "wall_s": round(wall, 2),
                      "output_tokens_per_s": round(tokens / wall, 1)}
    out["speedup"] = round(out["batched"]["output_tokens_per_s"] / out["one_at_a_time"]["output_tokens_per_s"], 2)
    return out


def cache(folder: Path, n: int, batch: int) -> dict:
    config = load_fleet(fleet(folder, n, batch))
    prompts, _ = build_prompts(config)
    runs = {}
    for label, cfg in (("first", config), ("second_no_change", config)):
        start = time.perf_counter()
        result = generate_partition(cfg, "llama", prompts, log=lambda m: None)
        runs[label] = {"wall_s": round(time.perf_counter() - start, 2), "generated": result.generated,
                       "generated_output_tokens": result.generated_output_tokens}
    grown = load_fleet(fleet(folder, n + max(1, n // 20), batch))
    more, _ = build_prompts(grown)
    start = time.perf_counter()
    result = generate_partition(grown, "llama", more, log=lambda m: None)
    runs["five_percent_more_prompts"] = {"prompts": more.num_rows, "wall_s": round(time.perf_counter() - start, 2),
                                         "generated": result.generated, "cache_hits": result.cache_hits}
    runs["second_over_first"] = round(runs["second_no_change"]["wall_s"] / runs["first"]["wall_s"], 4)
    return runs


def http_faults(folder: Path, n: int) -> dict:
    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init

    from tests.conftest import free_port, stop, wait_healthy
    from tests.faults import FaultProxy

    path = str(build_random_init(RandomInitSource(**MODEL), folder / "models"))
    port, log = free_port(), folder / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", path,
                                 "--continuous-batching", "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health", log)
        proxy = FaultProxy(f"http://127.0.0.1:{port}", rate=0.10, seed=11, slow_s=6.0).start()
        models = [{"name": "served", "engine": "openai",
                   "source": {"kind": "openai", "base_url": proxy.url + "/v1", "model": path, "max_concurrency": 8,
                              "timeout_s": 5.0, "max_retries": 8, "backoff_s": 0.1}}]
        config = load_fleet(fleet(folder, n, 1, models=models, max_tokens=16))
        prompts, _ = build_prompts(config)
        start = time.perf_counter()
        result = generate_partition(config, "served", prompts, log=lambda m: None)
        wall = time.perf_counter() - start
        proxy.stop()
    finally:
        stop(proc)
    ids = result.table.column("prompt_id").to_pylist()
    attempts = result.table.column("attempts").to_pylist()
    return {"prompts": prompts.num_rows, "completed": len(ids), "duplicates": len(ids) - len(set(ids)),
            "quarantined": len(result.quarantine), "faults_injected": dict(proxy.injected),
            "requests_forwarded": proxy.forwarded, "retries": sum(a - 1 for a in attempts),
            "requests_retried": sum(a > 1 for a in attempts), "max_attempts": max(attempts), "wall_s": round(wall, 1)}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--http-prompts", type=int, default=200)
    parser.add_argument("--out", default=str(results_dir("generation_engines") / "generation_engines.json"))
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.batch, args.http_prompts = 8, 4, 16
    with tempfile.TemporaryDirectory(prefix="routeforge-gen-bench-") as tmp:
        folder = Path(tmp)
        result = {"model": MODEL, "note": "random weights: timings only, text is meaningless",
                  "machine_cpus": os.cpu_count()}
        for name, run in (("throughput", lambda f: throughput(f, args.prompts, args.batch)),
                          ("cache", lambda f: cache(f, args.prompts, args.batch)),
                          ("http_faults", lambda f: http_faults(f, args.http_prompts))):
            (folder / name).mkdir()
            result[name] = run(folder / name)
            print(name, json.dumps(result[name]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
