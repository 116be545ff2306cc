"""Workloads for the simulator: arrival processes and the requests that arrive.

Arrivals come from the registered arrival processes (`profiling.arrivals`: Poisson, gamma-bursty,
constant, square-wave, 004's switched Poisson process) and trace replay (timestamps and token counts,
e.g. the Azure LLM inference trace). Requests are drawn from the routing table, so each carries its
true output length and quality on every model of the fleet.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from routeforge.core.pretrained import resolve_pretrained
from routeforge.core.schemas import routing_models

# `arrivals` is the arrival processes' one definition, under the simulator's name for it
from routeforge.profiling.arrivals import SPP_D0, SPP_D1, square_wave, switched_poisson  # noqa: F401
from routeforge.profiling.arrivals import arrival_offsets as arrivals  # noqa: F401
from routeforge.training.policies.simulator.cluster import Request
from routeforge.training.routing_table import matrix


class RequestPool:
    """Labelled prompts to draw requests from: prompt tokens, and per model the true output length,
    quality and (optionally) a predictor's estimates of both."""

    def __init__(self, prompt_tokens, output_tokens, quality, tasks, models: list[str],
                 predicted_tokens=None, predicted_quality=None):
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(output_tokens, dtype=np.int64)
        self.quality = np.asarray(quality, dtype=np.float64)
        self.tasks = list(tasks)
        self.models = models
        self.predicted_tokens = predicted_tokens
        self.predicted_quality = predicted_quality
        if not (len(self.prompt_tokens) == len(self.output_tokens) == len(self.quality) == len(self.tasks)):
            raise ValueError("RequestPool: every column needs one row per prompt")

    @classmethod
    def from_routing_table(cls, table: pa.Table, prompt_tokens: np.ndarray, models: list[str] | None = None,
                           min_output_tokens: int = 1, predicted_quality: np.ndarray | None = None,
                           predicted_tokens: np.ndarray | None = None) -> RequestPool:
        """Prompts labelled for every model in `models` (default: all); prompt token counts given by the
        caller (the routing table stores none). Predictions, when given, are (rows of `table`, models)
        arrays, e.g. a KNN estimator's; without them policies see the true labels."""
        models = models or routing_models(table.schema)
        out, quality = matrix(table, "output_tokens", models), matrix(table, "quality", models)
        keep = ~np.isnan(out).any(axis=1) & ~np.isnan(quality).any(axis=1)
        if not keep.any():
            raise ValueError(f"no prompt has an output length and a quality for every model of {models}")
        out = np.maximum(np.nan_to_num(out[keep]), min_output_tokens).astype(np.int64)
        tasks = [t for t, k in zip(table.column("task").to_pylist(), keep) if k]
        return cls(np.asarray(prompt_tokens)[keep], out, quality[keep], tasks, models,
                   None if predicted_tokens is None else np.asarray(predicted_tokens, dtype=float)[keep],
                   None if predicted_quality is None else np.asarray(predicted_quality, dtype=float)[keep])

    def ablated(self, quality: str = "true", length: str = "true") -> RequestPool:
        """000's PS/PL/ZS/ZL study: policies see predicted ("predicted"), true ("true") or zero ("zero")
        quality scores and output lengths."""
        def pick(kind: str, truth: np.ndarray, predicted: np.ndarray | None, name: str):
            if kind == "true":
                return None
            if kind == "zero":
                return np.zeros(truth.shape)
            if kind == "predicted" and predicted is not None:
                return predicted
            raise ValueError(f"{name}: {kind!r} is not true, zero or predicted (with predictions in the pool)")

        return RequestPool(self.prompt_tokens, self.output_tokens, self.quality, self.tasks, self.models,
                           pick(length, self.output_tokens, self.predicted_tokens, "length"),
                           pick(quality, self.quality, self.predicted_quality, "quality"))

    def with_lengths_from(self, prompt_tokens: np.ndarray, output_tokens: np.ndarray, seed: int = 0) -> RequestPool:
        """This pool's prompts and labels with token counts resampled from traffic: each row takes a
        random traffic request's prompt and output length (the same output length on every model: a
        log records one model's), and policies see those lengths as their estimates. For score
        tables, which carry no output lengths (every request would be one token long)."""
        rng = np.random.default_rng(seed)
        rows = rng.integers(0, len(prompt_tokens), size=len(self))
        out = np.repeat(np.asarray(output_tokens, dtype=np.int64)[rows, None], len(self.models), axis=1)
        return RequestPool(np.asarray(prompt_tokens, dtype=np.int64)[rows], out, self.quality, self.tasks,
                           self.models, out.astype(float), self.predicted_quality)

    @property
    def has_lengths(self) -> bool:
        """Whether the pool's output lengths were measured (a score table's are all missing, read as 1)."""
        return bool((self.output_tokens > 1).any())

    @classmethod
    def from_trace(cls, prompt_tokens, output_tokens, n_models: int) -> RequestPool:
        """Trace rows: the same output length on every model, quality unknown (NaN)."""
        out = np.repeat(np.asarray(output_tokens)[:, None], n_models, axis=1)
        return cls(prompt_tokens, out, np.full(out.shape, np.nan), ["trace"] * len(out),
                   [f"m{i}" for i in range(n_models)])

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def requests(self, times: np.ndarray, seed: int = 0, in_order: bool = False) -> RequestBatch:
        """One request per arrival time: pool rows drawn at random (with replacement), or in order."""
        rng = np.random.default_rng(seed)
        rows = np.arange(len(times)) % len(self) if in_order else rng.integers(0, len(self), size=len(times))
        return RequestBatch(self, np.asarray(times, dtype=np.float64), rows)


