"""Issue 60's simulator physics and judge: SLOs that belong to the request, KV capacity from the
hardware, prefix-cache reuse from Mooncake-format traces, and the deployed routers' documented choices."""

from __future__ import annotations

import json

import numpy as np
import pytest
from routeforge.artifacts.deciding.heuristics import HEURISTICS, HeuristicPolicy, heuristic_spec
from routeforge.artifacts.deciding.prefix_index import BlockLru
from routeforge.core.config.fleet import load_fleet
from routeforge.core.storage import Quarantine
from routeforge.profiling.kv_capacity import KvCapacityError, kv_capacity, tier_kv_capacity
from routeforge.training.policies.simulator.baselines import BASELINES, default_baselines
from routeforge.training.policies.simulator.cluster import Cluster, Outcome, Request
from routeforge.training.policies.simulator.instance import InstanceProfile, Job
from routeforge.training.policies.simulator.metrics import summarize
from routeforge.training.policies.simulator.slo import Slo
from routeforge.training.policies.simulator.traces import MOONCAKE, read_block_trace

from tests.conftest import CONFIGS

FAST = InstanceProfile(0.0, 1e-4, 0.01, 0.0, max_running=8, kv_capacity_tokens=100_000)
SLOW = InstanceProfile(0.0, 4e-4, 0.04, 0.0, max_running=8, kv_capacity_tokens=100_000)


def _request(rid=0, prompt=1000, out=50, hashes=()):
    return Request(rid, 0.0, prompt, np.array([out, out]), np.array([0.5, 0.5]), hash_ids=tuple(hashes))


def test_the_same_request_has_the_same_slo_on_any_instance():
    req = _request()
    slo = Slo(scale=5.0, reference="fastest")
    on_fast = Outcome(req, 0, Job(0, 1000, 50, 0.0), 0.0, model=0)
    on_slow = Outcome(req, 1, Job(0, 1000, 50, 0.0), 0.0, model=1)
    bounds = slo.e2e_bounds([on_fast, on_slow], [FAST, SLOW], models=[0, 1])
    assert bounds[0] == bounds[1] == pytest.approx(5.0 * FAST.unloaded_e2e(1000, 50))
    # the instance-relative rule, kept as a named option, is what moved with the router's choice
    relative = Slo(scale=5.0, reference="serving").e2e_bounds([on_fast, on_slow], [FAST, SLOW], models=[0, 1])
    assert relative[1] > relative[0]
    # served on the slow instance in 6 × the fast one's unloaded time (within 5 × its own): late under the
    # request's own SLO, on time under the instance-relative rule
    on_slow.job.first_token, on_slow.job.finished = 0.4, 6 * FAST.unloaded_e2e(1000, 50)
    assert not slo.met([on_slow], [FAST, SLOW], models=[0, 1])[0]
    assert Slo(scale=5.0, reference="serving").met([on_slow], [FAST, SLOW], models=[0, 1])[0]
    assert "fastest" in slo.describe() and "instance-relative" in Slo(scale=5, reference="serving").describe()


def test_a_service_class_judges_ttft_and_tpot_and_counts_every_offered_request():
    reqs = [_request(k) for k in range(4)]
    outcomes = Cluster([FAST]).run(reqs, BASELINES["round_robin"]())
    strict, loose = Slo(ttft_s=1e-6), Slo(ttft_s=60.0, tpot_s=1.0)
    assert summarize(outcomes, slo=strict)["goodput"] == 0.0
    summary = summarize(outcomes, slo=loose)
    assert summary["goodput"] == summary["slo_attainment"] == 1.0
    with pytest.raises(ValueError, match="slo.tpot_s"):
        Slo(tpot_s=float("nan"))


