"""The reference GPU fleet, small (issue 49): configs/gpu_fleet.yaml cut to three of dcrouter's
models on four instances of published-measurement tiers and a few hundred prompts, through the whole
pipeline. It trains the policies, gates them, and registers a bundle whose simulated fleet has every
instance, whose load is calibrated on the Azure trace, and which recommends a policy per traffic."""

import json

import dagster as dg
import pytest
import yaml
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.core.config import load_fleet
from routeforge.pipelines.run import run_pipeline

from benchmarks.gpu_fleet import derived_prices
from tests.conftest import CONFIGS

MODELS = ["llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3", "llama3-chatqa-1.5-70b"]


def test_the_configured_prices_are_the_derived_ones():
    """Each model's price in the file is its first tier's GPU-hour cost over the tokens per hour that
    tier serves (the derivation the file's header states), to the cent per 10^5 tokens."""
    raw = yaml.safe_load((CONFIGS / "gpu_fleet.yaml").read_text())
    derived = derived_prices(CONFIGS / "gpu_fleet.yaml")
    assert {m["name"]: m["price"]["output_per_mtok"] for m in raw["models"]} == derived
    kinds = {h["name"]: h["accelerator"] for h in raw["hardware"]}
    assert sum(t.get("instances", 1) for t in raw["tiers"]) >= 12
    assert len({kinds[t["hardware"]] for t in raw["tiers"]}) >= 2


@pytest.mark.timeout(1200)
def test_a_small_reference_fleet_trains_and_registers_per_traffic_recommendations(config_copy, state_dir):
    raw = yaml.safe_load((CONFIGS / "gpu_fleet.yaml").read_text())
    dataset = {**raw["datasets"][0], "limit": 200}
    tiers = [t for t in raw["tiers"] if t["model"] in MODELS and not t["hardware"].startswith("a100")]
    tiers.append(next(t for t in raw["tiers"] if t["model"] == "mistral-7b-instruct-v0.3"))
    evaluation = {**raw["training"]["routing_evaluation"], "loads": [0.8], "workloads": ["trace", "poisson"],
                  "requests": 150, "seeds": 2, "queue_capacity": 32,
                  "policies": ["join_shortest_queue", "least_work_left", "route_balance", "ddqn_workload_guided",
                               "ppo_queue_bias"],
                  "learned": {"ddqn_workload_guided": {"episodes": 1, "demo_episodes": 1, "pretrain_steps": 50},
                              "ppo_queue_bias": {"total_steps": 64, "n_steps": 32, "batch_size": 16, "n_epochs": 2,
                                                 "demo_episodes": 1, "pretrain_steps": 50, "validation_episodes": 1,
                                                 "keep_best_round": False}}}
    path = config_copy("gpu_fleet", datasets=[dataset], models=[m for m in raw["models"] if m["name"] in MODELS],
                       tiers=tiers, training={"knn": {"k": 10}, "routing_evaluation": evaluation})
    with dg.instance_for_test() as instance:
        out = run_pipeline(path, instance)
    bundle = load_bundle(out["uri"], tracking_uri=out["tracking_uri"])
    sim = next(c for c in bundle.manifest.components if c.kind == "routing_simulator")
    spec = json.loads((bundle.root / sim.name / "simulator.json").read_text())
    # llama-3.1-8b on two H100s, the 70B on two 4×H100 groups, mistral on an A100
    assert [i["tier"] for i in spec["instances"]].count("llama-3.1-8b-instruct@h100") == 2
    assert len(spec["instances"]) == 5
    carried = {c.config["policy"] for c in bundle.manifest.components if c.kind == "routing_policy"}
    ppo = next(c for c in bundle.manifest.components if c.name == "policy--ppo_queue_bias")
    assert ppo.metrics["onnx_action_agreement"] == 1.0  # the exported biases are the trained ones
    assert bundle.routing_policy("policy--ppo_queue_bias").spec["observation"]["variant"] == "queue_state"
    table = spec["recommendations"]
    assert {e["workload"] for e in table} == {"trace", "poisson"}
    assert all(set(e["stats"]) >= {"arrival_cv", "prompt_mean", "output_mean", "load"} for e in table)
    assert all(e["best"]["goodput"] in carried for e in table)
    bursty = bundle.recommended_policy_for({"arrival_cv": 2.5, "prompt_mean": 1000, "load": 0.8})
    assert bursty["policy"].removeprefix("policy--") in carried and bursty["workload"] in {"trace", "poisson"}
    root = load_fleet(path).storage_root
    report = json.loads((root / "reports" / "routing" / "routing_evaluation.json").read_text())
    rows = [r for r in report["rows"] if r["workload"] == "trace"]
    assert max(r["served_share"] for r in rows if r["policy"] in ("join_shortest_queue", "least_work_left")) >= 0.99
    assert report["load_calibration"]["trace"]["sustainable_rps"] > 0
