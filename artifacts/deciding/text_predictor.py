"""Runtime text predictor: prompts (and a model name where the predictor is shared) → class
probabilities, top-k classes and, for bucket predictors, expected values. ONNX Runtime only.

Folder layout (a bundle component): `model.onnx`, the tokenizer files, and `predictor.json`:
{kind, labels, max_length, truncation_side, hint_template, model_tokens, scheme, embeddings}.

With `embeddings` in the spec the ONNX graph takes `inputs_embeds` and the word-embedding lookup
happens here, in NumPy, from a table in safetensors: either a sibling component shared by every
predictor of the same backbone (`embeddings.shared`, e.g. `text_embeddings--<digest>`, stored once
in the bundle) or the predictor's own folder, plus the predictor's own rows for the special tokens
it added (`extra_embeddings.safetensors`). Tables are float32 or int8 with one scale per row.
Older components without `embeddings` take `input_ids` and are served as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.components import register_component
from routeforge.artifacts.deciding.tokenization import BatchTokenizer


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def compose(prompt: str, task: str | None = None, model: str | None = None, hint_template: str | None = None,
            model_tokens: dict[str, str] | None = None) -> str:
    """The text a predictor sees: [model token] prompt [task hint], as at training time."""
    text = prompt
    if hint_template and task:
        text = f"{text}\n{hint_template.format(task=task)}"
    if model_tokens is not None:
        if model not in model_tokens:
            raise KeyError(f"model {model!r} is not one this predictor knows ({sorted(model_tokens)})")
        text = f"{model_tokens[model]} {text}"
    return text


EMBEDDINGS_FILE = "embeddings.safetensors"
EXTRA_EMBEDDINGS_FILE = "extra_embeddings.safetensors"


def quantize_rows(table: np.ndarray) -> dict[str, np.ndarray]:
    """int8 with one symmetric scale per row: a row's largest |value| maps to 127."""
    scale = np.abs(table).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    return {"int8": np.round(table / scale[:, None]).clip(-127, 127).astype(np.int8),
            "scale": scale.astype(np.float32)}


def read_table(path: Path) -> np.ndarray:
    """A float32 table from `weight` (float32) or `int8` × `scale` (per row) in a safetensors file."""
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    if "weight" in tensors:
        return tensors["weight"].astype(np.float32)
    return tensors["int8"].astype(np.float32) * tensors["scale"][:, None]


def embedding_table(folder: Path, spec: dict[str, Any]) -> np.ndarray | None:
    """The predictor's full word-embedding table (shared rows, then its own extra rows), or None
    for a graph that embeds token ids itself."""
    embeddings = spec.get("embeddings")
    if not embeddings:
        return None
    home = folder.parent / embeddings["shared"] if embeddings.get("shared") else folder
    path = home / EMBEDDINGS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder.name}: its word-embedding table {path} is missing (component "
                                f"{embeddings.get('shared') or folder.name})")
    table = read_table(path)
    if (folder / EXTRA_EMBEDDINGS_FILE).is_file():
        table = np.concatenate([table, read_table(folder / EXTRA_EMBEDDINGS_FILE)])
    if table.shape[0] != embeddings["rows"]:
        raise ValueError(f"{folder.name}: embedding table has {table.shape[0]} rows, "
                         f"the spec says {embeddings['rows']}")
    return table


@register_component("length_predictor", "score_predictor", "task_classifier")
@dataclass
class TextPredictor:
    spec: dict[str, Any]
    session: Any
    tokenizer: BatchTokenizer
    table: np.ndarray | None = None

    @staticmethod
    def uses_components(folder: Path) -> list[str]:
        """The component whose word-embedding table this predictor reads (`embeddings.shared`)."""
        shared = (json.loads((Path(folder) / "predictor.json").read_text()).get("embeddings") or {}).get("shared")
        return [shared] if isinstance(shared, str) and shared else []

    @classmethod
    def load(cls, folder: Path) -> TextPredictor:
        import onnxruntime as ort

        folder = Path(folder)
        spec = json.loads((folder / "predictor.json").read_text())
        tokenizer = BatchTokenizer.load(folder, spec["max_length"], spec.get("truncation_side", "right"))
        options = ort.SessionOptions()
        session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        return cls(spec, session, tokenizer, embedding_table(folder, spec))

    @property
    def labels(self) -> list[str]:
        return list(self.spec["labels"])

    def logits(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            ids, mask = self.tokenizer(texts[i:i + batch_size])
            feeds = ({"input_ids": ids} if self.table is None else {"inputs_embeds": self.table[ids]}) | {
                "attention_mask": mask}
            out.append(self.session.run(["logits"], feeds)[0])
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)), dtype=np.float32)

    def predict(self, prompts: Sequence[str], tasks: Sequence[str | None] | None = None,
                model: str | None = None, top_k: int = 3,
                task_classifier: TextPredictor | None = None) -> dict[str, Any]:
        """Probabilities, top-k labels and (bucket predictors) the expected value per prompt.

        A predictor trained with the task hint wants each prompt's task; where it is unknown (None)
        and a `task_classifier` is given, its top prediction is used instead (001 appendix A.6)."""
        tasks = list(tasks) if tasks is not None else [None] * len(prompts)
        if len(tasks) != len(prompts):
            raise ValueError(f"tasks has {len(tasks)} entries for {len(prompts)} prompts")
        unknown = [i for i, t in enumerate(tasks) if t is None]
        if self.spec.get("hint_template") and task_classifier is not None and unknown:
            guessed = task_classifier.predict([prompts[i] for i in unknown], top_k=1)["top"]
            for i, top in zip(unknown, guessed):
                tasks[i] = top[0]
        texts = [compose(p, t, model, self.spec.get("hint_template"), self.spec.get("model_tokens"))
                 for p, t in zip(prompts, tasks)]
        probs = softmax(self.logits(texts).astype(np.float64))
        order = np.argsort(-probs, axis=1)[:, :top_k]
        result = {"probabilities": probs, "top": [[self.labels[j] for j in row] for row in order]}
        if self.spec.get("scheme"):
            result["expected"] = probs @ np.asarray(self.spec["scheme"]["values"])
        return result
