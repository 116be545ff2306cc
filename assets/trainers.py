"""The trainers: one registered entry per asset that produces bundle components, and one list of
them that drives everything that needs to know which trainers a fleet runs.

A trainer declares, where its asset is defined:
- `name`: its asset, its input to `router_bundle`, its key in `run_pipeline`'s summary;
- `inputs`: the assets it reads (tests/test_definitions.py checks them against the asset's deps);
- `enabled(config)`: whether the fleet runs it;
- `job`: the job that rebuilds it (`train_and_register`, or `profile_tiers` for per-tier heads);
- `rank`: its place in the bundle (component order is part of the bundle's content version);
- `summary(result)`: what the run summary reports of its typed `TrainedComponent` result;
- `family`: a group other assets ask for (the predictor report reads every `text_predictor`).

From this list, `pipelines/definitions.py` builds the enabled trainers' assets and the
`train_and_register` selection, `assets/bundle.py` takes them as the bundle's inputs, and
`pipelines/run.py` summarises them: adding a trainer is its asset module plus one `@trainer(...)`
(docs/architecture.md shows the files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
from routeforge.artifacts.common.extensions import Registry
from routeforge.core.components import TrainedComponent

# every trainer, registered by its asset module (`@trainer`); the asset modules are found, not listed
TRAINERS: Registry[Trainer] = Registry("trainer", ("routeforge.assets",))
TRAIN_JOB, PROFILE_JOB = "train_and_register", "profile_tiers"


def _always(config) -> bool:
    return True


def profiled_tiers(config) -> list[str]:
    """The tiers the fleet profiles (a tier imported from coarse results has no profile to train on)."""
    return [t.name for t in config.tiers if t.profile is not None]


def tier_partitions(config) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(profiled_tiers(config))


def _metrics(result: TrainedComponent) -> dict[str, float]:
    return result.metrics


@dataclass(frozen=True)
class Trainer:
    name: str
    build: Callable[[Any], dg.AssetsDefinition]  # the fleet config → the asset
    inputs: tuple[str, ...]
    rank: int
    enabled: Callable[[Any], bool] = _always
    job: str = TRAIN_JOB
    family: str | None = None
    summary: Callable[[TrainedComponent], Any] = _metrics
    summary_key: str | None = None  # the run summary's key (default: `name`)

    @property
    def key(self) -> str:
        return self.summary_key or self.name


def register_trainer(trainer: Trainer, module: str) -> Trainer:
    if any(e.value.rank == trainer.rank and e.name != trainer.name for e in TRAINERS.registered()):
        raise ValueError(f"trainer {trainer.name}: rank {trainer.rank} is taken")
    TRAINERS.add(trainer.name, trainer, module, trainer.name)
    return trainer


def trainer(name: str, *, inputs: tuple[str, ...], rank: int, **options) -> Callable:
    """Decorator on an asset factory `build(config) -> AssetsDefinition`: registers it as a trainer."""
    def register(build: Callable[[Any], dg.AssetsDefinition]) -> Callable[[Any], dg.AssetsDefinition]:
        register_trainer(Trainer(name, build, tuple(inputs), rank, **options), build.__module__)
        return build

    return register


def all_trainers() -> list[Trainer]:
    return sorted((e.value for e in TRAINERS.entries()), key=lambda t: t.rank)


def enabled_trainers(config, job: str | None = None, family: str | None = None) -> list[Trainer]:
    """The fleet's trainers in bundle order, optionally only those of one job or family."""
    return [t for t in all_trainers() if t.enabled(config) and (job is None or t.job == job)
            and (family is None or t.family == family)]
