"""004's closed-form instance (`SingleServerInstance`) against the general engine (`Instance`) it
replaces in `SlotDistributionEnv`: the same observations, rewards and outcomes."""

import dataclasses

import numpy as np
import pytest

from tests.training.policies.test_qos_graph_and_slot_policies import FAST, SLOW, _pool
from training.policies.simulator.cluster import Cluster
from training.policies.simulator.instance import Instance
from training.policies.simulator.single_server import SingleServerInstance
from training.policies.simulator.slot_distribution_env import SlotDistributionEnv
from training.policies.simulator.workloads import arrivals, switched_poisson


def _env(engine: str) -> SlotDistributionEnv:
    pool = _pool(n_models=2)
    d0, d1 = [[-42.0, 2.0], [1.0, -11.0]], np.diag([40.0, 10.0])  # a fast-switching toy process
    return SlotDistributionEnv([SLOW, SLOW, FAST, FAST], [0, 0, 1, 1], [0.9, 0.9, 0.7, 0.7],
                               lambda s: pool.requests(switched_poisson(500, d0, d1, seed=s), seed=s),
                               requirement_s=0.5, slot_s=0.5, buffer=4, pad=5, engine=engine)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_environment_steps_exactly_as_the_batching_engine(seed):
    fast, reference = _env("single_server"), _env("batching")
    obs_f, _ = fast.reset(seed=seed)
    obs_r, _ = reference.reset(seed=seed)
    rng, done, steps = np.random.default_rng(seed), False, 0
    while not done:
        action = (rng.normal(size=4) * 2).astype(np.float32)  # uneven splits: queues fill, buffers overflow
        obs_f, reward_f, term_f, trunc_f, info_f = fast.step(action)
        obs_r, reward_r, term_r, trunc_r, info_r = reference.step(action)
        np.testing.assert_allclose(obs_f, obs_r, atol=1e-6)
        assert reward_f == pytest.approx(reward_r) and info_f == info_r and (term_f, trunc_f) == (term_r, trunc_r)
        done, steps = term_f or trunc_f, steps + 1
    got, want = fast.results(), reference.results()
    assert steps > 10 and sum(o.reason == "buffer full" for o in want) > 0
    assert [(o.instance, o.reason) for o in got] == [(o.instance, o.reason) for o in want]
    for a, b in zip(got, want):
        if b.served:
            assert (a.job.admitted, a.job.first_token, a.job.finished) == pytest.approx(
                (b.job.admitted, b.job.first_token, b.job.finished), abs=1e-9)


def test_kv_cache_rejections_match_the_batching_engine():
    """Prompts larger than the cache are rejected when they reach the head; requests whose prompt and
    output outgrow it are rejected after the decode steps that fit, and the next one starts then."""
    profile = dataclasses.replace(SLOW, max_running=1, buffer=3, kv_capacity_tokens=400)
    pool = _pool(n_models=2, rows=40)
    requests = pool.requests(arrivals("poisson", 60, rate=15.0, seed=3), seed=3)
    outcomes = {}
    for cls in (SingleServerInstance, Instance):
        cluster = Cluster([profile, profile], models=[0, 1], instance_class=cls)
        routed = [cluster.instances[r.rid % 2].advance(r.arrival) or cluster.route(r, r.rid % 2, r.arrival)
                  for r in requests]
        cluster.advance(float("inf"))
        for inst in cluster.instances:
            for job in inst.done:
                if job.rejected:
                    routed[job.rid].reason = job.rejected
        outcomes[cls.__name__] = routed
    got, want = outcomes["SingleServerInstance"], outcomes["Instance"]
    reasons = [o.reason for o in want]
    assert {"buffer full", "larger than the KV cache", "outgrew the KV cache"} <= set(reasons)
    assert [o.reason for o in got] == reasons
    assert [o.e2e for o in got if o.served] == pytest.approx([o.e2e for o in want if o.served], abs=1e-9)


def test_closed_form_refuses_batching_profiles_and_unknown_engines():
    with pytest.raises(ValueError, match="one request at a time"):
        SingleServerInstance("i0", SLOW)
    with pytest.raises(ValueError, match="engine 'fast'"):
        SlotDistributionEnv([SLOW], [0], [0.9], lambda s: [], requirement_s=0.5, engine="fast")