def test_kv_capacity_comes_from_the_hardware_and_the_model_in_the_fleet_file(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    monkeypatch.setenv("ROUTEFORGE_STATE", str(tmp_path))
    config = load_fleet(CONFIGS / "gpu_fleet.yaml")
    by_tier = {t.name: tier_kv_capacity(config, t) for t in config.tiers}
    llama_h100, llama_a100 = by_tier["llama-3.1-8b-instruct@h100"], by_tier["llama-3.1-8b-instruct@a100"]
    # Llama-3-8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes per token
    assert llama_h100.kv_bytes_per_token == llama_a100.kv_bytes_per_token == 131_072
    assert llama_h100.tokens > 2 * llama_a100.tokens  # 80 GB against 40 GB, the same 16 GB of weights
    assert 150_000 < llama_a100.tokens < 200_000
    # the 70B on four H100s, weights split across them
    assert by_tier["llama3-chatqa-1.5-70b@h100x4-tp4"].accelerators == 4
    with pytest.raises(KvCapacityError, match="tier big@a100: 70B parameters"):
        kv_capacity("big@a100", 1, 40.0, 0.9, 70.0, 80, 8, 128)


def test_a_request_whose_blocks_are_cached_prefills_only_the_rest():
    block = 100
    first, again = _request(0, 1000, 2, range(10)), _request(1, 1000, 2, range(10))
    again.arrival = 10.0
    outcomes = Cluster([FAST], block_tokens=block).run([first, again], BASELINES["round_robin"]())
    cold, warm = outcomes[0].ttft, outcomes[1].ttft
    # a whole-prompt hit backs off one block (vLLM computes the last token, so the hit stops at a block edge)
    assert outcomes[0].job.cached_tokens == 0 and outcomes[1].job.cached_tokens == 900
    assert cold == pytest.approx(FAST.prefill_s_per_token * 1000)
    assert warm == pytest.approx(FAST.prefill_s_per_token * 100)
    # the same arrivals with no cache, or without block ids, share nothing
    plain = Cluster([FAST]).run([_request(0, 1000, 2, range(10)), _request(1, 1000, 2, range(10))],
                                BASELINES["round_robin"]())
    assert [o.job.cached_tokens for o in plain] == [0, 0]
    summary = summarize(outcomes, slo=Slo(scale=5.0), profiles=[FAST])
    assert summary["prefix_hit_rate"] == pytest.approx(900 / 2000)


def test_the_block_cache_evicts_least_recently_used_within_its_capacity():
    cache = BlockLru(3)
    cache.insert([1, 2, 3])
    assert cache.match([1, 2, 3, 4]) == 3
    cache.insert([1, 9])  # 1 used again, 9 new: 2 (least recent) goes
    assert len(cache) == 3 and cache.match([1, 2]) == 1 and 9 in cache
    with pytest.raises(ValueError, match="capacity_blocks"):
        BlockLru(0)


def test_the_mooncake_trace_is_read_with_its_hashes_and_bad_rows_are_quarantined(shared_data, tmp_path):
    trace = read_block_trace(shared_data / "traces" / "mooncake_synthetic_trace.jsonl", limit=200)
    assert len(trace) == 200 and trace.block_tokens == 512
    assert all(len(ids) == -(-p // 512) for ids, p in zip(trace.hash_ids, trace.prompt_tokens))
    assert 0 < trace.repeated_block_share() < 1
    bad = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]},
            {"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1, 2]},
            {"timestamp": 9, "input_length": 600, "output_length": 3, "hash_ids": ["a"]},
            {"timestamp": 12, "input_length": 600, "output_length": 3, "hash_ids": [0, 7]}]
    bad.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    quarantine = Quarantine("trace")
    read = read_block_trace(bad, columns=MOONCAKE, quarantine=quarantine)
    assert read.hash_ids == [(0, 1), (0, 7)] and list(read.times) == [0.0, 0.012]
    reasons = list(quarantine.reasons())
    assert any("3 block ids for 600 prompt tokens" in r for r in reasons)
    assert any("non-negative integer block ids" in r for r in reasons)


def _instance(waiting=0, running=0, kv=0.0, cached=None, active=0):
    return {"max_running": 8, "tpot_s": 0.01, "prefill_s_per_token": 1e-4,
            "running": [{"predicted_output_tokens": 10, "generated_tokens": 1}] * running,
            "waiting": [{"prompt_tokens": 100, "predicted_output_tokens": 10}] * waiting,
            "kv_utilization": kv, "cached_prefix_blocks": cached, "active_tokens": active,
            "kv_capacity_tokens": 100_000}


def _route(name, request, instances, **parameters):
    return HeuristicPolicy.from_spec(heuristic_spec(name, len(instances), **parameters)).route(request, instances)


def test_llm_d_weighs_prefix_kv_and_queue_scores_with_its_default_weights():
    request = {"prompt_tokens": 400, "hash_ids": [1, 2, 3, 4], "block_tokens": 100}
    # a full prefix hit beats an empty queue and an empty cache elsewhere: 3·1 + 2·0.6 + 2·0 = 4.2 > 0 + 2 + 2
    hit = [_instance(waiting=2, kv=0.4, cached=4), _instance(waiting=0, kv=0.0, cached=0)]
    assert _route("llm_d", request, hit) == 0
    half = [_instance(waiting=2, kv=0.6, cached=2), _instance(waiting=0, kv=0.0, cached=0)]
    assert _route("llm_d", request, half) == 1  # 1.5 + 0.8 + 0 < 0 + 2 + 2
    assert _route("llm_d", request, half, weights={"prefix": 10.0}) == 0


def test_llm_d_matches_at_most_4096_tokens_in_its_own_index_and_breaks_ties_at_random():
    """llm-d's approximate prefix scorer matches at most 256 of its 16-token blocks: with 512-token
    blocks, the first 8. A prompt of 20 such blocks sent to instance 0 scores 8 / 8 there next time; a
    prompt sharing only its 9th block on is not matched at all. Equal scores go to a seeded draw."""
    from routeforge.artifacts.deciding.deployed_routers import _llm_d_limits, llm_d_overlaps, pick_among

    assert _llm_d_limits(512, {}) == (8, 976) and _llm_d_limits(16, {}) == (256, 31_250)
    policy = HeuristicPolicy.from_spec(heuristic_spec("llm_d", 2))
    long = {"prompt_tokens": 20 * 512, "hash_ids": list(range(20)), "block_tokens": 512}
    idle = [_instance(), _instance()]
    first = policy.route(long, idle)
    assert llm_d_overlaps(long, idle, policy.state, {}) == ([8, 0] if first == 0 else [0, 8], 8)
    assert policy.route(long, idle) == first
    # ties: an even spread over many draws, the same draws for the same seed, other draws for another
    state, other = {}, {}
    draws = [pick_among(state, [0, 1, 2]) for _ in range(300)]
    assert all(60 < draws.count(k) < 140 for k in range(3))
    again = {}
    assert [pick_among(again, [0, 1, 2]) for _ in range(300)] == draws
    assert [pick_among(other, [0, 1, 2], seed=7) for _ in range(300)] != draws


def test_dynamo_routes_to_the_lowest_prefill_plus_decode_block_cost():
    """Dynamo's cost: overlap weight × (queued prefill + the request's uncached tokens) / block + active
    blocks + the request's new blocks."""
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}
    # cached 8 of 10 blocks (200 new tokens) but 1,600 active tokens: (0 + 200) / 100 + (1600 + 200) / 100 = 20
    # against (0 + 1000) / 100 + (0 + 1000) / 100 = 20: a tie, the first
    insts = [_instance(cached=8, active=1600), _instance(cached=0, active=0)]
    assert _route("dynamo_kv", request, insts) == 0
    insts = [_instance(cached=8, active=1700), _instance(cached=0, active=0)]  # 21 > 20
    assert _route("dynamo_kv", request, insts) == 1
    # the worker's queued prefill counts in the prefill term: 1,000 queued tokens make instance 0 cost 30
    queued = [{**_instance(cached=8, active=1000), "queued_prefill_tokens": 1000}, _instance(cached=0, active=0)]
    assert _route("dynamo_kv", request, queued) == 1
    assert _route("dynamo_kv", request, queued, overlap_score_weight=0.0) == 1  # pure load: 12 > 10


