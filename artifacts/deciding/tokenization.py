"""Batches of token ids from a bundle folder's `tokenizer.json`, with the `tokenizers` library alone.

A Hugging Face fast tokenizer saved with `save_pretrained` is a `tokenizer.json` (normalizer,
pre-tokenizer, vocabulary, special-token template) plus `tokenizer_config.json` naming the pad
token. `tokenizers` reads the first directly, so a router service needs neither transformers nor
torch to feed an ONNX graph; truncation (on either side) and padding to the batch's longest row are
set here as `transformers`' `tokenizer(texts, truncation=True, max_length=n, padding=True)` sets them
(parity tested against transformers in tests/artifacts/test_runtime_encoder.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TOKENIZER_FILE = "tokenizer.json"


def _pad_token(folder: Path) -> str | None:
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            value = json.loads(path.read_text()).get("pad_token")
            if isinstance(value, dict):  # an AddedToken serialised whole
                value = value.get("content")
            if value:
                return str(value)
    return None


@dataclass
class BatchTokenizer:
    tokenizer: Any  # tokenizers.Tokenizer
    max_length: int
    truncation_side: str = "right"

    @classmethod
    def load(cls, folder: Path, max_length: int, truncation_side: str = "right") -> BatchTokenizer:
        from tokenizers import Tokenizer

        folder = Path(folder)
        if truncation_side not in ("left", "right"):
            raise ValueError(f"truncation_side {truncation_side!r}: 'left' or 'right'")
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        pad = _pad_token(folder)
        pad_id = tokenizer.token_to_id(pad) if pad else None
        if pad_id is None:
            raise ValueError(f"{folder}: the tokenizer names no pad token present in its vocabulary")
        tokenizer.no_truncation()
        tokenizer.enable_padding(pad_id=pad_id, pad_token=pad)
        return cls(tokenizer, int(max_length), truncation_side)

    def __len__(self) -> int:
        """Vocabulary size with added tokens (what `len()` of a transformers tokenizer says)."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def __call__(self, texts: Sequence[str], truncation_side: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) as int64 arrays, padded to the longest row of the batch."""
        self.tokenizer.enable_truncation(self.max_length, direction=truncation_side or self.truncation_side)
        encodings = self.tokenizer.encode_batch([str(t) for t in texts])
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64).reshape(len(encodings), -1)
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64).reshape(ids.shape)
        return ids, mask
