"""Import responses that already exist (RouterBench wide tables) as `responses` rows.

Imported rows carry no latency (the table has none: TTFT/TPOT/E2E are null), the table's own cost
and 0/1 correctness label, and token counts from a configurable tokenizer (an approximation of the
model's own tokenizer, which the table does not name).
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

from pipelines.config import FleetConfig, ModelSpec, TableSource
from pipelines.engines.base import ProgressFn, PromptRow, cache_key
from pipelines.model_sources import load_tokenizer
from pipelines.response_tables import read_routerbench
from pipelines.storage import Quarantine


class TableImportEngine:
    name = "table_import"

    def __init__(self, spec: ModelSpec, config: FleetConfig):
        assert isinstance(spec.source, TableSource)
        self.spec = spec
        self.column = spec.source.column or spec.name
        self.dataset = config.dataset(spec.source.dataset)
        self.version = version("routeforge")
        self.tokenizer = load_tokenizer(config.generation.token_counter)
        self.tokenizer.model_max_length = 1 << 30  # counting only; no model sees these ids
        self.sampling = {"imported_from": self.dataset.name}

    def _count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False)
        return [len(ids) for ids in enc["input_ids"]]

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        table = {row.row_id: row for row in read_routerbench(self.dataset.files, self.dataset.limit)}
        wanted = [p for p in prompts if p.source == self.dataset.name]
        found = []
        for p in wanted:
            row = table.get(p.source_row)
            response = row.response(self.column) if row is not None else None
            if row is None:
                quarantine.add(p.prompt_id, "prompt not in response table", {"row": p.source_row})
            elif response is None:
                quarantine.add(p.prompt_id, f"table has no column {self.column}|model_response")
            else:
                found.append((p, row, response))
        prompt_tokens = self._count([p.text for p, _, _ in found])
        output_tokens = self._count([r for _, _, r in found])
        rows = []
        for (p, row, response), n_prompt, n_out in zip(found, prompt_tokens, output_tokens):
            rows.append(
                {
                    "prompt_id": p.prompt_id,
                    "model": self.spec.name,
                    "text": response,
                    "prompt_tokens": n_prompt,
                    "output_tokens": n_out,
                    "finish_reason": "imported",
                    "ttft_s": None,
                    "tpot_s": None,
                    "e2e_s": None,
                    "engine": self.name,
                    "engine_version": self.version,
                    "sampling": json.dumps(self.sampling, sort_keys=True),
                    "cache_key": cache_key(p.text, self.spec.name, None, self.sampling, self.name),
                    "cost_usd": row.cost(self.column),
                    "label": row.label(self.column),
                }
            )
        if progress:
            progress(len(wanted), len(wanted))
        return rows
