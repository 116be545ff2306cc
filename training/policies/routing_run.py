"""The routing evaluation as the pipeline runs it, in two steps the `routing_evaluation` asset calls:
`routing_inputs` (the simulated fleet from the profiled tiers, the test prompts as a request pool with
the KNN estimator's predictions, the models' prices) and `run_routing_evaluation` (every policy
evaluated, the learned ones exported to ONNX, the heuristic specs, the simulator and the report
written). The `RoutingRun` it returns names the bundle components, MLflow metrics and the headline
numbers the asset shows, so the asset only reads its inputs and writes what this returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.artifacts.common import strict_json
from routeforge.core.schemas import routing_models
from routeforge.core.storage import Quarantine
from routeforge.profiling.kv_capacity import KvCapacityError, tier_batched_tokens, tier_kv_capacity
from routeforge.profiling.profile_results import TierProfile
from routeforge.training.policies.evaluation import RoutingEvaluation, evaluate_routing, read_traffic
from routeforge.training.policies.learned.base import LEARNED_POLICIES
from routeforge.training.policies.packaging import export_heuristics, write_simulator
from routeforge.training.policies.simulator.workloads import RequestPool, prompt_token_counts

TABLE_COLUMNS = ("policy", "workload", "load", "qos_mean", "e2e_mean_s", "e2e_p95_s", "slo_attainment",
                 "quality_mean", "cost_usd_per_request", "dropped", "rejected")
METRIC_COLUMNS = ("goodput", "served_share", "e2e_mean_offered_s", "qos_mean", "e2e_mean_s", "e2e_p95_s",
                  "quality_mean", "slo_attainment")


class NoSimulatedFleet(ValueError):
    """No tier can be simulated (none has a prefill/decode fit), or a tier's KV capacity is unknown."""


def simulated_fleet(config, tier_profiles: dict[str, dict[str, Any]], models: list[str]):
    """(fits, model index per instance, tier names, limits): `tier.instances` instances of each tier
    whose profile has a prefill/decode fit (measured batches, or published rows fitted to the step
    model); each instance's limits are its KV capacity from its hardware and model
    (`profiling.kv_capacity`, where the fleet file gives both) and its tier's `max_num_seqs`."""
    fits, index, names, limits = [], [], [], []
    for tier in config.tiers:
        summary = tier_profiles.get(tier.name)
        fit = TierProfile.from_json(summary).result.simulator_fit if summary else None
        if fit is not None:
            try:
                capacity = tier_kv_capacity(config, tier)
            except KvCapacityError as exc:
                raise NoSimulatedFleet(str(exc)) from None
            limit = {k: v for k, v in (("kv_capacity_tokens", capacity.tokens if capacity else None),
                                       ("max_running", tier.max_num_seqs),
                                       ("max_num_batched_tokens", tier_batched_tokens(config, tier))) if v is not None}
            fits += [fit] * tier.instances
            index += [models.index(tier.model)] * tier.instances
            names += [tier.name] * tier.instances
            limits += [limit] * tier.instances
    if not fits:
        raise NoSimulatedFleet("routing_evaluation needs at least one tier profile with a prefill/decode fit "
                               "(profile kind batch, splitwise or llm_inference_bench)")
    return fits, index, names, limits


@dataclass
class RoutingInputs:
    """What the evaluation runs on: the simulated instances and the test prompts as requests."""

    models: list[str]
    fits: list[dict]
    instance_models: list[int]
    tiers: list[str]
    limits: list[dict]
    pool: RequestPool
    prices: np.ndarray  # (models, 2): USD per million input and output tokens

    def params(self, settings) -> dict[str, Any]:
        return {"routing_evaluation": settings.model_dump(mode="json"), "instances": len(self.fits),
                "test_prompts": len(self.pool)}


def routing_inputs(config, tier_profiles: dict[str, dict[str, Any]], routing_table: pa.Table, knn,
                   encoder) -> RoutingInputs:
    """The simulated fleet (`simulated_fleet`) and the routing table's test split as a request pool,
    each prompt with `knn`'s predicted quality and output tokens per model (embedded by `encoder`)."""
    models = routing_models(routing_table.schema)
    fits, instance_models, tiers, limits = simulated_fleet(config, tier_profiles, models)
    test = routing_table.filter(pc.equal(routing_table.column("split"), "test"))
    texts = test.column("text").to_pylist()
    prediction = knn.predict(texts, encoder)
    cols = [knn.models.index(m) for m in models]
    pool = RequestPool.from_routing_table(test, prompt_token_counts(texts, config.encoder), models,
                                          predicted_quality=prediction.quality[:, cols],
                                          predicted_tokens=prediction.output_tokens[:, cols])
    prices = np.array([[m.price.input_per_mtok, m.price.output_per_mtok] if m.price else [0.0, 0.0]
                       for m in (config.model(name) for name in models)])
    return RoutingInputs(models, fits, instance_models, tiers, limits, pool, prices)


