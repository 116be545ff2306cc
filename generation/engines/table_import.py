"""Import responses that already exist as `responses` rows: RouterBench and RouteLLM wide tables, and
long JSON-lines tables (one response per line, fields mapped in the config: arena-hard answers,
LLMRouter-style routing files).

Imported rows carry no latency (the tables have none: TTFT/TPOT/E2E are null), the table's own cost
and correctness label where it has them (the fleet's per-token price otherwise), and token counts
from a configurable tokenizer: an approximation of the model's own tokenizer, which the tables do
not name.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from routeforge.core.config import FleetConfig, ModelSpec, TableSource
from routeforge.core.kinds import DATASET_KINDS, ENGINES
from routeforge.core.storage import Quarantine
from routeforge.generation.engines.base import BaseEngine, ProgressFn, PromptRow
from routeforge.generation.token_counts import token_counter
from routeforge.prompts.response_tables import (
    ImportedResponse,
    jsonl_responses,
)


@ENGINES.register("table_import", sources=("table",), generates=False,
                  description="responses that already exist (RouterBench, RouteLLM, JSON-lines tables), re-read")
class TableImportEngine(BaseEngine):
    name = "table_import"

    def __init__(self, spec: ModelSpec, config: FleetConfig):
        assert isinstance(spec.source, TableSource)
        super().__init__(spec, config)
        self.source = spec.source
        self.column = spec.source.column or spec.name
        self.dataset = config.dataset(spec.source.dataset)
        self.version = version("routeforge")
        self.counter = token_counter(config.generation.token_counter)
        self.table_problems: dict[str, int] = {}  # unusable lines of a long table, by reason
        self._table: dict[str, ImportedResponse] | None = None

    def _responses(self) -> dict[str, ImportedResponse]:
        """source_row → imported cell for this model (read once per engine: a partition is imported
        in chunks)."""
        if self._table is None:
            self._table = self._read()
        return self._table

    def _read(self) -> dict[str, ImportedResponse]:
        src, ds = self.source, self.dataset
        if src.file is not None:
            found, self.table_problems = jsonl_responses(
                src.file, key_field=src.key_field, response_field=src.response_field, model_field=src.model_field,
                model=self.column, label_field=src.label_field, cost_field=src.cost_field,
            )
            return found
        responses = DATASET_KINDS.entry(ds.kind).metadata.get("responses")  # what the kind's reader registered
        if responses is not None:
            return responses(ds, self.column)
        raise ValueError(f"model {self.spec.name!r}: dataset {ds.name!r} ({ds.kind}) holds no responses")

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        table = self._responses()
        found: list[tuple[PromptRow, ImportedResponse]] = []
        for p in prompts:
            cell = table.get(p.source_row) if p.source == self.dataset.name else None
            if p.source != self.dataset.name:
                quarantine.add(p.prompt_id, f"prompt from dataset {p.source!r}; this model's table answers "
                                            f"only {self.dataset.name!r}")
            elif cell is None:
                quarantine.add(p.prompt_id, "prompt not in response table", {"row": p.source_row})
            elif cell.text is None:
                quarantine.add(p.prompt_id, f"unusable table cell: {cell.problem}", {"row": p.source_row})
            else:
                found.append((p, cell))
        prompt_tokens = self.counter.count([p.text for p, _ in found])
        output_tokens = self.counter.count([c.text for _, c in found])
        rows = []
        for (p, cell), n_prompt, n_out in zip(found, prompt_tokens, output_tokens):
            cost = cell.cost if cell.cost is not None else self.cost(n_prompt, n_out)
            rows.append(self.row(p, text=cell.text, prompt_tokens=n_prompt, output_tokens=n_out,
                                 finish_reason="imported", cost_usd=cost, label=cell.label))
        if progress:
            progress(len(prompts), len(prompts))
        return rows
