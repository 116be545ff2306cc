"""Imported tiers through the same path as measured ones: profile → latency component → loader."""

import json

import numpy as np
import pyarrow as pa
import pytest
from routeforge.artifacts.deciding.latency import LatencyModel
from routeforge.core.config import ConfigError, load_fleet
from routeforge.core.schemas import routing_column, routing_table_schema
from routeforge.profiling.profile_results import MeasuredBatches
from routeforge.profiling.tier_profile import build_latency_component, measure_tier


def routing_table(models):
    rows = {"prompt_id": ["a", "b", "c", "d"], "task": ["math", "math", "chat", "chat"], "text": ["1", "2", "3", "4"],
            "split": ["train"] * 4}
    for m in models:
        rows[routing_column("quality", m)] = [1.0, 0.0, 0.5, 0.5]
        rows[routing_column("output_tokens", m)] = [10.0, 30.0, 200.0, None]
        rows[routing_column("cost", m)] = [0.1] * 4
    return pa.Table.from_pydict(rows, schema=routing_table_schema(models))


@pytest.fixture
def imported_fleet(config_copy, shared_data, state_dir):
    profiles = shared_data / "profiles"
    return load_fleet(config_copy(
        "demo",
        hardware=[{"name": "a100", "accelerator": "cuda"}, {"name": "gh200", "accelerator": "cuda"}],
        tiers=[
            {"model": "tiny-llama", "hardware": "a100", "tensor_parallel_size": 4,
             "profile": {"kind": "splitwise", "file": str(profiles / "splitwise_perf_model.csv"),
                         "key": "llama2-70b@a100-80gb-tp4"}},
            {"model": "tiny-qwen2", "hardware": "gh200",
             "profile": {"kind": "llm_inference_bench", "file": str(profiles / "llm_inference_bench_results.csv"),
                         "key": "mistralai/Mistral-7B-v0.1@Nvidia GH200 GPUx1@TensorRT-LLM"}},
        ],
    ))


def test_splitwise_tier_becomes_heads_with_rwt_groups(imported_fleet, tmp_path):
    tier = imported_fleet.tiers[0]
    table = routing_table(imported_fleet.model_names)
    summary = measure_tier(imported_fleet, tier, table, tmp_path / "profile", log=lambda m: None).result
    assert isinstance(summary, MeasuredBatches) and summary.measurements > 50 and summary.fit["prefill_r2"] > 0.98
    result = build_latency_component(imported_fleet, tier, tmp_path / "profile", table, tmp_path / "component")
    held = result["evaluation"]
    assert result["kind"] == "batch" and held["tpot_mae_ms_served"] > 0
    # on this tier (A100 × 4, every batch fits at once) the held-out edges go to a line-based head,
    # which beats plain trees there (the comparison with the classic line is benchmarks/splitwise_heads.py's)
    assert set(result["served"]) == {"tpot", "ttft"} and result["served"]["tpot"]["kind"] in ("line", "residual")
    assert held["tpot_mae_ms_served"] < held["kinds"]["trees"]["tpot_mae_ms"]
    assert sum(held["chosen"]["tpot"].values()) == held["configurations"]
    model = LatencyModel.load(tmp_path / "component")
    assert model.golden_max_abs_diff() == 0.0
    rwt = json.loads((tmp_path / "component" / "rwt.json").read_text())
    assert rwt["groups"]["math|tiny-llama"] == {"mean": 20.0, "std": pytest.approx(np.std([10, 30], ddof=1)), "n": 2}
    assert rwt["groups"]["chat|tiny-llama"]["n"] == 1  # the null length is not a zero
    assert rwt["params"]["decode_s"] == pytest.approx(summary.fit["decode_d_s"])


def test_coarse_prior_tier_predicts_from_its_prior(imported_fleet, tmp_path):
    tier = imported_fleet.tiers[1]
    table = routing_table(imported_fleet.model_names)
    measure_tier(imported_fleet, tier, table, tmp_path / "profile", log=lambda m: None)
    result = build_latency_component(imported_fleet, tier, tmp_path / "profile", table, tmp_path / "component")
    assert result["kind"] == "prior" and result["evaluation"]["r2_batch1"] > 0.999
    model = LatencyModel.load(tmp_path / "component")
    got = model.predict_matrix(np.zeros((1, 0)), output_tokens=np.array([128]))
    assert 0.5 < got["e2e"][0] < 0.9  # the file's batch-1, 128-token run took 0.69 s


def test_unknown_key_and_incomplete_profiles_are_named(config_copy, shared_data, state_dir, tmp_path):
    with pytest.raises(ConfigError, match="needs `file` and `key`"):
        load_fleet(config_copy("demo", tiers=[{"model": "tiny-llama", "hardware": "cpu",
                                                 "profile": {"kind": "splitwise"}}]))
    fleet = load_fleet(config_copy("demo", tiers=[{"model": "tiny-llama", "hardware": "cpu", "profile": {
        "kind": "splitwise", "file": str(shared_data / "profiles" / "splitwise_perf_model.csv"), "key": "nope"}}]))
    with pytest.raises(ValueError, match=r"profile.key: 'nope' not in"):
        measure_tier(fleet, fleet.tiers[0], routing_table(fleet.model_names), tmp_path, log=lambda m: None)


def test_a_profile_reads_back_as_the_type_its_kind_measured():
    """`profile.json` as written before the typed results (a dict by kind) reads back as the type each
    kind now returns, and writes out as the same JSON (kept profiles and data versions unchanged)."""
    from routeforge.profiling.profile_results import FittedPrior, SweepRecords, TierProfile, TrafficRecords

    head = {"tier": "m@cpu", "profile_key": "k"}
    written = [
        ({"kind": "batch", "measurements": 60, "fit": {"decode_w_s": 0.01}, "plot": "p.png"}, MeasuredBatches),
        ({"kind": "server_batches", "measurements": 8, "fit": {"decode_w_s": 0.02}, "plot": "p.png",
          "base_url": "http://127.0.0.1:8000/v1", "served_model": "m"}, MeasuredBatches),
        ({"kind": "llm_inference_bench", "prior": {"tpot_s": 0.01}, "simulator_fit": {"decode_w_s": 0.03}}, FittedPrior),
        ({"kind": "sweep", "requests": 90, "rates": [1.0, 2.0], "saturation_rps": 3.0, "saturation_output_tok_s": 40.0,
          "phases": [{"phase": "idle"}], "server_metrics_endpoint": False, "state_agreement": None}, SweepRecords),
        ({"kind": "traffic_log", "traffic": True, "requests": 5, "logged_requests": 6, "quarantined": 1,
          "quarantine_reasons": {"no timestamp": 1}}, TrafficRecords),
    ]
    for fields, kind in written:
        summary = head | fields
        profile = TierProfile.from_json(summary | {"folder": "/tmp/x"})  # the asset's output adds its folder
        assert isinstance(profile.result, kind) and profile.kind == fields["kind"]
        assert profile.to_json() == summary
    assert TierProfile.from_json(head | written[2][0]).result.simulator_fit == {"decode_w_s": 0.03}
    assert TierProfile.from_json(head | written[0][0]).result.simulator_fit == {"decode_w_s": 0.01}
    assert TierProfile.from_json(head | written[3][0]).result.simulator_fit is None
