"""The routing evaluation over the simulated fleet: every policy × workload × load × seed, learned
policies trained on Poisson, plots; and its settings' validation."""

import json

import numpy as np
import pytest
from routeforge.artifacts.common import strict_json
from routeforge.core.config import RoutingEvaluationSettings
from routeforge.training.policies.evaluation import evaluate_routing, workload_factory
from routeforge.training.policies.simulator.workloads import RequestPool

FITS = [{"prefill_intercept_s": 0.005, "prefill_grad_s_per_token": 5e-5, "decode_w_s": 0.01,
         "decode_h_s_per_token": 1e-6},
        {"prefill_intercept_s": 0.01, "prefill_grad_s_per_token": 1e-4, "decode_w_s": 0.03,
         "decode_h_s_per_token": 2e-6}]


def _pool():
    rng = np.random.default_rng(0)
    return RequestPool(rng.integers(20, 400, 50), rng.integers(5, 120, (50, 2)), rng.random((50, 2)), ["t"] * 50,
                       ["fast", "slow"], predicted_tokens=rng.integers(5, 120, (50, 2)).astype(float),
                       predicted_quality=rng.random((50, 2)))


def test_every_policy_workload_load_and_seed(tmp_path):
    settings = RoutingEvaluationSettings(enabled=True, loads=[0.5, 0.9], workloads=["poisson", "square_wave"],
                                         requests=40, seeds=3, queue_capacity=4, learned={"ddqn_workload_guided": {"episodes": 1, "demo_episodes": 1, "pretrain_steps": 20},
                                                  "sac_qos_han": {"total_steps": 80, "demo_episodes": 1, "pretrain_steps": 20}},
                                         policies=["round_robin", "route_balance", "ddqn_workload_guided", "sac_qos_han"],
                                         train_workloads=["poisson", "square_wave"])
    prices = np.array([[0.1, 0.2], [1.0, 2.0]])
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], prices, settings, tmp_path, log=lambda m: None)
    report = json.loads(strict_json.dumps(evaluation.report(), default=float))  # what the asset writes
    assert len(evaluation.rows) == 2 * 2 * 4 and set(evaluation.trained) == {"ddqn_workload_guided", "sac_qos_han"}
    assert evaluation.recommended == report["gate"]["recommended"] and len(report["rows"]) == len(evaluation.rows)
    for row in report["rows"]:
        assert 0 <= row["qos_mean"] <= 1 and row["e2e_mean_s"] > 0 and row["e2e_mean_s_std"] >= 0
        assert row["cost_usd_per_request"] > 0 and row["dropped"] + row["rejected"] <= 40
    # round-robin alternates the cheap and the dear model: its cost lies between theirs
    rr = next(r for r in report["rows"] if r["policy"] == "round_robin" and r["load"] == 0.5)
    cheap, dear = (float(np.mean(_pool().prompt_tokens * p[0] + _pool().output_tokens[:, i] * p[1]) / 1e6)
                   for i, p in enumerate(prices))
    assert cheap < rr["cost_usd_per_request"] < dear
    assert set(report["learning_curves"]) == {"ddqn_workload_guided", "sac_qos_han"}
    # both started from the heuristic chosen on training seeds; the gate names one policy and why
    assert {p["teacher"] for p in report["pretrain"].values()} <= {"join_shortest_queue", "earliest_available",
                                                                  "least_work_left", "route_balance"}
    gate = report["gate"]
    assert gate["recommended"] in {"round_robin", "route_balance", "ddqn_workload_guided", "sac_qos_han"}
    assert gate["best_heuristic"] in {"round_robin", "route_balance"} and gate["reason"]
    assert all(len(r["goodput_by_seed"]) == 3 and len(r["served_share_by_seed"]) == 3 for r in report["rows"])
    assert all((tmp_path / p).exists() for p in report["plots"]) and len(report["plots"]) == 3
    # per traffic (workload × load): its online statistics and the best carried policy, and how that
    # transfers to a workload left out; each workload's load calibrated by search
    table = report["recommendations"]
    assert {(e["workload"], e["stats"]["load"]) for e in table} == {(w, x) for w in ("poisson", "square_wave")
                                                                     for x in (0.5, 0.9)}
    assert all(e["best"]["goodput"] in {"round_robin", "route_balance", "ddqn_workload_guided", "sac_qos_han"}
               for e in table)
    assert report["transfer"]["objective"] == "goodput" and len(report["transfer"]["cells"]) == 4
    assert all(c["gap_relative"] >= 0 for c in report["transfer"]["cells"])
    assert set(report["load_calibration"]) == {"poisson", "square_wave"}
    # trained over both families, an episode each; every workload is judged on held-out windows
    assert report["train_workloads"] == ["poisson", "square_wave"]
    assert gate["unseen_workloads"] == ["poisson", "square_wave"]


