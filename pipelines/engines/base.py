"""The engine contract: every engine turns prompt rows into identical `responses` rows."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from pipelines.storage import Quarantine

ProgressFn = Callable[[int, int], None]
"""Called with (done, total) as generation proceeds, for Dagster logs or progress bars."""


@dataclass(frozen=True)
class PromptRow:
    prompt_id: str
    text: str
    source: str
    source_row: str


def prompt_rows(prompts: pa.Table) -> list[PromptRow]:
    cols = prompts.select(["prompt_id", "text", "source", "source_row"]).to_pylist()
    return [PromptRow(**c) for c in cols]


def cache_key(text: str, model: str, revision: str | None, sampling: dict[str, Any], engine: str) -> str:
    """Content key of one generation: the same key means the same response can be reused."""
    payload = json.dumps(
        {"text": text, "model": model, "revision": revision, "sampling": sampling, "engine": engine},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


class Engine(Protocol):
    name: str
    version: str

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        """One `responses` row per prompt that produced output; the rest go to `quarantine`."""
        ...
