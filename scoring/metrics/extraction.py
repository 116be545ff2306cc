"""Answer extraction, exact match and token F1: the task metrics router benchmarks use.

Extraction is what makes exact match fair to free-form answers: a model that writes "so she makes
$18 every day." has answered 18. Rules, in order of how much evidence they carry:

- math: GSM8K's `#### n`, then `\\boxed{…}`, then "answer is n", then the last number in the text;
  numbers are normalized (thousands separators, currency and percent signs, trailing zeros, `x.0`);
- multiple choice: an explicit "answer is (B)" / "Answer: B", a lone letter, a letter with a
  bracket at the start of a line, else the option whose text appears (longest match wins);
- yes/no and label sets (sentiment): the first label word of the set that appears, as a whole word.

Token F1 follows SQuAD: lower-case, drop punctuation and articles, split on white space.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from decimal import Decimal, InvalidOperation

_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?%?|-?\$?\s?\.\d+%?"
_NUM_RE = re.compile(_NUMBER)
_HASHES = re.compile(r"####\s*(" + _NUMBER + ")")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)\s*:?\s*\**\s*(" + _NUMBER + ")", re.I)


def normalize_number(text: str) -> str | None:
    """Canonical string of a number ('1,000.50' → '1000.5', '$18' → '18', '50%' → '50'); None if not one."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace("%", "").replace(" ", "").rstrip(".")
    if not cleaned:
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")


def _boxed(text: str) -> str | None:
    """Content of the last \\boxed{…}, braces balanced."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j]
            depth -= 1
    return None


def extract_math(text: str) -> str | None:
    """The final numeric answer of a solution, normalized; None when there is none."""
    if m := _HASHES.search(text):
        return normalize_number(m.group(1))
    boxed = _boxed(text)
    if boxed is not None:
        inner = boxed.replace("\\!", "").replace("{,}", ",")
        if (number := normalize_number(inner)) is not None:
            return number
        if nums := _NUM_RE.findall(inner):
            return normalize_number(nums[-1])
        return inner.strip() or None
    answers = _ANSWER_IS.findall(text)
    if answers:
        return normalize_number(answers[-1])
    numbers = _NUM_RE.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def extract_choice(text: str, labels: list[str], options: list[str] | None = None) -> str | None:
    """The chosen option's label (e.g. 'C'), or None."""
    label_set = "|".join(re.escape(label) for label in labels)
    patterns = [
        rf"answer\s*(?:is|:)?\s*:?\s*\**\(?({label_set})\)?(?![A-Za-z])",
        rf"^\s*\(?({label_set})\)?\s*$",
        rf"^\s*\(?({label_set})[\).:](?:\s|$)",
        rf"\(({label_set})\)",
    ]
    for pattern in patterns:
        if m := re.search(pattern, text, re.I | re.M):
            found = m.group(1)
            return next(label for label in labels if label.lower() == found.lower())
    if options:
        lowered = text.lower()
        hits = [(len(o), label) for label, o in zip(labels, options) if o and o.lower().strip(" .") in lowered]
        if hits:
            return max(hits)[1]
    return None


def extract_label(text: str, labels: list[str]) -> str | None:
    """The first of `labels` (yes/no, negative/neutral/positive…) that appears as a whole word."""
    best: tuple[int, str] | None = None
    for label in labels:
        if m := re.search(rf"\b{re.escape(label)}\b", text, re.I):
            if best is None or m.start() < best[0]:
                best = (m.start(), label)
    return best[1] if best else None


def squad_normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = squad_normalize(prediction).split(), squad_normalize(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_token_f1(prediction: str, references: list[str]) -> float:
    return max((token_f1(prediction, r) for r in references), default=0.0)
