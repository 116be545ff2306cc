"""What makes an asset's output what it is, so that Dagster can tell stale from up to date.

Every asset gets a **code version**: a digest of the source it runs (its asset module and the
library packages below it) and of the fleet-file sections it reads. Dagster records it, with the
data versions of the inputs, on each materialization; an asset is *stale* when either changed since,
and the UI says which (`has a new code version`, `has a new dependency data version`). Operational
sections (`automation`, `execution`, `owners`, `storage_options`: how and where it runs, credentials)
are in no code version: changing them retrains nothing.

Assets whose output is cheap to compare carry a **content data version** (`assets.metadata.content_version`): the
prompt set, the routing table and the tier profiles. A re-read prompt set that came out identical
leaves everything downstream up to date. The rest take Dagster's default data version, a hash of
their code version and inputs' versions, so an unchanged input never looks changed.

Two inputs live outside Dagster and are always re-read (`always_reread`): the prompt sources
(files, datasets, traffic logs) and the traffic logs a tier's profile is built from. Reading them
is cheap; whether anything downstream re-runs is then decided by their content.

`stale()` is the declarative-automation condition on every asset: materialize what is missing, has
a new code version, or has an input with a new data version.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

import dagster as dg
from routeforge.core.kinds import PROFILE_KINDS

# sections no asset's output depends on: how and where the pipeline runs, who owns it, credentials
OPERATIONAL = ("name", "storage_root", "storage_options", "automation", "execution", "owners")
TRAINING_SOURCES = ("core", "prompts", "training", "profiling", "artifacts")
TRAINING_CONFIG = ("encoder", "models", "hardware", "tiers", "split", "scoring", "training", "profiling")

# asset -> (library packages it runs, fleet-file sections it reads; None: every non-operational
# section); an asset not named here is a trainer. Each asset's own module (where its function is
# defined) is in its code version too.
VERSIONED: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "prompts": (("core", "prompts"), ("datasets", "prompts", "templates", "split")),
    "responses": (("core", "prompts", "generation"), ("models", "hardware", "generation", "templates")),
    "quality": (("core", "scoring"), ("models", "scoring")),
    "routing_table": (("core", "training"), ("models", "scoring", "split", "training")),
    "tier_profiles": (("core", "generation", "profiling"), ("models", "hardware", "tiers", "profiling")),
    "router_bundle": ((*TRAINING_SOURCES, "registry"), None),
    "predictor_report": ((*TRAINING_SOURCES, "registry"), None),
    "release_gate": ((*TRAINING_SOURCES, "registry"), None),
}
CONTENT_VERSIONED = ("prompts", "routing_table", "tier_profiles")


@lru_cache(maxsize=64)
def source_digest(module: str) -> str:
    """sha256 of a `routeforge.<module>` package's (or module's) Python source, path by path."""
    spec = importlib.util.find_spec(f"routeforge.{module}")
    if spec is None:
        raise ValueError(f"no module routeforge.{module}")
    if spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        files = sorted(root.rglob("*.py"))
    else:
        root, files = Path(spec.origin).parent, [Path(spec.origin)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def config_digest(dumped: dict, sections: tuple[str, ...] | None) -> str:
    """sha256 of the named sections of the fleet file as read (`model_dump`, defaults filled in);
    None: every section but the operational ones."""
    keep = sections if sections is not None else tuple(k for k in dumped if k not in OPERATIONAL)
    return hashlib.sha256(json.dumps({k: dumped.get(k) for k in sorted(keep)}, sort_keys=True,
                                     default=str).encode()).hexdigest()


def code_version(asset: str, module: str, dumped: dict) -> str:
    """The asset's code version, 16 hex digits: its own module `module` (`routeforge.assets.…`), the
    library packages it runs and the fleet-file sections it reads."""
    packages, sections = VERSIONED.get(asset) or (TRAINING_SOURCES, TRAINING_CONFIG)
    parts = [source_digest(module.removeprefix("routeforge.")), *(source_digest(p) for p in packages),
             config_digest(dumped, sections)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def always_reread(asset: str, partition: str | None, config) -> bool:
    """Assets whose inputs are outside Dagster's view (files that appear), re-read on every run:
    the prompt set, and a tier profile whose kind reads inputs beside its settings (`key_inputs`:
    a traffic log's files)."""
    if asset == "prompts":
        return True
    if asset == "tier_profiles" and partition is not None:
        tier = next((t for t in config.tiers if t.name == partition), None)
        if tier is None or tier.profile is None:
            return False
        return PROFILE_KINDS.entry(tier.profile.kind).metadata.get("key_inputs") is not None
    return False


def stale() -> dg.AutomationCondition:
    """Materialize a target (partition) that is newly missing, whose code version changed, or one of
    whose inputs has a new data version; not while it or an input is in progress or missing, and
    not while an input is itself waiting to be rebuilt (so a change travels down the graph once:
    the router bundle waits for every trainer it reads instead of being registered once per
    trainer). Like `eager()`, but an input re-materialized with the same data version changes nothing."""
    due = (dg.AutomationCondition.newly_missing() | dg.AutomationCondition.code_version_changed()
           | dg.AutomationCondition.any_deps_match(dg.AutomationCondition.data_version_changed())
           ).since_last_handled().with_label("missing, new code version or new input data version")
    return (
        due
        & ~dg.AutomationCondition.any_deps_match(due).with_label("an input is due to be rebuilt")
        & ~dg.AutomationCondition.any_deps_missing()
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("stale")


def with_versions(assets: list[dg.AssetsDefinition], config, cron: str | None) -> list[dg.AssetsDefinition]:
    """The assets with their code versions and automation conditions (the prompt set also re-reads
    its sources on `cron`, the fleet's retraining schedule)."""
    dumped = config.model_dump(mode="json")

    def versioned(asset: dg.AssetsDefinition) -> dg.AssetsDefinition:
        module = asset.op.compute_fn.decorated_fn.__module__  # where the asset's function is defined

        def spec_with(spec: dg.AssetSpec) -> dg.AssetSpec:
            name = spec.key.to_user_string()
            condition = stale()
            if name == "prompts" and cron:
                condition = (dg.AutomationCondition.on_cron(cron) | condition).with_label(f"on_cron({cron}) or stale")
            return spec.replace_attributes(code_version=code_version(name, module, dumped),
                                           automation_condition=condition)

        return asset.map_asset_specs(spec_with)

    return [versioned(a) for a in assets]