def _traffic_log(path, n=120, seed=4):
    """A small production log in the gateway format `prompts.traffic_logs` reads: bursty arrivals,
    long prompts and short answers (unlike the pool's), one bad line."""
    rng = np.random.default_rng(seed)
    sent = 1_795_000_000 + np.cumsum(rng.exponential(np.where(rng.random(n) < 0.3, 0.02, 0.8)))
    lines = [json.dumps({"timestamp": float(t), "request": {"model": "fast", "prompt": f"question {i}"},
                         "response": {"model": "fast", "choices": [{"text": "answer"}],
                                      "usage": {"prompt_tokens": int(p), "completion_tokens": int(o)}}})
             for i, (t, p, o) in enumerate(zip(sent, rng.integers(800, 1600, n), rng.integers(2, 12, n)))]
    lines.insert(7, '{"timestamp": "yesterday", "request": {}}')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_fleets_traffic_logs_are_replayed_as_a_workload_with_a_recommendation_of_their_own(tmp_path):
    from routeforge.core.storage import Quarantine
    from routeforge.training.policies.evaluation import read_traffic

    quarantine = Quarantine("routing_evaluation")
    traffic = read_traffic(str(_traffic_log(tmp_path / "traffic.jsonl")), quarantine)
    assert len(traffic) == 120 and [r["row"] for r in quarantine.rows] == ["traffic.jsonl:8"]
    assert traffic.times[0] == 0 and (np.diff(traffic.times) >= 0).all()
    settings = RoutingEvaluationSettings(enabled=True, loads=[0.7], workloads=["poisson"], requests=40, seeds=2,
                                         queue_capacity=4, policies=["round_robin", "join_shortest_queue",
                                                                     "least_work_left"])
    report = evaluate_routing(_pool(), FITS, [0, 1], np.zeros((2, 2)), settings, tmp_path, log=lambda m: None,
                              traffic=traffic).report()
    assert {r["workload"] for r in report["rows"]} == {"poisson", "traffic"} and report["traffic_requests"] == 120
    # the replayed requests are the log's: its long prompts, not the pool's (at most 400 tokens)
    replay = workload_factory("traffic", _pool(), 5.0, 40, None, traffic)(0)
    assert [r.prompt_tokens for r in replay] == traffic.prompt_tokens[:40].tolist()
    assert all(r.output_tokens[0] == r.output_tokens[1] for r in replay)
    assert set(report["gate_by_workload"]) == {"poisson", "traffic"}
    assert all(g["recommended"] in settings.policies and g["reason"] for g in report["gate_by_workload"].values())


def test_settings_name_the_bad_field(tmp_path):
    with pytest.raises(ValueError, match="routing_evaluation.trace"):
        RoutingEvaluationSettings(workloads=["trace"])
    with pytest.raises(ValueError, match="unknown routing policy 'sjf'"):
        evaluate_routing(_pool(), FITS, [0, 1], np.zeros((2, 2)), RoutingEvaluationSettings(policies=["sjf"]),
                         tmp_path, log=lambda m: None)


