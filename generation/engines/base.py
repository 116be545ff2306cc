"""The engine contract: every engine turns prompt rows into identical `responses` rows.

An engine is built only when something must be generated: the cache key of a (prompt, model) pair
is computed from the fleet config alone (`identity`), so a re-run that finds everything cached never
loads a model or opens a connection.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from routeforge.core.config import FleetConfig, ModelSpec, ResponseFilters, Sampling
from routeforge.core.kinds import SOURCE_KINDS
from routeforge.core.storage import Quarantine

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


@dataclass(frozen=True)
class Identity:
    """What determines a response besides the prompt text: the cache key's other half."""

    engine: str
    model: str
    revision: str | None
    sampling: dict[str, Any]

    def sampling_json(self) -> str:
        return json.dumps(self.sampling, sort_keys=True)

    def key(self, text: str) -> str:
        """`cache_key(text, ...)` without dumping the sampling again per prompt: "text" sorts last in
        the payload, so the payload is a fixed prefix, the text's JSON and "}" (the same bytes)."""
        prefix = self.__dict__.get("_key_prefix")
        if prefix is None:
            rest = json.dumps({"model": self.model, "revision": self.revision, "sampling": self.sampling,
                               "engine": self.engine}, sort_keys=True)
            prefix = rest[:-1] + ', "text": '
            object.__setattr__(self, "_key_prefix", prefix)  # frozen: a derived value, set once
        return hashlib.sha256(f"{prefix}{json.dumps(text)}}}".encode()).hexdigest()[:24]


def cache_key(text: str, model: str, revision: str | None, sampling: dict[str, Any], engine: str) -> str:
    """Content key of one generation: the same key means the same response can be reused."""
    payload = json.dumps(
        {"text": text, "model": model, "revision": revision, "sampling": sampling, "engine": engine},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def sampling_record(sampling: Sampling, chat_template: bool) -> dict[str, Any]:
    """What of the sampling decides a response. `ignore_eos` enters only when set, so the cache
    keys of responses generated before it existed stay valid."""
    record = sampling.model_dump(mode="json", exclude={"ignore_eos"} if not sampling.ignore_eos else set())
    return {**record, "chat_template": chat_template}


def identity(config: FleetConfig, model: str) -> Identity:
    """The cache identity of `model`, from the config alone (no model load, no connection)."""
    spec = config.model(model)
    model_id, revision, imported = SOURCE_KINDS.get(spec.source.kind)(spec.source, spec.name)
    if imported is not None:  # responses read from a table: no sampling decided them here
        return Identity(spec.engine, model_id, revision, imported)
    return Identity(spec.engine, model_id, revision, sampling_record(config.sampling(model), spec.chat_template))


def response_flags(text: str, output_tokens: int, finish_reason: str, filters: ResponseFilters) -> list[str]:
    """METHODS.md filters as flags: too short, truncated at the cap, degenerate (zlib ratio)."""
    flags = []
    if output_tokens < filters.min_output_tokens:
        flags.append("too_short")
    if finish_reason == "length":
        flags.append("truncated")
    raw = text.encode("utf-8", errors="replace")
    if len(raw) >= 64 and len(zlib.compress(raw)) / len(raw) < filters.min_compression_ratio:
        flags.append("degenerate")
    return flags


def response_row(
    ident: Identity,
    prompt: PromptRow,
    *,
    model_name: str,
    text: str,
    prompt_tokens: int,
    output_tokens: int,
    finish_reason: str,
    engine_version: str,
    filters: ResponseFilters,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    e2e_s: float | None = None,
    cost_usd: float | None = None,
    label: float | None = None,
    attempts: int = 1,
    token_logprobs: list | None = None,
) -> dict[str, Any]:
    """One `responses` row; every engine builds its rows here so they are identical in shape."""
    return {
        "prompt_id": prompt.prompt_id,
        "model": model_name,
        "text": text,
        "prompt_tokens": int(prompt_tokens),
        "output_tokens": int(output_tokens),
        "finish_reason": finish_reason,
        "ttft_s": ttft_s,
        "tpot_s": tpot_s,
        "e2e_s": e2e_s,
        "engine": ident.engine,
        "engine_version": engine_version,
        "sampling": ident.sampling_json(),
        "cache_key": ident.key(prompt.text),
        "cost_usd": cost_usd,
        "label": label,
        "flags": response_flags(text, output_tokens, finish_reason, filters),
        "attempts": attempts,
        "token_logprobs": json.dumps(token_logprobs) if token_logprobs is not None else None,
    }


def render_prompt(tokenizer, text: str, chat_template: bool) -> str:
    """The text a local engine feeds the model: the prompt itself, or wrapped in its chat template."""
    if not chat_template:
        return text
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def tpot(ttft_s: float | None, e2e_s: float | None, output_tokens: int) -> float | None:
    """Mean time per output token after the first, as vLLM and GuideLLM define it."""
    if ttft_s is None or e2e_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


class BaseEngine:
    """What every engine shares: the model spec, generation settings, the model's resolved sampling,
    its cache identity, and the one way an outcome becomes a `responses` row."""

    name: str
    version: str

    def __init__(self, spec: ModelSpec, config: FleetConfig):
        self.spec = spec
        self.settings = config.generation
        self.sampling = config.sampling(spec.name)
        self.ident = identity(config, spec.name)

    @classmethod
    def create(cls, spec: ModelSpec, config: FleetConfig, cache_dir: Path):
        """The engine for one model; `cache_dir` is where an engine that keeps files (weights, a
        server's logs) keeps them."""
        return cls(spec, config)

    @classmethod
    def local_server(cls, spec: ModelSpec, model_dir: Path, log: Path):
        """A context manager serving the model in `model_dir` over an OpenAI-compatible API on this
        machine, yielding its base URL: what a QPS sweep measures (`profiling.tier_profile`). Only
        engines whose weights are here (`local_weights`) have one."""
        raise ValueError(f"engine {cls.name!r} serves no model on this machine")

    def cost(self, prompt_tokens: int, output_tokens: int) -> float | None:
        """USD from the fleet's per-token price; None when the model has none."""
        return self.spec.price.cost(prompt_tokens, output_tokens) if self.spec.price else None

    def row(self, prompt: PromptRow, **fields: Any) -> dict[str, Any]:
        return response_row(self.ident, prompt, model_name=self.spec.name, engine_version=self.version,
                            filters=self.settings.filters, **fields)


class Engine(Protocol):
    name: str
    version: str

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        """One `responses` row per prompt that produced output; the rest go to `quarantine`."""
        ...
