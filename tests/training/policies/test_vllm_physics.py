"""Issue 70, item 2: the simulator schedules as vLLM V1 does. Each change against a case worked by hand:
chunked prefill under a per-step token budget shared with decodes, one KV pool per instance in which a
shared prompt block is stored once, freed blocks cached and evicted tail first and least recently used,
a prefill's attention over the context it already holds, and preemption when the pool runs out."""

import numpy as np
import pytest
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import Instance, InstanceProfile, Job
from routeforge.training.policies.simulator.kv_pool import KvPool


def _profile(**changes):
    base = dict(prefill_intercept_s=0.01, prefill_s_per_token=1e-4, decode_w_s=0.02, decode_h_s_per_token=0.0,
                max_running=8, kv_capacity_tokens=100_000, max_num_batched_tokens=512)
    return InstanceProfile(**{**base, **changes})


def _request(rid, arrival, prompt, out, hashes=()):
    return Request(rid, arrival, prompt, np.array([out]), np.array([0.5]), hash_ids=tuple(hashes))


def test_a_long_prompt_is_prefilled_in_chunks_of_the_step_budget_each_reading_the_context_before_it():
    """1,200 prompt tokens, budget 512, H = 1e-5: chunks of 512, 512 and 176, the second reading 512
    tokens of context and the third 1,024:
    0.01 + 0.0512 + 0  +  0.01 + 0.0512 + 0.00512  +  0.01 + 0.0176 + 0.01024  =  0.16536 s to the first
    token; then two decode steps over 1,201 and 1,202 tokens: 0.03201 + 0.03202."""
    profile = _profile(decode_h_s_per_token=1e-5)
    [o] = Cluster([profile]).run([_request(0, 0.0, 1200, 3)], BASELINES["round_robin"]())
    assert o.ttft == pytest.approx(0.16536)
    assert o.e2e == pytest.approx(0.16536 + 0.03201 + 0.03202)
    assert profile.prefill_s(1200) == pytest.approx(0.16536)
    # unchunked (a budget above the prompt): one step, no context read
    assert _profile(decode_h_s_per_token=1e-5, max_num_batched_tokens=8192).prefill_s(1200) == pytest.approx(0.13)


def test_a_prefill_shares_each_step_with_the_running_decodes():
    """A decodes from 0.02 s in 0.02 s steps (H = 0); B arrives at 0.51 s with 1,000 prompt tokens. The
    step starting at 0.52 s carries A's decode and 511 of B's tokens (512 less A's one): 0.01 + 0.0511 +
    0.02 = 0.0811 s; the next the other 489: 0.0789 s. B's first token at 0.68 s (TTFT 0.17 s); A's two
    tokens in those steps took 0.16 s instead of 0.04 s."""
    a, b = _request(0, 0.0, 100, 1000), _request(1, 0.51, 1000, 2)
    outcomes = Cluster([_profile()]).run([a, b], BASELINES["round_robin"]())
    assert outcomes[1].ttft == pytest.approx(0.17)
    # A: 1,000 tokens at 0.02 s but for those two mixed steps
    assert outcomes[0].e2e == pytest.approx(0.02 + 999 * 0.02 + (0.0811 - 0.02) + (0.0789 - 0.02))


def test_a_shared_prompt_block_is_stored_once_in_the_pool():
    """Two requests share 8 blocks of 100 tokens and add 100 of their own; the pool holds 1,200 tokens.
    Stored once, both fit at once (800 + 2 × (100 + generated)); counted twice (1,800) they could not.
    So the second is admitted while the first still runs, and the pool's use says 800 + their own."""
    shared = list(range(8))
    profile = _profile(kv_capacity_tokens=1200, max_num_batched_tokens=8192)
    cluster = Cluster([profile], block_tokens=100)
    first = _request(0, 0.0, 900, 50, shared + [100])
    second = _request(1, 0.05, 900, 50, shared + [200])
    cluster.route(first, 0, 0.0)
    cluster.advance(0.05)
    cluster.route(second, 0, 0.05)
    cluster.advance(0.2)
    inst = cluster.instances[0]
    assert inst.n_running == 2 and not inst.waiting
    # nine full blocks each: the shared eight once (referenced twice) and one of its own each
    assert len(inst.pool.refs) == 10 and inst.pool.refs[0] == 2 and inst.pool.refs[100] == 1
    used = inst._private() + inst.pool.referenced_tokens()
    assert used == 1000 + (inst.context_tokens - 2 * 900)  # the blocks, and each one's generated tokens
    assert inst.kv_utilization() == pytest.approx(used / 1200)
    assert used <= 1200