class RequestBatch(Sequence):
    """Requests drawn from a pool, held as columns: a sequence of `Request`s built on first use.

    Why: a 004 training episode draws ~3,000 requests at every reset and its environment reads
    only their arrival times, prompt lengths and output lengths; building the objects was half
    of a reset. Anything that iterates or indexes gets the same `Request`s as before (rid i is
    the i-th arrival time given)."""

    def __init__(self, pool: RequestPool, times: np.ndarray, rows: np.ndarray):
        self.pool, self.times, self.rows = pool, times, rows
        self._requests: list[Request] | None = None

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, i):
        return self.materialized()[i]

    def __iter__(self):
        return iter(self.materialized())

    @property
    def prompt_tokens(self) -> np.ndarray:
        return self.pool.prompt_tokens[self.rows]

    @property
    def output_tokens(self) -> np.ndarray:
        """(requests, models) true output lengths."""
        return self.pool.output_tokens[self.rows]

    def materialized(self) -> list[Request]:
        if self._requests is None:
            # gathered once, then walked as Python values: per-element NumPy indexing was most of a reset
            pool, rows = self.pool, self.rows
            out, quality = pool.output_tokens[rows], pool.quality[rows]
            p_tok = None if pool.predicted_tokens is None else np.asarray(pool.predicted_tokens)[rows]
            p_qual = None if pool.predicted_quality is None else np.asarray(pool.predicted_quality)[rows]
            tasks = pool.tasks
            self._requests = [
                Request(rid=i, arrival=t, prompt_tokens=p, output_tokens=out[i], quality=quality[i], task=tasks[r],
                        predicted_tokens=None if p_tok is None else p_tok[i],
                        predicted_quality=None if p_qual is None else p_qual[i])
                for i, (t, p, r) in enumerate(zip(self.times.tolist(), pool.prompt_tokens[rows].tolist(),
                                                  rows.tolist()))]
        return self._requests


def prompt_token_counts(texts: list[str], tokenizer_ref: str) -> np.ndarray:
    """Prompt lengths in the tokens of `tokenizer_ref` (an encoder reference; the routing table
    stores no prompt token counts)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrained(tokenizer_ref))
    return np.array([len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]], dtype=np.int64)
