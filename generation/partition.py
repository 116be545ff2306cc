"""Cached, resumable generation of one model partition (plain Python; the asset and CLI call it).

Every response is keyed by (prompt text, model id and revision, sampling settings, engine kind) and
appended to the model's cache in Parquet shards as soon as a shard's worth is done. Shards are
written to a temporary name and renamed, so a process killed at any point leaves only whole shards;
the next run reads them, generates only the keys that are missing, and assembles exactly one row per
prompt. A crash therefore costs at most one shard of work.

    python -m routeforge.fleet.generate configs/demo.yaml --model tiny-llama   (its command line)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from routeforge.core.config import FleetConfig
from routeforge.core.kinds import ENGINES
from routeforge.core.schemas import RESPONSES
from routeforge.core.storage import Quarantine, ShardCache, safe_name, to_table
from routeforge.generation.engines import make_engine
from routeforge.generation.engines.base import identity, prompt_rows

LogFn = Callable[[str], None]
IMPORT_CHUNK = 50_000  # imported rows turned into a table at a time (bounded memory at 10^6 prompts)


def ResponseCache(folder: Path, compact_above: int = 64) -> ShardCache:  # noqa: N802 - reads as a type
    """The response cache of one model: `responses` rows keyed by `cache_key`."""
    return ShardCache(folder, RESPONSES, "cache_key", compact_above)


@dataclass
class GenerationResult:
    table: pa.Table
    quarantine: Quarantine
    cache_hits: int = 0
    generated: int = 0
    generated_output_tokens: int = 0
    generate_s: float = 0.0
    engine: str = ""
    engine_version: str | None = None
    shards_written: int = 0


def cache_folder(config: FleetConfig, model: str) -> Path:
    return config.storage.path("cache", "responses", safe_name(model))


def generate_partition(
    config: FleetConfig,
    model: str,
    prompts: pa.Table,
    progress: Callable[[int, int], None] | None = None,
    log: LogFn = print,
) -> GenerationResult:
    """Responses of `model` for every prompt: from the cache where present, generated otherwise."""
    spec = config.model(model)
    rows = prompt_rows(prompts)
    quarantine = Quarantine("responses", model)
    ident = identity(config, model)
    keys = [ident.key(p.text) for p in rows]
    use_cache = ENGINES.entry(spec.engine).metadata.get("generates", True)  # imported tables are the source: re-read
    cache = ResponseCache(cache_folder(config, model))
    cached = cache.load() if use_cache else {}
    hits = sum(k in cached for k in keys)
    # one generation per distinct text: prompts that differ only in source share a response
    missing = list({p.text: p for p, k in zip(rows, keys) if k not in cached}.values())
    result = GenerationResult(table=pa.table({}), quarantine=quarantine, engine=spec.engine, cache_hits=hits)
    log(f"{model}: {len(rows)} prompts, {result.cache_hits} cached, {len(missing)} to generate")

    imported: list[pa.Table] = []  # table import: each chunk's rows as a table, never all rows as dicts
    where: dict[str, int] = {}  # table import: cache key -> its row in the imported chunks
    if missing:
        start = time.perf_counter()
        engine = make_engine(spec, config, config.storage.mirror / "models")
        result.engine_version = engine.version
        step = config.generation.shard_size if use_cache else IMPORT_CHUNK
        try:
            for begin in range(0, len(missing), step):
                chunk = missing[begin : begin + step]
                base = result.cache_hits + begin

                def chunk_progress(done: int, total: int, base: int = base) -> None:
                    if progress:
                        progress(base + done, len(rows))

                new_rows = engine.generate(chunk, quarantine, chunk_progress)
                if use_cache:
                    if cache.append(new_rows):
                        result.shards_written += 1
                    for row in new_rows:
                        cached.setdefault(row["cache_key"], row)
                else:
                    offset = result.generated
                    for j, row in enumerate(new_rows):
                        where.setdefault(row["cache_key"], offset + j)
                    imported.append(to_table(new_rows, RESPONSES))
                result.generated += len(new_rows)
                result.generated_output_tokens += sum(r["output_tokens"] for r in new_rows)
        finally:  # an engine holding a worker process (vLLM) stops it
            if hasattr(engine, "close"):
                engine.close()
        result.generate_s = time.perf_counter() - start
        if use_cache:
            cache.compact()
    elif progress:
        progress(len(rows), len(rows))

    answered = cached if use_cache else where
    accounted = {r["row"] for r in quarantine.rows}
    for p, k in zip(rows, keys):
        if k not in answered and p.prompt_id not in accounted:
            quarantine.add(p.prompt_id, "no response: generation failed for an identical prompt text")
    if use_cache:
        result.table = to_table([dict(cached[k], prompt_id=p.prompt_id) for p, k in zip(rows, keys) if k in cached],
                                RESPONSES)
    else:  # one row per prompt, in prompt order; prompts sharing a text share its imported row
        found = [(p.prompt_id, where[k]) for p, k in zip(rows, keys) if k in where]
        table = pa.concat_tables(imported) if imported else to_table([], RESPONSES)
        table = table.take(pa.array([j for _, j in found], pa.int64()))
        column = table.schema.get_field_index("prompt_id")
        result.table = table.set_column(column, table.schema.field(column),
                                        pa.array([pid for pid, _ in found], table.schema.field(column).type))
    return result
