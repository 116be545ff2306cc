"""Runtime text predictor: prompts (and a model name where the predictor is shared) → class
probabilities, top-k classes and, for bucket predictors, expected values. ONNX Runtime only.

Folder layout (a bundle component): `model.onnx`, the tokenizer files, and `predictor.json`:
{kind, labels, max_length, truncation_side, hint_template, model_tokens, scheme}.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


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


@dataclass
class TextPredictor:
    spec: dict[str, Any]
    session: Any
    tokenizer: Any

    @classmethod
    def load(cls, folder: Path) -> TextPredictor:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        folder = Path(folder)
        spec = json.loads((folder / "predictor.json").read_text())
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.truncation_side = spec.get("truncation_side", "right")
        options = ort.SessionOptions()
        session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        return cls(spec, session, tokenizer)

    @property
    def labels(self) -> list[str]:
        return list(self.spec["labels"])

    def logits(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            enc = self.tokenizer(list(texts[i:i + batch_size]), truncation=True, max_length=self.spec["max_length"],
                                 padding=True, return_tensors="np")
            feeds = {"input_ids": enc["input_ids"].astype(np.int64),
                     "attention_mask": enc["attention_mask"].astype(np.int64)}
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