def test_switched_poisson_workload_keeps_the_mean_rate():
    requests = workload_factory("switched_poisson", _pool(), rate=10.0, n=4000, times=None)(1)
    span = requests[-1].arrival - requests[0].arrival
    assert 0.5 * 10.0 < len(requests) / span < 1.5 * 10.0


def test_a_noise_sized_negative_fit_is_clipped_and_reported():
    from routeforge.training.policies.evaluation import fleet_profiles

    noisy = dict(FITS[0], prefill_grad_s_per_token=-1.4e-4)
    profiles, clipped = fleet_profiles([noisy, FITS[1]], queue_capacity=4, kv_capacity_tokens=10_000)
    assert profiles[0].prefill_s_per_token == 1e-7 and profiles[1].prefill_s_per_token == 1e-4
    assert clipped == ["instance 0: prefill_grad_s_per_token -0.00014 clipped to 1e-07"]


def test_the_recommendation_by_traffic_picks_the_nearest_evaluated_traffic():
    """`artifacts.deciding.recommendation.recommend`: statistics on a log scale over the table's spread; the
    nearest entry's policy for the objective; nonsense statistics and unknown objectives refused."""
    from routeforge.artifacts.deciding.recommendation import recommend

    table = [{"workload": "poisson", "stats": {"arrival_cv": 1.0, "prompt_mean": 300, "output_mean": 200, "load": 0.5},
              "best": {"goodput": "join_shortest_queue"}},
             {"workload": "gamma", "stats": {"arrival_cv": 3.0, "prompt_mean": 300, "output_mean": 200, "load": 0.5},
              "best": {"goodput": "least_work_left"}},
             {"workload": "gamma", "stats": {"arrival_cv": 3.0, "prompt_mean": 300, "output_mean": 200, "load": 0.9},
              "best": {"goodput": "route_balance"}}]
    assert recommend(table, {"arrival_cv": 1.1, "load": 0.5})["policy"] == "join_shortest_queue"
    assert recommend(table, {"arrival_cv": 2.7, "load": 0.55})["policy"] == "least_work_left"
    got = recommend(table, {"arrival_cv": 2.7, "load": 0.95, "prompt_mean": 280})
    assert got["policy"] == "route_balance" and got["used"] == ["arrival_cv", "prompt_mean", "load"]
    with pytest.raises(KeyError, match="objective 'e2e_mean_offered_s'"):
        recommend(table, {"load": 0.5}, "e2e_mean_offered_s")
    with pytest.raises(ValueError, match="arrival_cv must be a finite number"):
        recommend(table, {"arrival_cv": float("nan")})
    with pytest.raises(ValueError, match="at least one of"):
        recommend(table, {"burstiness": 2.0})


def test_the_traffic_statistics_count_prefix_sharing_and_the_recommendation_keys_on_it():
    """Issue 60, item 6: the share of prompt blocks an earlier request of the window already sent is
    a statistic of the traffic (0 without hashes), and a bundle's table recommends by it: a
    cache-aware router where prompts share prefixes, a load balancer where they do not."""
    from routeforge.artifacts.deciding.recommendation import recommend
    from routeforge.training.policies.recommendation import traffic_stats
    from routeforge.training.policies.simulator.cluster import Request

    def request(i, t, ids):
        return Request(rid=i, arrival=t, prompt_tokens=16 * max(1, len(ids)), output_tokens=np.array([10.0]),
                       quality=np.array([1.0]), hash_ids=tuple(ids))

    shared = [request(0, 0.0, [1, 2, 3, 4]), request(1, 1.0, [1, 2, 3, 9]), request(2, 0.5, [1, 2, 7, 8])]
    # in arrival order: 0 (4 new), 2 (1, 2 repeated), 1 (1, 2, 3 repeated): 5 of 12 blocks
    assert traffic_stats(shared)["prefix_sharing"] == pytest.approx(5 / 12)
    assert traffic_stats([request(0, 0.0, []), request(1, 1.0, [])])["prefix_sharing"] == 0.0
    table = [{"workload": "trace", "stats": {"arrival_cv": 1.5, "load": 0.8, "prefix_sharing": 0.6},
              "best": {"goodput": "llm_d"}},
             {"workload": "trace", "stats": {"arrival_cv": 1.5, "load": 0.8, "prefix_sharing": 0.0},
              "best": {"goodput": "earliest_available"}}]
    assert recommend(table, {"arrival_cv": 1.4, "load": 0.8, "prefix_sharing": 0.5})["policy"] == "llm_d"
    assert recommend(table, {"arrival_cv": 1.4, "load": 0.8, "prefix_sharing": 0.02})["policy"] == "earliest_available"


