"""`server_batches`: static batches measured through a running OpenAI-compatible server's API (`base_url`):
for each (batch size, prompt length) of the fleet's `profiling.batch` grid, that many requests of
that many unique prompt tokens (token ids, each batch's its own) sent together, forced to the grid's
longest output; the batch's prefill is its last first token, its decode step the median gap between
tokens over the streams' last halves (`profiling.server_requests.static_batches`).
Fitted like the `batch` kind's measurements (`profiling.batch_fits.fit_tier`), so the simulated
instance and the latency heads are the server's as its clients see it, engine, batching and
transport included: what `benchmarks/live_fleet.py` and the simulator's check against vLLM calibrate
with, for a fleet of live backends (docs/deploy.md, "Your own servers as the fleet").

The server must take token-id prompts and `ignore_eos` / `min_tokens` (vLLM's OpenAI server does).
Prompts are salted per run, so a second profile of the same server finds nothing of the first in its
prefix cache."""

from __future__ import annotations

import dataclasses
import os

from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.batch_fits import BatchMeasurement
from routeforge.profiling.profile_results import MeasuredBatches
from routeforge.profiling.server_requests import static_batches
from routeforge.profiling.tier_profile import write_batches

BLOCK_TOKENS = 16  # prompt lengths are whole blocks of this many tokens
TOKEN_IDS_BELOW = 1000  # token ids are drawn below this: inside any vocabulary


def served_model_of(base_url: str) -> str:
    """The first model the server lists (`/v1/models`)."""
    import httpx

    listed = httpx.get(f"{base_url.rstrip('/')}/models", timeout=30).json().get("data") or []
    if not listed:
        raise ValueError(f"{base_url}/models lists no model")
    return str(listed[0]["id"])


@PROFILE_KINDS.register("server_batches", needs=("base_url",))
def measure(config, tier, routing_table, folder, log) -> MeasuredBatches:
    profile, grid = tier.profile, config.profiling.batch
    base_url = profile.base_url.rstrip("/")
    base_url = base_url if base_url.endswith("/v1") else f"{base_url}/v1"
    model = profile.served_model or served_model_of(base_url)
    prompts = sorted({max(BLOCK_TOKENS, p // BLOCK_TOKENS * BLOCK_TOKENS) for p in grid.prompt_tokens})
    output = max(2, max(grid.output_tokens))
    rows = []
    for b in grid.batch_sizes:
        salt = int.from_bytes(os.urandom(4), "big")  # nothing of an earlier profile in the server's prefix cache
        rows += static_batches(base_url, model, [b], prompts, output, BLOCK_TOKENS, TOKEN_IDS_BELOW, salt=salt)
        log(f"{tier.name}: batches of {b} measured at {base_url} ({len(rows)} of "
            f"{len(grid.batch_sizes) * len(prompts)})")
    measured = write_batches([BatchMeasurement(**r) for r in rows], folder, tier.name)
    return dataclasses.replace(measured, base_url=base_url, served_model=model)