def test_dynamo_without_kv_events_forgets_what_it_sent_after_its_ttl():
    policy = HeuristicPolicy.from_spec(heuristic_spec("dynamo_kv", 2))
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100, "now_s": 0.0}
    idle = [_instance(), _instance()]
    assert policy.route(request, idle) == 0
    busy_first = [_instance(active=500), _instance()]  # 5 more active blocks, but its 10 cached blocks save 18
    assert policy.route({**request, "now_s": 100.0}, busy_first) == 0
    assert policy.route({**request, "now_s": 221.0}, busy_first) == 1  # 121 s after the last send: expired


def test_llm_d_first_token_scorer_prefers_the_faster_prefill_unless_the_cache_outweighs_it():
    """`llm_d_ttft`: where llm-d's three scorers tie, the instance whose predicted first token comes
    sooner (here: ten times the prefill speed); a cached prefix still outweighs it at the default weight
    (3 × the prefix share against 0.5 × the first-token score); the queued prefill counts."""
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}

    def inst(prefill, cached=0, waiting=0):
        return {**_instance(cached=cached, waiting=waiting), "prefill_s_per_token": prefill}

    assert _route("llm_d_ttft", request, [inst(1e-3), inst(1e-4)]) == 1
    half = [inst(1e-3, cached=5), inst(1e-4)]  # 0.5 s of uncached prefill against 0.1 s
    assert _route("llm_d_ttft", request, half) == 0  # 3 × 0.5 + 4 > 4 + 0.5 × 1
    assert _route("llm_d_ttft", request, half, ttft_weight=10.0) == 1
    from routeforge.artifacts.deciding.deployed_routers import predicted_first_token_s

    busy = {**inst(1e-4, waiting=2), "queued_prefill_tokens": 1000}
    # the 1,000 queued prefill tokens and the 1,000 - 3 × 100 uncached (the step in flight is not seen)
    assert predicted_first_token_s(request, [busy], [3]) == pytest.approx([1e-4 * (1000 + 700)])
    assert "llm_d_ttft" in BASELINES and "llm_d_ttft" not in default_baselines()


