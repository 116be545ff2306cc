"""Arrow schemas of the stage tables: the contracts between assets, versioned in code.

Bump `STAGE_SCHEMA_VERSION` whenever a column changes meaning or type; it is written into every
Parquet file's metadata and checked on read.
"""

from __future__ import annotations

import pyarrow as pa

STAGE_SCHEMA_VERSION = "3"

PROMPTS = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),  # sha256 of source+task+text, 16 hex
        pa.field("source", pa.string(), nullable=False),
        pa.field("source_row", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),  # templated text sent to the models
        pa.field("task_hint", pa.string(), nullable=False),
        pa.field("reference", pa.string()),
        pa.field("reference_meta", pa.string()),  # JSON
        pa.field("split", pa.string(), nullable=False),
    ]
)

RESPONSES = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("output_tokens", pa.int32(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("ttft_s", pa.float64()),
        pa.field("tpot_s", pa.float64()),
        pa.field("e2e_s", pa.float64()),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("engine_version", pa.string(), nullable=False),
        pa.field("sampling", pa.string(), nullable=False),  # JSON
        pa.field("cache_key", pa.string(), nullable=False),
        pa.field("cost_usd", pa.float64()),  # measured or imported cost; null when no price is known
        pa.field("label", pa.float64()),  # a correctness label imported with the response, if any
        pa.field("flags", pa.list_(pa.string()), nullable=False),  # too_short, truncated, degenerate
        pa.field("attempts", pa.int32(), nullable=False),  # requests it took (retries + 1)
        pa.field("token_logprobs", pa.string()),  # JSON [[token, {alternative: logprob}], …] when asked for
    ]
)

QUALITY = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # in [0, 1]
        pa.field("details", pa.string()),  # JSON
    ]
)

QUARANTINE = pa.schema(
    [
        pa.field("stage", pa.string(), nullable=False),
        pa.field("partition", pa.string()),
        pa.field("row", pa.string(), nullable=False),  # source row id or prompt_id
        pa.field("reason", pa.string(), nullable=False),
        pa.field("payload", pa.string()),  # JSON of the offending row
    ]
)

ROUTING_KEYS = ("prompt_id", "task", "text", "split")
ROUTING_MEASURES = ("quality", "output_tokens", "cost")


def routing_column(measure: str, model: str) -> str:
    return f"{measure}/{model}"


def routing_table_schema(models: list[str]) -> pa.Schema:
    """One row per prompt; per model its quality, output length and cost (null where missing)."""
    fields = [pa.field(k, pa.string(), nullable=False) for k in ROUTING_KEYS]
    for measure in ROUTING_MEASURES:
        for m in models:
            fields.append(pa.field(routing_column(measure, m), pa.float64()))
    return pa.schema(fields, metadata={b"models": "\x1f".join(models).encode()})


def routing_models(schema: pa.Schema) -> list[str]:
    return schema.metadata[b"models"].decode().split("\x1f")
