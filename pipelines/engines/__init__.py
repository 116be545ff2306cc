"""Generation engines (plain Python, no Dagster): one interface, identical output rows.

Present: `transformers` (in-process, batched) and `table_import` (RouterBench tables). The vLLM
and OpenAI-compatible HTTP engines are not built yet (tracked by the engines issue); a fleet that
names them fails validation instead of silently falling back.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.config import FleetConfig, ModelSpec
from pipelines.engines.base import Engine, PromptRow, cache_key, prompt_rows


def make_engine(spec: ModelSpec, config: FleetConfig, cache_dir: Path) -> Engine:
    """Engines import their heavy libraries here, never at module import."""
    if spec.engine == "transformers":
        from pipelines.engines.transformers_engine import TransformersEngine

        return TransformersEngine(spec, config.generation, cache_dir)
    if spec.engine == "table_import":
        from pipelines.engines.table_import import TableImportEngine

        return TableImportEngine(spec, config)
    raise ValueError(f"model {spec.name!r}: unknown engine {spec.engine!r}")


__all__ = ["Engine", "PromptRow", "cache_key", "make_engine", "prompt_rows"]
