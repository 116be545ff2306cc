"""How far the simulator runs a tier's step model beyond the prompts it was fitted on.

Why: a tier fit from 128–2,048-token rows says nothing certain about a 12K-token prompt (Mooncake's
mean) or a 126K one; the prefill gradient, the decode slope and the attention read are extrapolated
linearly. Every output that uses such a fit says so, per tier: the longest prompt the fit measured, the
longest the workload has, and their ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def extrapolation(fits: Sequence[dict], names: Sequence[str], prompt_tokens_max: float) -> dict[str, dict[str, Any]]:
    """Per tier name: {fitted_prompt_tokens_max, workload_prompt_tokens_max, factor}; a fit that does
    not record its range (written before it was kept) has `fitted_prompt_tokens_max` None and no factor."""
    out = {}
    for fit, name in zip(fits, names):
        fitted = fit.get("fitted_prompt_tokens_max")
        out[name] = {"fitted_prompt_tokens_max": fitted, "workload_prompt_tokens_max": float(prompt_tokens_max),
                     "factor": float(prompt_tokens_max) / fitted if fitted else None}
    return out


def notes(table: dict[str, dict[str, Any]]) -> list[str]:
    """One line per tier used beyond its fitted prompts (or without a recorded range)."""
    lines = []
    for name, row in table.items():
        if row["factor"] is None:
            lines.append(f"tier {name}: its fit records no measured prompt range; prompts up to "
                         f"{row['workload_prompt_tokens_max']:.0f} tokens may be extrapolated")
        elif row["factor"] > 1:
            lines.append(f"tier {name}: fitted on prompts up to {row['fitted_prompt_tokens_max']:.0f} tokens, "
                         f"used up to {row['workload_prompt_tokens_max']:.0f}: extrapolated {row['factor']:.1f}×")
    return lines