def test_sglang_follows_its_own_tree_above_the_threshold_and_balances_when_imbalanced():
    spec = heuristic_spec("sglang_cache_aware", 2)
    policy = HeuristicPolicy.from_spec(spec)
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}
    # the first time: no match anywhere, the smallest tree (both empty: the less loaded, then the first)
    assert policy.route(request, [_instance(waiting=1), _instance()]) == 1
    # again: a full match on instance 1 in its own tree (KV events are not read)
    assert policy.route(request, [_instance(cached=10), _instance(waiting=3, cached=0)]) == 1
    # imbalance past both thresholds (100 − 10 > 64 and 100 > 1.5 × 10): the least loaded
    assert policy.route(request, [_instance(waiting=10), _instance(waiting=100)]) == 0
    # below the cache threshold (3 of 10 blocks = 0.3, not above it): the smaller tree
    other = {"prompt_tokens": 1000, "hash_ids": [0, 1, 2, 77, 78, 79, 80, 81, 82, 83], "block_tokens": 100}
    assert policy.route(other, [_instance(), _instance()]) == 0


def test_sglangs_tree_is_bounded_over_all_instances_and_pruned_least_recent_first_on_its_interval():
    """A tree of 1,000 tokens (10 blocks of 100) over both instances, pruned every 120 s: 20 blocks
    sent are all matched until the next pruning, then only the 10 most recent are."""
    policy = HeuristicPolicy.from_spec(heuristic_spec("sglang_cache_aware", 2, max_tree_size_tokens=1000))
    old = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100, "now_s": 0.0}
    new = {**old, "hash_ids": list(range(100, 110)), "now_s": 1.0}
    assert policy.route(old, [_instance(), _instance()]) == 0
    assert policy.route(new, [_instance(), _instance(waiting=1)]) == 1  # the smaller tree (0 blocks), not the load
    tree = policy.state["sglang_tree"]
    assert tree.sizes() == [10, 10]
    assert policy.route({**old, "now_s": 60.0}, [_instance(), _instance()]) == 0  # matched: not pruned yet
    third = {**old, "hash_ids": list(range(200, 210)), "now_s": 130.0}
    assert policy.route(third, [_instance(), _instance()]) == 1  # pruned first: instance 1's tree emptied
    assert tree.overlaps(list(range(100, 110))) == [0, 0] and tree.overlaps(list(range(10))) == [10, 0]


def test_lmetric_multiplies_the_uncached_prefill_by_the_batch_size():
    """LMetric: 200 uncached tokens × 5 running = 1,000 against 1,000 × 2 = 2,000: the cached one; with
    10 running there, 2,000 against 2,000: a tie, to the fewer uncached tokens; an idle instance's 0
    wins over any cache."""
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}
    assert _route("lmetric", request, [_instance(running=5, cached=8), _instance(running=2, cached=0)]) == 0
    assert _route("lmetric", request, [_instance(running=2, cached=0), _instance(running=10, cached=8)]) == 1
    assert _route("lmetric", request, [_instance(running=3, cached=10), _instance(running=0, cached=0)]) == 1


