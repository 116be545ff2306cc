"""Package a fine-tuned text predictor for the runtime (`artifacts.deciding.text_predictor`), small.

Three fine-tuned MiniLMs in float32 ONNX made the demo bundle 264 MB. Here:
- the ONNX graph takes `inputs_embeds`: the word-embedding table (30,522 × 384 for MiniLM, half its
  weights) leaves the graph. Trained frozen (`freeze_word_embeddings`), it is the backbone's own
  table, written once per backbone and precision to a sibling component `text_embeddings--<digest>`
  that every predictor of that backbone names, so the bundle stores it once; rows the predictor
  added (its model tokens) stay in its own folder;
- with `export_precision: int8` the graph's MatMul weights are stored in 8 bits (weight-only, in
  blocks, `quantize_graph`) and the table with one scale per row
  (`artifacts.deciding.text_predictor.quantize_rows`); `int8_dynamic` quantizes activations too (faster,
  coarser).
Parity with the PyTorch model is measured on the check prompts, batched and one at a time, and kept
in `predictor.json`: the largest logit difference and the top-1 agreement, overall and on prompts
the PyTorch model does not consider a near tie (top-2 logit margin ≥ `DECIDED_MARGIN`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.text_predictor import (
    EMBEDDINGS_FILE,
    EXTRA_EMBEDDINGS_FILE,
    TextPredictor,
    quantize_rows,
)

DECIDED_MARGIN = 0.1  # logits; closer top-2 logits are a tie a rounding error may break either way
TOLERANCE = {"float32": 1e-3}  # largest logit difference accepted, where the precision is lossless
MIN_DECIDED_AGREEMENT = 0.995  # top-1 agreement on decided prompts accepted for a lossy precision
PARITY_PROMPTS = 256  # training prompts the packaged predictor is compared with PyTorch on


def torch_logits(model, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 64) -> np.ndarray:
    """The PyTorch model's logits, tokenized as the runtime tokenizes (the reference for parity)."""
    import torch

    out = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[i:i + batch_size]), truncation=True, max_length=max_length, padding=True,
                            return_tensors="pt")
            out.append(model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.float().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.num_labels), dtype=np.float32)


def export_onnx(model, onnx_path: Path, dim: int) -> Path:
    """ONNX graph `inputs_embeds`, `attention_mask` → `logits`, dynamic batch and sequence axes."""
    import torch

    class FromEmbeddings(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs_embeds, attention_mask):
            return self.inner(inputs_embeds=inputs_embeds, attention_mask=attention_mask).logits

    example = torch.randn(2, 7, dim)
    mask = torch.ones(2, 7, dtype=torch.int64)
    mask[1, 5:] = 0
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        FromEmbeddings(model).eval(), (example, mask), str(onnx_path), input_names=["inputs_embeds", "attention_mask"],
        output_names=["logits"], opset_version=17, dynamo=False,
        dynamic_axes={"inputs_embeds": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                      "logits": {0: "batch"}},
    )
    return onnx_path


PRECISIONS = ("int8", "int8_dynamic", "float32")
WEIGHT_BLOCK = 128  # input rows sharing one scale in weight-only int8 (MatMulNBits' block_size)


def quantize_graph(source: Path, target: Path, precision: str) -> None:
    """`int8`: weight-only (onnxruntime's MatMulNBits, 8 bits, symmetric blocks of WEIGHT_BLOCK;
    activations stay float32). `int8_dynamic`: weights per output channel and activations per
    batch in int8 (onnxruntime dynamic quantization): about twice as fast on CPU, 4–10 times
    the logit error (benchmarks/predictor_packaging.py). `float32`: as exported."""
    if precision == "int8":
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            MatMulNBitsQuantizer,
        )

        quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=DefaultWeightOnlyQuantConfig(
            block_size=WEIGHT_BLOCK, is_symmetric=True, bits=8))
        quantizer.process()
        quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    elif precision == "int8_dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    elif precision == "float32":
        shutil.copy(source, target)
    else:
        raise ValueError(f"export_precision {precision!r}: expected one of {PRECISIONS}")


def _write_table(path: Path, table: np.ndarray, precision: str) -> None:
    from safetensors.numpy import save_file

    tensors = quantize_rows(table) if precision.startswith("int8") else {"weight": table.astype(np.float32)}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))


