"""Task templates of seed 001 (appendix A.3), seeded per row so a rebuild gives the same text.

Each row draws from its own `random.Random(f"{seed}:{row_id}")`, so a row's template does not
change when other rows are added, removed or reordered.

- Sentiment: one of three instructions, placed at the start or the end at random. 001 used IMDb
  reviews ("…this movie…"); for other sources the nouns follow the `subject` argument.
- Entity recognition: the suffix "Can you identify the <entity> mentioned in the above sentence?",
  entity drawn from person, place, object.
- In-context QnA: the question followed by its lettered options and a request to pick one and reason.
- Translation: "Please translate this text into <language>" at the start or the end.
- QnA: the question as it is.
"""

from __future__ import annotations

import random

ENTITY_KINDS = ("person", "place", "object")


def row_rng(seed: int, row_id: str) -> random.Random:
    return random.Random(f"{seed}:{row_id}")


def sentiment(text: str, rng: random.Random, item: str = "review", subject: str = "movie") -> str:
    instructions = (
        f"Based on this {item}, judge if the user liked this {subject} or not?",
        f"Please identify if the {item} is positive or negative?",
        f"Based on this {item}, should we recommend this {subject} to other users with similar tastes?",
    )
    instruction = rng.choice(instructions)
    return f"{instruction}\n{text}" if rng.random() < 0.5 else f"{text}\n{instruction}"


def entity_recognition(text: str, rng: random.Random) -> tuple[str, str]:
    """(prompt, the entity kind asked for)."""
    kind = rng.choice(ENTITY_KINDS)
    return f"{text}\nCan you identify the {kind} mentioned in the above sentence?", kind


def in_context_qna(question: str, labels: list[str], options: list[str]) -> str:
    lines = [question.rstrip(), "", "Options:"]
    lines += [f"{label}) {option}" for label, option in zip(labels, options)]
    lines += ["", "Select the correct option and explain your reasoning."]
    return "\n".join(lines)


def translation(text: str, language: str, rng: random.Random) -> str:
    phrase = f"Please translate this text into {language}."
    return f"{phrase}\n{text}" if rng.random() < 0.5 else f"{text}\n{phrase}"


def qna(question: str) -> str:
    return question
