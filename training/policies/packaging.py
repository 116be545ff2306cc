"""What `routing_evaluation` puts in a bundle besides the learned ONNX policies: every deterministic
heuristic as a parameterised spec (`routeforge.artifacts.deciding.heuristics`), and `simulator.json`, the simulated
fleet the policies were judged on with the gate's recommendation, so `routeforge policies
evaluate` can replay any trace against the bundle's policies without the pipeline's inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from routeforge.artifacts.common import strict_json
from routeforge.training.policies.simulator.baselines import EXPORTABLE, heuristic_spec_of

SIMULATOR_FILE = "simulator.json"


def export_heuristics(policies: list[str], instances: int, out_dir: Path,
                      parameters: dict[str, dict] | None = None) -> dict[str, Path]:
    """One folder with a `policy.json` per exportable baseline among `policies` (repeats written once);
    `parameters`: those the evaluation chose for a heuristic (`RoutingEvaluation.heuristic_parameters`),
    so the bundle carries the heuristic that was judged."""
    folders = {}
    for name in (p for p in dict.fromkeys(policies) if p in EXPORTABLE):
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        spec = heuristic_spec_of(name, instances, (parameters or {}).get(name))  # over its own
        (folder / "policy.json").write_text(json.dumps(spec, indent=2))
        folders[name] = folder
    return folders


def write_simulator(folder: Path, *, tiers: list[str], models: list[str], instance_models: list[int],
                    fits: list[dict], settings, report: dict[str, Any], limits: list[dict] | None = None) -> Path:
    """`simulator.json`: the instances (tier, model, latency fit, and where the fleet file sets them
    its own KV capacity and batch limit), the queue limits, the QoS requirement, and the gate's
    recommendation with every policy's numbers."""
    folder.mkdir(parents=True, exist_ok=True)
    limits = limits or [{}] * len(fits)
    instances = [{"tier": t, "model": models[m], "model_index": m, "fit": f, **({"limits": lim} if lim else {})}
                 for t, m, f, lim in zip(tiers, instance_models, fits, limits)]
    spec = {"instances": instances,
            "models": models, "queue_capacity": settings.queue_capacity,
            "kv_capacity_tokens": settings.kv_capacity_tokens,
            "qos_latency_per_token_s": report["qos_latency_per_token_s"], "capacity_rps": report["capacity_rps"],
            "train_load": settings.train_load, "gate": report["gate"],
            # per traffic (workload at a load): its online statistics and the best carried policy per objective
            "recommendations": report.get("recommendations", []), "slo": report.get("slo")}
    path = folder / SIMULATOR_FILE
    path.write_text(strict_json.dumps(spec, indent=2, default=float))
    return path


def read_simulator(folder: Path) -> dict[str, Any]:
    path = Path(folder) / SIMULATOR_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no simulated fleet in this bundle (it was built before routing "
                                f"policies were packaged, or without training.routing_evaluation)")
    return json.loads(path.read_text())