def write_shared_table(parent: Path, table: np.ndarray, precision: str) -> str:
    """Write the frozen table as component `text_embeddings--<digest>` under `parent` (once: the
    name is its content's digest, and a concurrent writer's rename of equal bytes is harmless)."""
    digest = hashlib.sha256(np.ascontiguousarray(table, dtype=np.float32).tobytes()
                            + precision.encode()).hexdigest()[:12]
    name = f"text_embeddings--{digest}"
    target = parent / name / EMBEDDINGS_FILE
    if not target.is_file():
        with tempfile.TemporaryDirectory(dir=parent, prefix=f".{name}-") as tmp:
            _write_table(Path(tmp) / EMBEDDINGS_FILE, table, precision)
            target.parent.mkdir(parents=True, exist_ok=True)
            Path(tmp, EMBEDDINGS_FILE).replace(target)
    return name


def parity(reference: np.ndarray, runtime: np.ndarray) -> dict[str, float]:
    """Logit difference and top-1 agreement between the PyTorch and the runtime predictor."""
    top2 = np.sort(reference, axis=1)[:, -2:] if reference.shape[1] > 1 else np.zeros((len(reference), 2))
    decided = (top2[:, 1] - top2[:, 0]) >= DECIDED_MARGIN
    agree = reference.argmax(1) == runtime.argmax(1)
    return {"onnx_max_abs_diff": float(np.abs(runtime - reference).max()),
            "onnx_top1_agreement": float(agree.mean()),
            "onnx_top1_agreement_decided": float(agree[decided].mean()) if decided.any() else 1.0,
            "onnx_parity_prompts": float(len(reference)), "onnx_near_tie_prompts": float((~decided).sum())}


def parity_metrics(spec: dict) -> dict[str, float]:
    """The parity figures of a packaged spec, as component metrics."""
    return {k: float(spec[k]) for k in ("onnx_max_abs_diff", "onnx_top1_agreement", "onnx_top1_agreement_decided",
                                        "onnx_near_tie_prompts") if k in spec}


def parity_passes(spec: dict) -> bool:
    """The packaging check: lossless precisions within TOLERANCE, int8 by decided top-1 agreement."""
    precision = spec.get("precision", "float32")
    if precision in TOLERANCE:
        return spec["onnx_max_abs_diff"] < TOLERANCE[precision]
    return spec["onnx_top1_agreement_decided"] >= MIN_DECIDED_AGREEMENT


def package_predictor(model_dir: Path, folder: Path, spec: dict, check_texts: Sequence[str],
                      freeze_word_embeddings: bool = True, precision: str = "int8") -> dict:
    """Write the runtime component (ONNX, tokenizer files, `predictor.json`, the embedding tables)
    and return its spec with the parity figures against PyTorch on `check_texts`."""
    from transformers import AutoModelForSequenceClassification

    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for f in Path(model_dir).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(f, folder / f.name)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    table = model.get_input_embeddings().weight.detach().numpy()
    extra = len(spec.get("model_tokens") or {})
    base = table[:table.shape[0] - extra]
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_onnx(model, Path(tmp) / "model.onnx", table.shape[1])
        quantize_graph(graph, folder / "model.onnx", precision)
    if freeze_word_embeddings:
        shared = write_shared_table(folder.parent, base, precision)
    else:
        shared = None
        _write_table(folder / EMBEDDINGS_FILE, base, precision)
    if extra:
        _write_table(folder / EXTRA_EMBEDDINGS_FILE, table[-extra:], "float32")
    spec = spec | {"precision": precision, "embeddings": {"shared": shared, "rows": int(table.shape[0]),
                                                          "dim": int(table.shape[1]), "precision": precision,
                                                          "frozen": freeze_word_embeddings}}
    (folder / "predictor.json").write_text(json.dumps(spec, indent=2))
    runtime = TextPredictor.load(folder)
    texts = list(check_texts)
    # the reference is PyTorch with transformers' tokenizer; the runtime is ONNX with `tokenizers` alone
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.truncation_side = spec.get("truncation_side", "right")
    reference = torch_logits(model, tokenizer, texts, spec["max_length"])
    batched = runtime.logits(texts)
    single = np.concatenate([runtime.logits([t]) for t in texts[:8]])
    figures = parity(reference, batched)
    figures["onnx_max_abs_diff"] = max(figures["onnx_max_abs_diff"], float(np.abs(single - reference[:8]).max()))
    spec = spec | figures
    (folder / "predictor.json").write_text(json.dumps(spec, indent=2))
    return spec
