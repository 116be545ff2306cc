"""Generation engines (plain Python, no Dagster): one interface, identical output rows.

- `transformers`: in-process Hugging Face generation, batched, CPU or GPU;
- `vllm`: vLLM offline batch inference (`LLM.generate`), the GPU production path (extra `gpu`);
- `openai`: any OpenAI-compatible server over HTTP, streaming, with retries;
- `table_import`: responses that already exist (RouterBench, RouteLLM, long JSON-lines tables).
"""

from __future__ import annotations

from pathlib import Path

from routeforge.core.config import FleetConfig, ModelSpec
from routeforge.generation.engines.base import Engine, PromptRow, cache_key, identity, prompt_rows


def make_engine(spec: ModelSpec, config: FleetConfig, cache_dir: Path) -> Engine:
    """Engines import their heavy libraries here, never at module import."""
    if spec.engine == "transformers":
        from routeforge.generation.engines.transformers_engine import TransformersEngine

        return TransformersEngine(spec, config, cache_dir)
    if spec.engine == "vllm":
        from routeforge.generation.engines.vllm_engine import VllmEngine

        return VllmEngine(spec, config, cache_dir)
    if spec.engine == "openai":
        from routeforge.generation.engines.openai_engine import OpenAIEngine

        return OpenAIEngine(spec, config)
    if spec.engine == "table_import":
        from routeforge.generation.engines.table_import import TableImportEngine

        return TableImportEngine(spec, config)
    raise ValueError(f"model {spec.name!r}: unknown engine {spec.engine!r}")


__all__ = ["Engine", "PromptRow", "cache_key", "identity", "make_engine", "prompt_rows"]