def test_llm_d_affinity_is_sticky_to_the_cached_instance_until_it_saturates():
    """llm-d's optimized baseline: 9 of 10 complete blocks cached (≥ 0.8) keeps instance 1 the only
    candidate despite 10,000 queued prefill tokens (0.63 s at 15,928 tokens/s, within 18 s); 300,000
    (18.8 s) break the affinity and the token load picks instance 0; below the threshold the token load
    decides alone."""
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}

    def inst(cached, queued):
        return {**_instance(cached=cached), "queued_prefill_tokens": queued}

    assert _route("llm_d_affinity", request, [inst(0, 0), inst(9, 10_000)]) == 1
    assert _route("llm_d_affinity", request, [inst(0, 0), inst(9, 300_000)]) == 0
    assert _route("llm_d_affinity", request, [inst(0, 100), inst(5, 1_000)]) == 0


def test_deployed_routers_are_registered_and_evaluated_by_default():
    """Both runtimes make their decisions now (the TypeScript tests below), so they are evaluated and
    carried like every default heuristic."""
    for name in ("llm_d", "llm_d_affinity", "lmetric", "dynamo_kv", "sglang_cache_aware"):
        assert name in HEURISTICS and name in BASELINES and name in default_baselines()
    assert "join_shortest_queue" in default_baselines() and "route_balance_absolute" in default_baselines()


