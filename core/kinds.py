"""The registries of the pipeline's open sets, declared at the lowest layer that the fleet file's schema
can see, and filled by the modules of each kind's own folder (`artifacts/extensions.py`):

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
  `task_column` where the file's rows name their task (`config validate` reads the tasks from it).

The runtime's registries live beside what they hold: `artifacts.heuristics.HEURISTICS`. A new kind is
one new module with one `@<REGISTRY>.register(name, …)`; the config's allowed values, the schema's
enums and every dispatch come from these registries.
"""

from __future__ import annotations

from routeforge.artifacts.extensions import Choices, Registry

ENGINES = Registry("engine", ("routeforge.generation.engines",))
METRICS = Registry("quality metric", ("routeforge.scoring.metrics",))
DATASET_KINDS = Registry("dataset kind", ("routeforge.prompts",))
READERS = Registry("built-in reader", ("routeforge.prompts.builtin_readers",))
SOURCE_KINDS = Registry("model source kind", ("routeforge.core.model_sources",))
WORKLOADS = Registry("workload kind", ("routeforge.profiling.arrivals", "routeforge.training.policies.workload_kinds"))

PROFILE_KINDS = Registry("tier profile kind", ("routeforge.profiling.profile_kinds",))


def workloads_reading(source: str) -> list[str]:
    """The workload kinds read from the evaluation setting `source` (`trace`, `traffic_logs`)."""
    return [e.name for e in WORKLOADS.entries() if e.metadata.get("source") == source]


# each learned policy's settings model, registered by its folder's `settings.py` with `defaults` (the
# budget the pipeline runs it with): what the fleet file's `training.routing_evaluation.learned` and
# `policies` are checked with. Only the `settings` modules are imported, so validating a fleet file
# never imports a trainer (PyTorch); `LearnedPolicy` reads its settings here, by its name
LEARNED_SETTINGS = Registry("learned policy", ("routeforge.training.policies.learned",), only="settings")


def learned_settings(name: str, given: dict):
    """Learned policy `name`'s settings: `given` (the fleet file's `learned.<name>`) over the budget its
    `settings.py` registered, validated by its model (raises pydantic's ValidationError)."""
    entry = LEARNED_SETTINGS.entry(name)
    return entry.value.model_validate({**entry.metadata.get("defaults", {}), **given})


def _routing_policy_names() -> list[str]:
    """Read by name, as every registry here discovers its kinds' modules: the training layer sits
    above this one."""
    import importlib

    baselines = importlib.import_module("routeforge.training.policies.simulator.baselines").BASELINES
    return [*baselines, *LEARNED_SETTINGS.names()]


# what `training.routing_evaluation.policies` may name: the simulator's baselines (the registered
# heuristics among them) and the learned policies
ROUTING_POLICIES = Choices("routing policy", _routing_policy_names)