@dataclass
class RoutingRun:
    """One routing evaluation, written under its report folder: the evaluation, the learned policies'
    exports, the heuristic specs' folders, the simulator file, the report and what was quarantined."""

    evaluation: RoutingEvaluation
    exports: dict[str, dict[str, Any]]
    heuristics: dict[str, Path]
    simulator: Path
    report: dict[str, Any]
    path: Path
    quarantine: Quarantine

    @property
    def gate(self) -> dict[str, Any]:
        return self.evaluation.gate

    def simulated(self, name: str) -> dict[str, float]:
        """The policy's mean over every workload × load × seed of the evaluation (the release gate's)."""
        rows = [r for r in self.evaluation.rows if r["policy"] == name]
        out = {}
        for key, label in (("qos_mean", "simulator_qos"), ("e2e_mean_s", "simulator_e2e_mean_s")):
            values = [r[key] for r in rows if np.isfinite(r[key])]
            if values:
                out[label] = float(np.mean(values))
        return out

    def metrics(self) -> dict[str, float]:
        """`<policy>/<workload>/load_<load>/<metric>` for MLflow, finite values only."""
        return {f"{r['policy']}/{r['workload']}/load_{r['load']:g}/{k}": r[k] for r in self.evaluation.rows
                for k in METRIC_COLUMNS if np.isfinite(r[k])}

    def table(self) -> list[dict[str, Any]]:
        return [{k: (round(r[k], 4) if isinstance(r[k], float) else r[k]) for k in TABLE_COLUMNS}
                for r in self.evaluation.rows]

    def chosen(self) -> dict[str, Any]:
        """The run's choices as MLflow params: the recommended policy overall and per workload."""
        return {"chosen.recommended": self.gate["recommended"], "chosen.policies": sorted(self.exports),
                **{f"chosen.recommended.{w}": g["recommended"] for w, g in self.evaluation.gate_by_workload.items()}}

    def training_curves(self) -> dict[str, list[tuple[int, float]]]:
        """Each learned policy's episode return and loss, stepped by environment steps (MLflow histories)."""
        curves: dict[str, list[tuple[int, float]]] = {}
        for name, trained in self.evaluation.trained.items():
            curve = trained.run.curve
            for key in ("return", "loss"):
                points = [(c["steps"], c[key]) for c in curve if c.get(key) is not None]
                if points:
                    curves[f"{name}/train/{key}"] = points
        return curves

    def components(self, run_id: str) -> list[ComponentSource]:
        """The bundle's routing components: each learned policy (ONNX + JSON), each heuristic (JSON) and
        the simulator with the recommendation, each naming the MLflow run that evaluated it."""
        gate = self.gate

        def policy_config(name: str, kind: str) -> dict:
            return {"policy": name, "policy_kind": kind, "recommended": name == gate["recommended"],
                    "evaluation_mlflow_run_id": run_id}

        parity = ("onnx_max_abs_diff", "onnx_action_agreement")
        components = [ComponentSource(name=f"policy--{name}", kind="routing_policy", format="onnx+json",
                                      folder=Path(p["path"]),
                                      metrics={**{k: float(p[k]) for k in parity}, **self.simulated(name)},
                                      config=policy_config(name, "learned"))
                      for name, p in self.exports.items()]
        components += [ComponentSource(name=f"policy--{name}", kind="routing_policy", format="json", folder=folder,
                                       metrics=self.simulated(name), config=policy_config(name, "heuristic"))
                       for name, folder in self.heuristics.items()]
        components.append(ComponentSource(
            name="routing_simulator", kind="routing_simulator", format="json", folder=self.simulator.parent,
            config={"recommended_policy": f"policy--{gate['recommended']}", "recommendation": gate["reason"],
                    "objective": gate["objective"], "evaluation_mlflow_run_id": run_id,
                    # where traffic looks like one workload (the fleet's own, "traffic", when its logs were replayed)
                    "recommended_by_workload": {w: f"policy--{g['recommended']}"
                                                for w, g in self.evaluation.gate_by_workload.items()}}))
        return components


def run_routing_evaluation(inputs: RoutingInputs, settings, out_dir: Path, traffic_logs,
                           log: Callable[[str], None]) -> RoutingRun:
    """Evaluate every policy on `inputs` (and, where `traffic_logs` are given, replay them as the fleet's
    own workload), export the learned policies, write the heuristic specs, the simulator and
    `routing_evaluation.json` under `out_dir`. Trace rows and log lines that cannot be replayed are
    quarantined, never fatal."""
    quarantine = Quarantine("routing_evaluation")
    traffic = read_traffic(traffic_logs, quarantine) if traffic_logs else None
    if traffic is not None:
        log(f"replaying {len(traffic)} requests of the fleet's traffic logs ({traffic_logs})")
    evaluation = evaluate_routing(inputs.pool, inputs.fits, inputs.instance_models, inputs.prices, settings, out_dir,
                                  log=log, quarantine=quarantine, traffic=traffic, limits=inputs.limits)
    exports = {}
    for name, result in evaluation.trained.items():
        spec = LEARNED_POLICIES.get(name).export(result, out_dir / "policies" / name, settings, settings.seed + 7)
        exports[name] = {"path": str(out_dir / "policies" / name), "onnx_max_abs_diff": spec["onnx_max_abs_diff"],
                         "onnx_action_agreement": spec["onnx_action_agreement"]}
    report = evaluation.report() | {"policies": exports}
    heuristics = export_heuristics([r["policy"] for r in evaluation.rows], len(inputs.fits), out_dir / "policies",
                                   parameters=evaluation.heuristic_parameters())
    simulator = write_simulator(out_dir / "simulator", tiers=inputs.tiers, models=inputs.models,
                                instance_models=inputs.instance_models, fits=inputs.fits, settings=settings,
                                report=report, limits=inputs.limits)
    path = out_dir / "routing_evaluation.json"
    path.write_text(strict_json.dumps(report, indent=2, default=float))  # an unbounded percentile: null
    return RoutingRun(evaluation, exports, heuristics, simulator, report, path, quarantine)
