"""Generation engines (plain Python, no Dagster): one interface, identical output rows. Each module
here registers its engine in `core.kinds.ENGINES`; a new engine is a new module.

- `transformers`: in-process Hugging Face generation, batched, CPU or GPU;
- `vllm`: vLLM offline batch inference (`LLM.generate`), the GPU production path (extra `gpu`);
- `openai`: any OpenAI-compatible server over HTTP, streaming, with retries;
- `table_import`: responses that already exist (RouterBench, RouteLLM, long JSON-lines tables).
"""

from __future__ import annotations

from pathlib import Path

from routeforge.core.config import FleetConfig, ModelSpec
from routeforge.core.kinds import ENGINES
from routeforge.generation.engines.base import Engine, PromptRow, cache_key, identity, prompt_rows


def make_engine(spec: ModelSpec, config: FleetConfig, cache_dir: Path) -> Engine:
    """The model's engine, from the `ENGINES` registry (each engine module registers its class and
    imports its heavy libraries only when it runs, never at module import)."""
    return ENGINES.get(spec.engine).create(spec, config, cache_dir)


__all__ = ["Engine", "PromptRow", "cache_key", "identity", "make_engine", "prompt_rows"]
