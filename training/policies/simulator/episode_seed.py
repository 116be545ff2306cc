"""The workload seed of an environment episode.

Why: vectorised trainers (Stable-Baselines3's `DummyVecEnv` / `SubprocVecEnv`) seed an
environment once, on its first reset, and reset it unseeded after every episode. Reading an unseeded
reset as "seed 0" replayed the same arrivals in every training episode (004's PPO trained 60,000
slots on one 128-slot arrival sequence). An unseeded reset instead draws a fresh seed from the
environment's own generator, which Gymnasium seeds on the first seeded reset, so a run stays
reproducible and every episode sees new arrivals.
"""

from __future__ import annotations

import numpy as np

FIRST_DRAWN_SEED = 1_000_000  # drawn seeds stay clear of the small explicit seeds benchmarks evaluate on


def episode_seed(np_random: np.random.Generator, seed: int | None) -> int:
    """`seed` when the caller gave one; otherwise a new seed from `np_random` (call after
    `gymnasium.Env.reset(seed=seed)`, which seeds `np_random` on a seeded reset)."""
    if seed is not None:
        return int(seed)
    return int(np_random.integers(FIRST_DRAWN_SEED, 2**31 - 1))
