"""Static-batch profiling of a causal LM in-process with transformers (CPU or GPU).

For each (batch size, prompt tokens, output tokens) cell of the grid: one forward pass over the
whole batch (the prefill, whose end yields the first token) and then one forward pass per decode
iteration with the KV cache, each timed on its own (CUDA is synchronised around every step).
Prompts are random token ids: timing depends on shapes, not on text, and the model may have random
weights. Greedy decoding with no stopping, so every sequence generates exactly `output_tokens`.
The measurements feed `profiling.batch_fits.fit_tier` and the batch latency heads.
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from routeforge.profiling.batch_fits import BatchMeasurement

if TYPE_CHECKING:  # only its fields are read: a GPU machine without the config stack can profile too
    from routeforge.core.config import BatchGrid


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_batch(model, batch_size: int, prompt_tokens: int, output_tokens: int, seed: int = 0) -> BatchMeasurement:
    import torch

    device = model.device
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch_size, prompt_tokens), generator=generator).to(device)
    mask = torch.ones_like(ids)
    # the prefill computes the last position's logits only, as a serving engine does (a full
    # (batch, prompt, vocab) logits tensor would dominate time and memory on large vocabularies)
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    with torch.inference_mode():
        _sync(device)
        start = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, **last_only)
        token = out.logits[:, -1, :].argmax(-1, keepdim=True)
        _sync(device)
        prefill = time.perf_counter() - start
        past, iterations = out.past_key_values, []
        for _ in range(output_tokens - 1):
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            step = time.perf_counter()
            out = model(input_ids=token, attention_mask=mask, past_key_values=past, use_cache=True)
            token = out.logits[:, -1, :].argmax(-1, keepdim=True)
            past = out.past_key_values
            _sync(device)
            iterations.append(time.perf_counter() - step)
    decode = float(np.mean(iterations)) if iterations else float("nan")
    return BatchMeasurement(batch_size=batch_size, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                            prefill_s=prefill, decode_iter_s=decode, e2e_s=prefill + float(np.sum(iterations)))


def profile_model(model, grid: BatchGrid, progress: Callable[[int, int], None] | None = None,
                  max_positions: int | None = None) -> list[BatchMeasurement]:
    """Every cell of the grid `repeats` times after `warmup` untimed batches; cells longer than the
    model's context (`max_positions`) are skipped rather than failing mid-way."""
    cells = [(b, p, t) for b, p, t in itertools.product(grid.batch_sizes, grid.prompt_tokens, grid.output_tokens)
             if max_positions is None or p + t <= max_positions]
    if not cells:
        raise ValueError(f"no grid cell fits the model's {max_positions} positions")
    if any(t < 2 for _, _, t in cells):
        raise ValueError("profiling.batch.output_tokens: at least 2 tokens, so a decode iteration is timed")
    for i in range(grid.warmup):
        time_batch(model, *cells[0], seed=10_000 + i)
    measurements = []
    total = len(cells) * grid.repeats
    for r, (b, p, t) in itertools.product(range(grid.repeats), cells):
        measurements.append(time_batch(model, b, p, t, seed=r))
        if progress:
            progress(len(measurements), total)
    return measurements
