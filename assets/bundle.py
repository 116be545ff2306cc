"""`router_bundle`: assemble, log and register the bundle in MLflow, then verify it as a client would."""


import hashlib
import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import Fleet, ModelEntry, Provenance, TierEntry
from routeforge.artifacts.bundle.verification import BundleVerificationError
from routeforge.artifacts.bundle.writer import ComponentSource, sha256_file
from routeforge.artifacts.common import temporary
from routeforge.artifacts.deciding.golden import GOLDEN_PROMPTS, build_golden, check_golden
from routeforge.assets.release import write_evaluation_candidate
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.core.components import TrainedComponent, flatten
from routeforge.core.config import FleetConfig
from routeforge.registry.release import ModelRegistry
from routeforge.registry.store import registry_lock


def table_hash(table: pa.Table) -> str:
    """sha256 of the table's Arrow IPC stream: identical content, identical hash."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def fleet_entry(config: FleetConfig) -> Fleet:
    return Fleet(
        name=config.name,
        models=[
            ModelEntry(name=m.name, engine=m.engine,
                       input_per_mtok=m.price.input_per_mtok if m.price else None,
                       output_per_mtok=m.price.output_per_mtok if m.price else None)
            for m in config.models
        ],
        tiers=[TierEntry(name=t.name, model=t.model, hardware=t.hardware) for t in config.tiers],
    )


def golden_component(store: ComponentStore, components: list, prompts: pa.Table) -> ComponentSource | None:
    """The bundle's golden vectors (`artifacts.deciding.golden`) on the first `GOLDEN_PROMPTS` prompts of the
    prompt set in id order, built from the components about to be registered; None without a router."""
    folder = store.component_dir("golden_vectors")
    shutil.rmtree(folder)
    folder.mkdir(parents=True)
    ordered = prompts.sort_by("prompt_id") if "prompt_id" in prompts.column_names else prompts
    texts = ordered.column("text").to_pylist()[:GOLDEN_PROMPTS]
    if not build_golden(components, texts, folder):
        return None
    return ComponentSource("golden_vectors", "golden_vectors", "json+safetensors", folder)


def build_bundle_asset(trainers: tuple[str, ...]) -> dg.AssetsDefinition:
    """`router_bundle` over the fleet's trainers (`routeforge.assets.trainers.enabled_trainers`, in
    bundle order): every input is a `TrainedComponent` (a partitioned trainer's, such as the latency
    heads per tier, arrives as {partition: result}), assembled as one list."""
    names = list(trainers)

    @dg.asset(
        io_manager_key="json_io",
        group_name="registry",
        kinds={"mlflow"},
        ins={name: dg.AssetIn(name) for name in names},
        check_specs=[dg.AssetCheckSpec("registered_bundle_verifies", asset="router_bundle",
                                       description="The registered version downloads from MLflow, its manifest's "
                                                   "signature, checksums and schema verify, its latency "
                                                   "heads reproduce, and it reproduces its golden vectors.")],
        description="Versioned router bundle, logged to MLflow and registered under the configured alias.",
    )
    def router_bundle(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                      mlflow: MlflowRegistry, routing_table: pa.Table,
                      prompts: pa.Table, **trained: TrainedComponent | dict[str, TrainedComponent]):
        yield from _bundle(context, fleet, store, mlflow, routing_table, prompts,
                           flatten(trained[name] for name in names))

    return router_bundle


def _bundle(context, fleet, store, mlflow, routing_table, prompts, trained: list[TrainedComponent]):
    config = fleet.config
    components = [c for t in trained for c in t.components]
    store.pull_trained(*trained)  # a no-op unless the store is remote and this machine lacks them
    golden = golden_component(store, components, prompts)
    if golden is not None:
        components.append(golden)
    latency = [c for c in components if c.kind == "latency_heads"]
    metrics = {k: v for t in trained for k, v in t.metrics.items()}
    # the manifest names the evaluation set the release gate will judge it on: the frozen one, or
    # this run's test split when this registration is the one that freezes it
    with registry_lock(mlflow.tracking_uri):
        pinned = ModelRegistry(mlflow.tracking_uri, mlflow.model_name).pinned_evaluation_sha()
    evaluation_sha = pinned or sha256_file(write_evaluation_candidate(store, routing_table, prompts,
                                                                      config.scoring.metric_for))
    registered, manifest = mlflow.publish(
        fleet=fleet_entry(config),
        components=components,
        staging_dir=store.staging_dir(),
        input_hashes={"prompts": table_hash(prompts), "routing_table": table_hash(routing_table),
                      "evaluation_set": evaluation_sha},
        dagster_run_id=context.run_id,
        params={"fleet": config.name, "models": ",".join(config.model_names), "encoder": config.encoder,
                "knn_k": str(config.training.knn.k), "scoring_metric": config.scoring.metric,
                "code_isolation": config.scoring.code.isolation},
        # whether pass@1 labels may come from code run unconfined: signed in the manifest (what a
        # reader may require), and a tag on the version for people browsing the registry
        provenance=Provenance(code_isolation=config.scoring.code.isolation),
        version_tags={"routeforge.code_isolation": config.scoring.code.isolation},
        metrics=metrics,
        plots=[(t.plot_folder, p) for t in trained for p in t.plots],
        context=mlflow.run_context(context),
    )
    if registered.unchanged:
        context.log.info(f"nothing registered: the bundle's content ({manifest.version}) equals version "
                         f"{registered.version}'s")
    else:
        context.log.info(f"registered {registered.uri} (version {registered.version}, bundle {manifest.version})")
    yield dg.Output(
        {"uri": registered.uri, "model_name": registered.name, "registry_version": registered.version,
         "bundle_version": manifest.version, "mlflow_run_id": registered.run_id,
         "tracking_uri": mlflow.tracking_uri, "unchanged": registered.unchanged},
        metadata={
            "registered": not registered.unchanged,
            "uri": registered.uri,
            "registry_version": registered.version,
            "bundle_version": manifest.version,
            "mlflow_run": mlflow.run_link(registered.run_id),
            "tracking_uri": mlflow.tracking_uri,
            "files": sum(len(c.files) for c in manifest.components),
            "latency_tiers": len(latency),
            "components": ", ".join(c.name for c in components),
        },
    )
    with temporary.scoped("verify") as tmp:
        try:
            loaded = load_bundle(f"models:/{registered.name}/{registered.version}", Path(tmp), mlflow.tracking_uri,
                                 public_key=mlflow.public_key_path())
            passed, detail = loaded.manifest.version == manifest.version, "downloaded, signature and files verified"
            if passed and latency:
                worst = max(loaded.latency(t).golden_max_abs_diff() for t in loaded.tiers_with_latency)
                passed, detail = worst == 0.0, f"downloaded and verified; latency heads max |diff| {worst:g}"
            if passed and loaded.has_kind("golden_vectors"):
                problems = check_golden(loaded)
                passed = not problems
                detail += "; golden vectors reproduced" if passed else f"; golden vectors: {'; '.join(problems)}"
        except BundleVerificationError as exc:
            passed, detail = False, str(exc)
    yield dg.AssetCheckResult(check_name="registered_bundle_verifies", passed=passed,
                              metadata={"detail": detail})
