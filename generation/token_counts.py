"""Token counts from the fleet's counting tokenizer, for engines whose server or table gives none.

Imported tables hold no token counts, so every (prompt, model) cell is counted with one tokenizer
(`generation.token_counter`). The prompt's count is the same for every model of the fleet: counted
once per process and text (a score table of N prompts × 10 models tokenized each prompt ten times,
half the import's time), empty texts are 0 without the tokenizer, and the fast tokenizer's own
batch call is used (the `transformers` wrapper builds a Python encoding object per text, as much
time again as the tokenization itself).
"""

from __future__ import annotations

from functools import lru_cache

MEMO_LIMIT = 2_000_000  # texts remembered per tokenizer; past this the memo starts again (bounded memory)


class TokenCounter:
    def __init__(self, ref: str):
        from routeforge.core.model_sources import load_tokenizer  # lazy: numpy, pydantic on first use

        self.ref = ref
        self.tokenizer = load_tokenizer(ref)
        self.tokenizer.model_max_length = 1 << 30  # counting only; no model sees these ids
        self.memo: dict[str, int] = {}
        self.backend = getattr(self.tokenizer, "backend_tokenizer", None) if self.tokenizer.is_fast else None
        if self.backend is not None:  # this counter's own copy: a tokenizer.json may pad or truncate
            self.backend.no_padding()
            self.backend.no_truncation()

    def _encode(self, texts: list[str]) -> list[int]:
        if self.backend is not None:
            encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)  # _fast: no offsets
            return [len(e.ids) for e in encode(texts, add_special_tokens=False)]
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False)
        return [len(ids) for ids in enc["input_ids"]]

    def count(self, texts: list[str]) -> list[int]:
        """Tokens of each text (no special tokens, no truncation)."""
        todo = list({t for t in texts if t and t not in self.memo})
        if todo:
            if len(self.memo) + len(todo) > MEMO_LIMIT:
                self.memo.clear()
            self.memo.update(zip(todo, self._encode(todo)))
        return [self.memo[t] if t else 0 for t in texts]


@lru_cache(maxsize=4)
def token_counter(ref: str) -> TokenCounter:
    """The process's counter for a tokenizer reference (loaded once; every engine shares its memo)."""
    return TokenCounter(ref)
