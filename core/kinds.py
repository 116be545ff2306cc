"""The registries of the pipeline's open sets, declared at the lowest layer that the fleet file's schema
can see, and filled by the modules of each kind's own folder (`artifacts/common/extensions.py`):

- `ENGINES`: how responses are produced (`generation/engines/`, one module per engine);
- `METRICS`: how a response is scored (`scoring/metrics/`, one module per metric);
- `DATASET_KINDS`: how a dataset of each `kind` is read (`prompts/`; each kind's settings are a model of
  `core/config/datasets.py`, so a new kind also adds its settings there, answering for itself what
  `config validate` asks: `local_files`, `maps_columns`, `task_source`);
- `SOURCE_KINDS`: where a model's weights or responses come from (`core/model_sources.py`; each kind's
  settings are a model of `core/config/models.py`'s `ModelSource` union);
- `WORKLOADS`: when requests arrive: the arrival processes (`profiling/arrivals.py`, `arrivals=True`,
  which a QPS sweep can also send by) and the workloads read from data (`training/policies/workload_kinds.py`:
  `source` names the setting they read);
- `PROFILE_KINDS`: how a tier's latency is measured or imported (`profiling/profile_kinds/`, one module
  per `tiers[].profile.kind`; `needs` and `exclusive` say which settings the kind requires or refuses);
- `READERS`: the built-in readers a `builtin` dataset names (`reader: gsm8k`; `prompts/builtin_readers.py`);
  `task_column` where the file's rows name their task (`config validate` reads the tasks from it);
- `LEARNED_SETTINGS`: each learned policy's settings model (`training/policies/learned/<policy>/settings.py`);
- `SIMULATED_BASELINES`: the simulator's own baseline policies (`training/policies/simulator/baselines.py`).

Only `SOURCE_KINDS` has its modules in this layer. Every other kind lives in a layer above, and a
registry never imports upward: `routeforge.fleet`, the layer above them all, imports their folders
(its imports are what the layer contract checks) and marks them loaded. A lookup before that raises
`KindsNotLoaded` naming it; the CLI, the pipelines, the benchmarks and the tests import it first.

The runtime's registries live beside what they hold: `artifacts.deciding.heuristics.HEURISTICS`. A new kind is
one new module with one `@<REGISTRY>.register(name, …)`; the config's allowed values, the schema's
enums and every dispatch come from these registries.
"""

from __future__ import annotations

from routeforge.artifacts.common.extensions import Choices, Registry
from routeforge.artifacts.deciding.heuristics import HEURISTICS

FLEET = "routeforge.fleet"  # the top layer that loads the kinds of the layers above this one

ENGINES = Registry("engine", loaded_by=FLEET)
METRICS = Registry("quality metric", loaded_by=FLEET)
DATASET_KINDS = Registry("dataset kind", loaded_by=FLEET)
READERS = Registry("built-in reader", loaded_by=FLEET)
SOURCE_KINDS = Registry("model source kind", ("routeforge.core.model_sources",))
WORKLOADS = Registry("workload kind", loaded_by=FLEET)
PROFILE_KINDS = Registry("tier profile kind", loaded_by=FLEET)
# the simulator's baselines that are its own classes (random, RouteBalance with absolute quality, …);
# every registered heuristic is a baseline too, through its runtime function
SIMULATED_BASELINES = Registry("simulated baseline", loaded_by=FLEET)


def workloads_reading(source: str) -> list[str]:
    """The workload kinds read from the evaluation setting `source` (`trace`, `traffic_logs`)."""
    return [e.name for e in WORKLOADS.entries() if e.metadata.get("source") == source]


# each learned policy's settings model, registered by its folder's `settings.py` with `defaults` (the
# budget the pipeline runs it with): what the fleet file's `training.routing_evaluation.learned` and
# `policies` are checked with. `routeforge.fleet` imports only the `settings` modules, so validating a
# fleet file never imports a trainer (PyTorch); `LearnedPolicy` reads its settings here, by its name
LEARNED_SETTINGS = Registry("learned policy", loaded_by=FLEET)


def learned_settings(name: str, given: dict):
    """Learned policy `name`'s settings: `given` (the fleet file's `learned.<name>`) over the budget its
    `settings.py` registered, validated by its model (raises pydantic's ValidationError)."""
    entry = LEARNED_SETTINGS.entry(name)
    return entry.value.model_validate({**entry.metadata.get("defaults", {}), **given})


def _routing_policy_names() -> list[str]:
    return [*dict.fromkeys([*SIMULATED_BASELINES.names(), *HEURISTICS.names()]), *LEARNED_SETTINGS.names()]


# what `training.routing_evaluation.policies` may name: the simulator's baselines (the registered
# heuristics among them) and the learned policies
ROUTING_POLICIES = Choices("routing policy", _routing_policy_names)

