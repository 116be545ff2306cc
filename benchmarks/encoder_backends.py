"""The sentence encoder on PyTorch and on ONNX Runtime (float32, and int8 where parity holds): throughput,
parity of the embeddings, and parity of the router's choices.

    .venv/bin/python -m benchmarks.encoder_backends [--prompts 2000] [--quick]

Prompts: LLMRouter's query files (14 tasks, short questions to few-shot prompts), the first
`--prompts`, encoded at the encoder's 256-word-piece window, batches of 64; each backend encodes
them twice and the faster pass counts (the first warms caches). Parity: the smallest and mean
cosine to PyTorch per prompt. Router choices: the router selected on dcrouter's training split with
PyTorch embeddings (the fleet's settings, the KNN's truncation side) routes the test split embedded
by each backend; agreement is the share of prompts routed to the same model as with PyTorch.
Writes benchmarks/results/encoder_backends/encoder_backends.json.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from routeforge.core.pretrained import ENCODER_PACKAGE_REF

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser


def prompts(n: int) -> list[str]:
    rows = []
    for name in ("llmrouter_query_train.jsonl", "llmrouter_query_test.jsonl"):
        with open(DATA / "prompts" / name, encoding="utf-8") as lines:  # not splitlines: texts hold U+2028
            rows += [json.loads(line)["query"] for line in lines if line.strip()]
    return rows[:n]


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float]:
    best, out = float("inf"), None
    for _ in range(2):
        start = time.perf_counter()
        out = encode(texts)
        best = min(best, time.perf_counter() - start)
    return out, best


def int8_encoder(folder: Path, work: Path):
    """The exported graph with its MatMul weights quantized to int8 (onnxruntime's dynamic quantizer)."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic
    from routeforge.artifacts.deciding.sentence_encoder import SentenceEncoder

    shutil.copytree(folder, work, dirs_exist_ok=True)
    quantize_dynamic(str(folder / "model.onnx"), str(work / "model.onnx"), weight_type=QuantType.QInt8)
    return SentenceEncoder.load(work)


def router_agreement(backends: dict, quick: bool) -> dict:
    from routeforge.training.embeddings import encode_cached
    from routeforge.training.predictors.router_selection import select_router

    from benchmarks.score_fleets import score_fleet, selection_settings

    data = score_fleet("dcrouter")
    config, models, quality, train, test, texts = (data.config, data.models, data.quality, data.train, data.test,
                                                   data.texts)
    settings = selection_settings(config, quick)
    side = config.training.knn.truncation_side
    cache = Path(config.storage_root) / "cache" / "embeddings"
    os.environ["ROUTEFORGE_ENCODER_BACKEND"] = "torch"  # the router is trained as before this change
    x = encode_cached(texts, config.encoder, side, cache)
    selection = select_router(x[train], quality[train], models, settings,
                              {"ref": config.encoder, "truncation_side": side}, log=lambda _: None)
    router = selection.router
    test_texts = [t for t, k in zip(texts, test) if k]
    reference = router.predict_embeddings(x[test]).best_index(0.0)
    y = quality[test]
    out = {"chosen": selection.chosen, "test_prompts": len(test_texts)}
    for name, encode in backends.items():
        picks = router.predict_embeddings(encode(test_texts, side)).best_index(0.0)
        out[name] = {"agreement": float(np.mean(picks == reference)),
                     "routed_quality": float(np.nanmean(y[np.arange(len(y)), picks]))}
    out["torch_routed_quality"] = float(np.nanmean(y[np.arange(len(y)), reference]))
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=2000)
    args = parser.parse_args()
    n = 200 if args.quick else args.prompts
    texts = prompts(n)
    import torch
    from routeforge.training.embeddings import encode, onnx_encoder, onnx_encoder_folder

    fp32 = onnx_encoder(ENCODER_PACKAGE_REF)
    with tempfile.TemporaryDirectory() as tmp:
        int8 = int8_encoder(onnx_encoder_folder(ENCODER_PACKAGE_REF), Path(tmp) / "int8")
        runs = {"torch": lambda t, side="right": encode(t, ENCODER_PACKAGE_REF, truncation_side=side, backend="torch"),
                "onnx_fp32": lambda t, side="right": fp32.encode(t, side),
                "onnx_int8": lambda t, side="right": int8.encode(t, side)}
        results, vectors = {}, {}
        for name, run in runs.items():
            vectors[name], seconds = timed(run, texts)
            results[name] = {"seconds": seconds, "prompts_per_s": len(texts) / seconds}
            print(f"{name}: {len(texts) / seconds:.1f} prompts/s", flush=True)
        for name in ("onnx_fp32", "onnx_int8"):
            cos = np.sum(vectors[name] * vectors["torch"], axis=1)
            results[name] |= {"min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
                              "speedup_vs_torch": results["torch"]["seconds"] / results[name]["seconds"]}
        agreement = router_agreement({k: v for k, v in runs.items() if k != "torch"}, args.quick)
    out = {"prompts": len(texts), "window_word_pieces": 256, "batch": 64, "torch_threads": torch.get_num_threads(),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "backends": results,
           "router_choices_dcrouter": agreement, "quick": args.quick}
    path = results_dir("encoder_backends") / "encoder_backends.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
