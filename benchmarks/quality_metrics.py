"""Quality-metric benchmarks on this machine: extraction, label agreement, code execution, BERTScore.

1. GSM8K: answers recovered by math extraction from the 1,319 reference solutions.
2. RouteLLM GSM8K table: agreement of exact match (with extraction) with the file's True/False labels.
3. HumanEval: the 164 canonical solutions through the sandbox, pass count and wall time.
4. BERTScore (all-MiniLM-L6-v2 backbone, layer 6): 10,000 (reference, response) pairs from the
   RouteLLM table's GSM8K solutions vs the two models' answers, pairs/s; then a re-run from the cache.

    .venv/bin/python -m benchmarks.quality_metrics [--pairs 10000]
Writes benchmarks/results/quality_metrics/quality_metrics.json.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from routeforge.core.config import ScoringSettings
from routeforge.scoring.metrics.bertscore import BertScoreMetric
from routeforge.scoring.metrics.code_exec import humaneval_program, run_many
from routeforge.scoring.metrics.exact_match import exact_match
from routeforge.scoring.metrics.extraction import extract_math, normalize_number

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser

MODELS = ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--out", default=str(results_dir("quality_metrics") / "quality_metrics.json"))
    args = parser.parse_args()
    if args.quick:
        args.pairs = 200
    result: dict = {"machine_cpus": os.cpu_count()}

    gsm = [json.loads(line) for line in open(DATA / "prompts" / "gsm8k_test.jsonl")]
    gold = {r["question"]: normalize_number(r["answer"].rsplit("####", 1)[1]) for r in gsm}
    result["gsm8k_reference_extraction"] = {
        "recovered": sum(extract_math(r["answer"]) == gold[r["question"]] for r in gsm), "references": len(gsm)}

    csv.field_size_limit(sys.maxsize)
    table = list(csv.DictReader(open(DATA / "responses" / "routellm_gsm8k_responses.csv")))
    answers = {r["question"]: r["answer"] for r in gsm}
    agreement = {}
    for model in MODELS:
        agree = 0
        for row in table:
            ref = answers[row["prompt"]]
            score, _ = exact_match(row[f"{model}_response"], ref, {"final_answer": ref.rsplit("####", 1)[1].strip()})
            agree += (score == 1.0) == (row[model] == "True")
        agreement[model] = {"agreement": round(agree / len(table), 4), "responses": len(table)}
    result["routellm_label_agreement"] = agreement
    print(json.dumps(result, indent=1), flush=True)

    with gzip.open(DATA / "prompts" / "humaneval.jsonl.gz", "rt") as f:
        tasks = [json.loads(line) for line in f]
    start = time.perf_counter()
    programs = [humaneval_program(t["prompt"], t["canonical_solution"], t["test"], t["entry_point"]) for t in tasks]
    runs = run_many(programs)
    result["humaneval_canonical"] = {"passed": sum(r.passed for r in runs), "tasks": len(tasks),
                                     "wall_s": round(time.perf_counter() - start, 2)}
    print(json.dumps(result["humaneval_canonical"]), flush=True)

    # distinct pairs: each solution against each model's answer to the same question and, for more
    # pairs, to the next questions (shift 1, 2, …): different texts, so nothing is scored twice
    refs, cands, shift = [], [], 0
    while len(refs) < args.pairs:
        for i, row in enumerate(table):
            other = table[(i + shift) % len(table)]
            for model in MODELS:
                refs.append(answers[row["prompt"]].rsplit("####", 1)[0].strip())
                cands.append(other[f"{model}_response"].strip() or ".")
        shift += 1
    refs, cands = refs[: args.pairs], cands[: args.pairs]
    settings = ScoringSettings(metric="bertscore", batch_size=64)
    with tempfile.TemporaryDirectory() as cache:
        metric = BertScoreMetric(settings, Path(cache))
        start = time.perf_counter()
        metric.score(cands, refs)
        first = time.perf_counter() - start
        again = BertScoreMetric(settings, Path(cache))
        start = time.perf_counter()
        again.score(cands, refs)
        second = time.perf_counter() - start
    distinct = len(set(zip(refs, cands)))
    result["bertscore"] = {"pairs": len(refs), "distinct_pairs": distinct, "backbone": settings.backbone,
                           "first_run_s": round(first, 1), "pairs_per_s": round(len(refs) / first, 1),
                           "rerun_s": round(second, 2), "rerun_scored": again.scored, "rerun_cache_hits": again.hits}
    print(json.dumps(result["bertscore"]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