def test_prefix_aware_routers_reuse_the_cache_in_the_simulator():
    """Two instances, requests of two conversations alternating: a prefix-aware router keeps each
    conversation on one instance, round-robin splits them. A whole-prompt hit backs off one block (vLLM
    computes the last token), so 7 of 8 blocks is the most a repeat can hit."""
    convo = [tuple(range(100 * c, 100 * c + 8)) for c in (1, 2)]
    reqs = [Request(k, 0.5 * k, 800, np.array([4]), np.array([np.nan]), hash_ids=convo[(k // 2) % 2])
            for k in range(40)]
    rates = {}
    for name in ("round_robin", "llm_d", "llm_d_affinity", "lmetric", "dynamo_kv", "sglang_cache_aware"):
        outcomes = Cluster([FAST, FAST], block_tokens=100).run(reqs, BASELINES[name]())
        rates[name] = summarize(outcomes, slo=Slo(scale=5.0), profiles=[FAST, FAST])["prefix_hit_rate"]
    assert all(rates[n] > 0.8 for n in ("llm_d", "llm_d_affinity", "dynamo_kv", "sglang_cache_aware")), rates
    assert rates["lmetric"] > rates["round_robin"], rates


# linear_scorer with a weight on each of its features, so every one of them decides somewhere
SCORER_WEIGHTS = {"weights": {"prefix": 4.0, "kv_free": 3.0, "queue": 0.9, "first_token": -0.9, "first_token_s": 1.6,
                              "running": 1.2, "waiting": -0.7, "prefill_speed": -2.6, "decode_speed": 0.5}}


def test_linear_scorer_is_llm_d_ttft_without_weights_and_weighs_each_feature_it_is_given():
    """`linear_scorer`: with no weights, `llm_d_ttft`'s decision on every golden case; a weight on the
    prefill speed alone sends a request to the faster prefill; a weight naming no feature is refused."""
    from routeforge.artifacts.deciding.deployed_routers import SCORER_FEATURES, scorer_features
    from routeforge.artifacts.deciding.golden import _heuristic_cases

    cases = _heuristic_cases(4, 200, np.random.default_rng(3))
    plain, ttft = (HeuristicPolicy.from_spec(heuristic_spec(n, 4)) for n in ("linear_scorer", "llm_d_ttft"))
    assert [plain.route(c["request"], c["instances"]) for c in cases] == \
        [ttft.route(c["request"], c["instances"]) for c in cases]
    request = {"prompt_tokens": 1000, "hash_ids": list(range(10)), "block_tokens": 100}
    insts = [{**_instance(), "prefill_s_per_token": 1e-3}, {**_instance(), "prefill_s_per_token": 1e-4}]
    features = scorer_features(request, insts, {})
    assert set(features) == set(SCORER_FEATURES) and features["prefill_speed"] == [0.1, 1.0]
    only_speed = {"weights": {f: 0.0 for f in SCORER_FEATURES} | {"prefill_speed": 1.0}}
    assert _route("linear_scorer", request, insts, **only_speed) == 1
    from routeforge.artifacts.deciding.deployed_routers import pick_among

    tie = _route("linear_scorer", request, insts, **{"weights": {f: 0.0 for f in SCORER_FEATURES}})
    assert tie == pick_among({}, [0, 1])  # a tie: the seeded draw, as llm-d's picker
    with pytest.raises(ValueError, match=r"linear_scorer: weights \['speed'\] name no feature"):
        _route("linear_scorer", request, insts, weights={"speed": 1.0})


def _latency_model() -> dict:
    """A small XGBoost TTFT model over the predicted-latency features (random data: for decisions to compare)."""
    import xgboost

    rng = np.random.default_rng(2)
    x = np.column_stack([rng.random(400), rng.integers(1, 2000, 400), rng.integers(0, 4, 400), rng.integers(0, 9, 400),
                         rng.random(400), rng.integers(0, 3000, 400)]).astype(np.float32)
    y = 0.1 * x[:, 2] + 0.001 * x[:, 1] * (1 - x[:, 4]) + 1e-4 * x[:, 5] + 0.3 * x[:, 0]
    model = xgboost.XGBRegressor(n_estimators=30, max_depth=4, n_jobs=1, random_state=0).fit(x, y)
    return json.loads(model.get_booster().save_raw("json").decode())


def test_llm_ds_predicted_latency_scorer_sends_a_request_where_its_model_predicts_the_soonest_first_token():
    """Trained as llm-d trains it (on what its scheduler saw when it sent each request of the training
    windows, and the TTFT that followed), its model predicts a longer TTFT behind a longer queue; a spec
    without a model is refused in one line."""
    from routeforge.training.policies.predicted_latency import fit_parameters

    requests = [Request(k, 0.05 * k, 1500 + 37 * (k % 9), np.array([40, 40]), np.array([np.nan, np.nan]),
                        hash_ids=tuple(range(100 * (k % 6), 100 * (k % 6) + 3))) for k in range(300)]
    parameters = fit_parameters(lambda policy, s: Cluster([SLOW, FAST], models=[0, 1], block_tokens=512).run(
        requests, policy), [0], log=lambda _: None)
    policy = HeuristicPolicy.from_spec(heuristic_spec("llm_d_predicted_latency", 2, **parameters))
    request = {"prompt_tokens": 1500, "hash_ids": [9000, 9001], "block_tokens": 512}
    assert policy.route(request, [_instance(waiting=6, active=9000), _instance()]) == 1
    with pytest.raises(ValueError, match="llm_d_predicted_latency: parameters.model"):
        _route("llm_d_predicted_latency", request, [_instance(), _instance()])


def _with_typescript_twins() -> list[str]:
    """Every registered heuristic the TypeScript runtime has a twin of (all but `typescript=False` ones)."""
    return [e.name for e in HEURISTICS.entries() if e.metadata.get("typescript", True)]


def test_the_typescript_runtime_knows_every_registered_heuristic():
    import shutil
    import subprocess
    from pathlib import Path

    runtime = Path(__file__).resolve().parents[3] / "runtimes" / "typescript" / "dist" / "heuristics.js"
    node = shutil.which("node")
    if node is None or not runtime.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    run = subprocess.run([node, "-e", "console.log(JSON.stringify(require(process.argv[1]).knownHeuristics()))",
                          str(runtime)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert sorted(json.loads(run.stdout)) == sorted(_with_typescript_twins())


@pytest.mark.parametrize("name", _with_typescript_twins())
def test_the_typescript_runtime_makes_each_deployed_routers_decisions(name):
    """Issue 60, item 4: the TypeScript runtime (runtimes/typescript/src/deployed_routers.ts) makes the
    same choice as the Python one on 300 random requests in sequence, its own prefix index carried
    across them, through the cases a bundle's golden vectors draw (`artifacts.deciding.golden`); and the same
    for the quality-within-SLO heuristic added beside them."""
    import shutil
    import subprocess
    from pathlib import Path

    from routeforge.artifacts.deciding.golden import _heuristic_cases

    runtime = Path(__file__).resolve().parents[3] / "runtimes" / "typescript" / "dist" / "heuristics.js"
    node = shutil.which("node")
    if node is None or not runtime.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    cases = _heuristic_cases(4, 300, np.random.default_rng(7))
    # and SGLang's tie on an equal match: a request sent to instances 0 and 3 by the imbalance rule,
    # then matched on both, goes to the less loaded of the two
    request = {"prompt_tokens": 64, "predicted_output_tokens": [8] * 4, "hash_ids": [9001, 9002], "block_tokens": 16}
    idle = {"max_running": 4, "tpot_s": 0.01, "prefill_s_per_token": 1e-4, "running": [], "waiting": []}
    queued = lambda n: {**idle, "waiting": [{"prompt_tokens": 1, "predicted_output_tokens": 1}] * n}  # noqa: E731
    cases += [{"request": request, "instances": [queued(10), queued(100), queued(100), queued(100)]},
              {"request": request, "instances": [queued(100), queued(100), queued(100), queued(10)]},
              {"request": request, "instances": [queued(5), queued(1), queued(1), queued(2)]}]
    parameters = SCORER_WEIGHTS if name == "linear_scorer" else {}
    if HEURISTICS.entry(name).metadata.get("trained_by"):
        parameters = {"model": _latency_model()}
    spec = heuristic_spec(name, 4, **parameters)
    python = HeuristicPolicy.from_spec(spec)
    expected = [python.route(c["request"], c["instances"]) for c in cases]
    assert len(set(expected)) > 1 and any("cached_prefix_blocks" not in c["instances"][0] for c in cases)
    if name == "sglang_cache_aware":
        assert expected[-3:] == [0, 3, 3]
    script = ("const {HeuristicPolicy} = require(process.argv[1]); const fs = require('fs');"
              "const input = JSON.parse(fs.readFileSync(0, 'utf8')); const policy = new HeuristicPolicy(input.spec);"
              "console.log(JSON.stringify(input.cases.map((c) => policy.route(c.request, c.instances))));")
    run = subprocess.run([node, "-e", script, str(runtime)], input=json.dumps({"spec": spec, "cases": cases}),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == expected


def test_the_typescript_runtime_refuses_a_sampling_dynamo_policy():
    import shutil
    import subprocess
    from pathlib import Path

    runtime = Path(__file__).resolve().parents[3] / "runtimes" / "typescript" / "dist" / "heuristics.js"
    node = shutil.which("node")
    if node is None or not runtime.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    spec = heuristic_spec("dynamo_kv", 2, temperature=0.5)
    script = ("const {HeuristicPolicy} = require(process.argv[1]);"
              "try { new HeuristicPolicy(JSON.parse(process.argv[2])); console.log('OK'); }"
              "catch (e) { console.log('REFUSED ' + e.message); }")
    run = subprocess.run([node, "-e", script, str(runtime), json.dumps(spec)], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.startswith("REFUSED") and "temperature 0 only" in run.stdout


def test_quality_within_slo_takes_the_best_model_that_meets_the_requests_slo_else_the_soonest():
    """Issue 60, item 5 (the joint choice, as a heuristic): the request's SLO is 5 × its E2E alone on
    the instance that would serve it fastest; among the instances predicted to meet it, the best
    model; where none is, the soonest."""
    def inst(tpot, waiting=0):
        return {"max_running": 1, "tpot_s": tpot, "prefill_s_per_token": 0.0,
                "running": [{"predicted_output_tokens": 100, "generated_tokens": 0}] * (1 if waiting else 0),
                "waiting": [{"prompt_tokens": 10, "predicted_output_tokens": 100}] * waiting}

    policy = HeuristicPolicy.from_spec(heuristic_spec("quality_within_slo", 3))
    request = {"prompt_tokens": 10, "predicted_output_tokens": [100, 100, 100], "predicted_quality": [0.2, 0.9, 0.6]}
    # alone: 1 s, 4 s, 2 s; the bound 5 s: all three meet it idle, the best model (instance 1) wins
    assert policy.route(request, [inst(0.01), inst(0.04), inst(0.02)]) == 1
    # instance 1 busy (100 tokens left at 0.04 s, then its 1 s wait share): 4 + 4 + 4 s > 5 s; instance 2 next
    assert policy.route(request, [inst(0.01), inst(0.04, waiting=1), inst(0.02)]) == 2
    # a tighter SLO (1.5 × 1 s): only instance 0 meets it
    tight = HeuristicPolicy.from_spec(heuristic_spec("quality_within_slo", 3, slo_scale=1.5))
    assert tight.route(request, [inst(0.01), inst(0.04), inst(0.02)]) == 0
    # none meets it: the soonest
    assert tight.route(request, [inst(0.01, waiting=1), inst(0.04, waiting=1), inst(0.02)]) == 2
