"""The fleet file's whole vocabulary: this layer, above every layer that defines kinds, imports each
kind's folder (engines, metrics, dataset kinds and readers, tier profile kinds, workloads, learned
policies' settings, the simulator's baselines), so the registries of `core.kinds` know every name a
fleet file may give before one is validated.

Why here and not in `core`: the registries are declared in `core` (the fleet file's models check names
against them) but their kinds live in the layers above; a registry that imported its kinds would import
upward, out of the layer contract's sight. The imports below are ordinary imports of lower layers,
which the contract checks; each folder's modules are imported whole (`import_modules`), so a new kind
is one new module and no list. Then `mark_loaded`: from here on the registries answer.

Import this module (or anything from it) before reading a fleet file: `routeforge.fleet.load_fleet`.
The CLI's `config` and `policies` commands, the pipelines, the benchmarks and the tests do.
"""

from __future__ import annotations

import routeforge.generation.engines
import routeforge.profiling.arrivals
import routeforge.profiling.profile_kinds
import routeforge.prompts
import routeforge.scoring.metrics
import routeforge.training.policies.learned
import routeforge.training.policies.simulator.baselines
import routeforge.training.policies.workload_kinds
from routeforge.artifacts.common.extensions import import_modules, mark_loaded
from routeforge.core.config import FleetConfig, load_fleet
from routeforge.core.kinds import FLEET

for _package in (routeforge.generation.engines, routeforge.prompts, routeforge.profiling.profile_kinds,
                 routeforge.scoring.metrics):
    import_modules(_package.__name__)
# a learned policy's settings only: its trainer imports PyTorch, which validating a fleet file never needs
import_modules(routeforge.training.policies.learned.__name__, only="settings")
mark_loaded(FLEET)

__all__ = ["FleetConfig", "load_fleet"]