def test_freed_blocks_stay_cached_and_are_evicted_tail_first_least_recently_used():
    """A request's blocks 1-4 freed enter the free queue 4, 3, 2, 1: memory pressure takes block 4
    first, so the head 1-3 still hits; blocks freed later go after them; a hit takes a free block back."""
    pool = KvPool(capacity_tokens=1000, block_tokens=100)
    for block in (1, 2, 3, 4):
        pool.reference(block)
    pool.release([1, 2, 3, 4])
    assert list(pool.free) == [4, 3, 2, 1] and pool.match([1, 2, 3, 4]) == 4
    pool.fit(private=700)  # 700 private + 400 cached > 1,000: one block goes, the tail
    assert pool.match([1, 2, 3, 4]) == 3 and 4 not in pool.free
    for block in (7, 8):
        pool.reference(block)
    pool.release([7, 8])
    assert list(pool.free) == [3, 2, 1, 8, 7]
    assert pool.reference(2) and 2 not in pool.free and pool.refs[2] == 1  # a hit: referenced again
    assert pool.room(private=0) == 1000 - 100  # free cached blocks are room; referenced ones are not


def test_a_cache_hit_prefills_only_the_rest_and_reads_the_cached_context():
    """900 of 1,000 tokens cached (the whole prompt is held, so the hit backs off one block): the warm
    prefill is 100 tokens and reads 900 of context: 0.01 + 1e-4 × 100 + 1e-5 × 900 = 0.029 s."""
    profile = _profile(decode_h_s_per_token=1e-5, max_num_batched_tokens=8192)
    reqs = [_request(0, 0.0, 1000, 2, range(10)), _request(1, 10.0, 1000, 2, range(10))]
    outcomes = Cluster([profile], block_tokens=100).run(reqs, BASELINES["round_robin"]())
    assert outcomes[1].job.cached_tokens == 900
    assert outcomes[1].ttft == pytest.approx(0.029)


def test_the_pool_running_out_preempts_the_latest_admitted_which_recomputes_what_it_had():
    """A pool of 400 tokens, four requests of 60 + 80: they cannot all finish together; the latest
    admitted is preempted, returns to the head of the queue and recomputes its prompt and generated
    tokens; every request still gets all its tokens, and the pool never holds more than it has."""
    profile = _profile(kv_capacity_tokens=400, max_num_batched_tokens=8192)
    inst = Instance("a", profile)
    jobs = [Job(k, 60, 80, 0.0) for k in range(4)]
    for job in jobs:
        inst.enqueue(job, 0.0)
    for t in np.arange(0.01, 30.0, 0.01):
        inst.advance(float(t))
        assert inst._private() + inst.pool.referenced_tokens() <= 400 + inst.n_running
    inst.advance(float("inf"))
    assert sorted(j.rid for j in inst.done) == [0, 1, 2, 3] and all(j.finished for j in inst.done)
    assert sum(j.preemptions for j in inst.done) > 0
    assert all(j.generated == 80 for j in inst.done)
    preempted = [j for j in inst.done if j.preemptions]
    assert all(j.first_token < j.finished for j in preempted)


def test_a_request_larger_than_the_pool_is_rejected():
    outcomes = Cluster([_profile(kv_capacity_tokens=500)]).run([_request(0, 0.0, 600, 3)], BASELINES["round_robin"]())
    assert not outcomes[0].served and outcomes[0].reason == "larger than the KV cache"


def test_a_decode_step_costs_each_sequence_in_it_where_the_fit_has_a_per_sequence_term():
    """S = 1e-3 s per sequence, W = 0.02, H = 0, budget 8,192. A (arriving at 0) and B (at 0.001 s),
    100 prompt tokens each, 4 output tokens. A's prefill step: 0.01 + 0.01 = 0.02 s (first token at 0.02).
    B's prefill rides the next step with A's decode: 0.01 + 0.01 + (0.02 + 1e-3 · 1) = 0.041 s, ending at
    0.061. Then both decode in lock step at 0.02 + 2e-3 = 0.022 s a step: A's last two tokens end at
    0.083 and 0.105; B decodes alone after, at 0.021 s: its last token at 0.105 + 0.021 = 0.126."""
    profile = _profile(decode_s_per_seq=1e-3, max_num_batched_tokens=8192)
    a, b = _request(0, 0.0, 100, 4), _request(1, 0.001, 100, 4)
    outcomes = Cluster([profile]).run([a, b], BASELINES["round_robin"]())
    assert outcomes[0].ttft == pytest.approx(0.02)
    assert outcomes[1].ttft == pytest.approx(0.061 - 0.001)
    assert outcomes[0].e2e == pytest.approx(0.105)
    assert outcomes[1].e2e == pytest.approx(0.126 - 0.001)
    assert profile.nominal_tpot(0.0, batch=2) == pytest.approx(0.022)
    # without the term the same two requests finish sooner: the batch costs nothing per sequence
    plain = Cluster([_profile(max_num_batched_tokens=8192)]).run([a, b], BASELINES["round_robin"]())
    assert plain[1].e2e < outcomes[1].e2e