def test_load_calibration_brackets_then_bisects_and_says_when_windows_cannot_load_the_fleet():
    from routeforge.training.policies.load import sustainable_rate

    capacity = 37.0  # the rate past which the probe misses its targets
    found = sustainable_rate(lambda r: (1.0, 1.0) if r <= capacity else (0.95, 0.5), estimate_rps=5.0)
    assert found.bounded and capacity / 1.02 <= found.rate_rps <= capacity
    lines = []
    short = sustainable_rate(lambda r: (1.0, 1.0), estimate_rps=5.0, log=lines.append)
    assert not short.bounded and short.rate_rps == 5.0 and "too short to load the fleet" in lines[0]
    with pytest.raises(ValueError, match="rejects at any load"):
        sustainable_rate(lambda r: (0.5, 0.5), estimate_rps=5.0)


def test_a_trace_with_block_hashes_is_replayed_whole_and_cached_by_the_simulated_instances(tmp_path, shared_data):
    """Issue 60, item 3 in the pipeline: a Mooncake-format trace as the `trace` workload carries its
    own token counts and block ids; the baselines' instances cache blocks, so a prefix-aware router
    finds hits, and the traffic's prefix sharing is among the recommendation's statistics."""
    from routeforge.core.config.training import TraceSettings

    lines = (shared_data / "traces" / "mooncake_synthetic_trace.jsonl").read_text().splitlines()[:400]
    (tmp_path / "mooncake.jsonl").write_text("\n".join(lines) + "\n")
    trace = TraceSettings(path=tmp_path / "mooncake.jsonl", format="jsonl", timestamp="timestamp", timestamp_unit="ms",
                          prompt_tokens="input_length", output_tokens="output_length", hash_ids="hash_ids",
                          block_tokens=512)
    with pytest.raises(ValueError, match="needs block_tokens"):
        TraceSettings(path=tmp_path / "mooncake.jsonl", hash_ids="hash_ids")
    settings = RoutingEvaluationSettings(enabled=True, loads=[0.8], workloads=["trace"], requests=150, seeds=2,
                                         queue_capacity=8, trace=trace, policies=["join_shortest_queue", "llm_d"])
    said = []
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.zeros((2, 2)), settings, tmp_path, log=said.append)
    report = json.loads(strict_json.dumps(evaluation.report(), default=float))
    rows = {r["policy"]: r for r in report["rows"]}
    assert set(rows) == {"join_shortest_queue", "llm_d"}
    assert rows["llm_d"]["prefix_hit_rate"] > 0 and rows["llm_d"]["prefix_hit_rate"] >= rows["join_shortest_queue"]["prefix_hit_rate"]
    assert any("of prompt blocks repeat an earlier one" in line for line in said)
    assert report["recommendations"][0]["stats"]["prefix_sharing"] > 0
    with pytest.raises(ValueError, match="needs a trace file"):  # no trace at all: refused, as before
        workload_factory("trace", _pool(), 5.0, 40, None, blocks=None)
