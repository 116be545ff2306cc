"""004's closed-form instances (`SingleServerFleet`) against the general engine (`Instance`) they
replace in `SlotDistributionEnv`: the same observations, rewards and outcomes."""

import dataclasses

import numpy as np
import pytest
from routeforge.training.policies.simulator.single_server import SingleServerFleet
from routeforge.training.policies.simulator.slot_distribution_env import SlotDistributionEnv
from routeforge.training.policies.simulator.workloads import switched_poisson

from tests.training.policies.test_qos_graph_and_slot_policies import FAST, SLOW, _pool

# a cache of 400 tokens: some prompts are larger, and some prompts with their outputs outgrow it
KV_LIMITED = [dataclasses.replace(p, kv_capacity_tokens=400) for p in (SLOW, SLOW, FAST, FAST)]


def _env(engine: str, profiles=(SLOW, SLOW, FAST, FAST), as_list=False) -> SlotDistributionEnv:
    pool = _pool(n_models=2)
    d0, d1 = [[-42.0, 2.0], [1.0, -11.0]], np.diag([40.0, 10.0])  # a fast-switching toy process

    def workload(s):
        batch = pool.requests(switched_poisson(500, d0, d1, seed=s), seed=s)
        return list(batch) if as_list else batch

    return SlotDistributionEnv(list(profiles), [0, 0, 1, 1], [0.9, 0.9, 0.7, 0.7], workload,
                               requirement_s=0.5, slot_s=0.5, buffer=4, pad=5, engine=engine)


def _same_episode(fast: SlotDistributionEnv, reference: SlotDistributionEnv, seed: int):
    obs_f, _ = fast.reset(seed=seed)
    obs_r, _ = reference.reset(seed=seed)
    np.testing.assert_array_equal(obs_f, obs_r)
    rng, done, steps = np.random.default_rng(seed), False, 0
    while not done:
        action = (rng.normal(size=4) * 2).astype(np.float32)  # uneven splits: queues fill, buffers overflow
        obs_f, reward_f, term_f, trunc_f, info_f = fast.step(action)
        obs_r, reward_r, term_r, trunc_r, info_r = reference.step(action)
        np.testing.assert_allclose(obs_f, obs_r, atol=1e-6)
        assert reward_f == pytest.approx(reward_r) and info_f == info_r and (term_f, trunc_f) == (term_r, trunc_r)
        done, steps = term_f or trunc_f, steps + 1
    got, want = fast.results(), reference.results()
    assert steps > 10 and len(got) == len(want) == 500
    assert [(o.request.rid, o.instance, o.model, o.reason) for o in got] == [
        (o.request.rid, o.instance, o.model, o.reason) for o in want]
    for a, b in zip(got, want):
        assert (a.job.rejected, a.job.preemptions, a.job.generated) == (b.job.rejected, b.job.preemptions,
                                                                       b.job.generated)
        for field in ("enqueued", "admitted", "first_token", "finished"):
            x, y = getattr(a.job, field), getattr(b.job, field)
            assert (x is None) == (y is None) and (x is None or x == pytest.approx(y, abs=1e-9)), field
    return want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_environment_steps_exactly_as_the_batching_engine(seed):
    want = _same_episode(_env("single_server"), _env("batching"), seed)
    assert sum(o.reason == "buffer full" for o in want) > 0


def test_kv_cache_rejections_match_the_batching_engine():
    """Prompts larger than the cache are rejected when they reach the head; requests whose prompt and
    output outgrow it are rejected after the decode steps that fit, and the next one starts then."""
    want = _same_episode(_env("single_server", KV_LIMITED), _env("batching", KV_LIMITED), seed=3)
    assert {"buffer full", "larger than the KV cache", "outgrew the KV cache"} <= {o.reason for o in want}


def test_a_workload_of_request_objects_runs_the_same_episode_as_columns():
    _same_episode(_env("single_server", as_list=True), _env("single_server"), seed=4)


def test_a_truncated_episode_reports_queued_requests_without_times():
    env = SlotDistributionEnv([SLOW, FAST], [0, 1], [0.9, 0.7],
                              lambda s: _pool(n_models=2).requests(np.linspace(0.0, 0.9, 40), seed=s),
                              requirement_s=0.5, slot_s=0.5, buffer=15, pad=15, max_slots=1)
    env.reset(seed=0)
    *_, terminated, truncated, _ = env.step(np.zeros(2, dtype=np.float32))
    outcomes = env.results()
    assert truncated and not terminated and len(outcomes) == 22  # the arrivals before 0.5 s
    queued = [o for o in outcomes if o.reason is None and o.job.finished is None]
    assert queued and all(o.job.first_token is None for o in queued)
    assert sum(o.job.admitted is not None for o in queued) <= 2  # at most the one in service per instance


def test_closed_form_refuses_batching_profiles_and_unknown_engines():
    with pytest.raises(ValueError, match="one request at a time"):
        SingleServerFleet([SLOW], [0], [0.0], [10], [[5]])
    with pytest.raises(ValueError, match="engine 'fast'"):
        SlotDistributionEnv([SLOW], [0], [0.9], lambda s: [], requirement_s=0.5, engine="fast")
    empty = SlotDistributionEnv([SLOW], [0], [0.9], lambda s: [], requirement_s=0.5)
    empty.reset(seed=0)
    assert empty.step(np.zeros(1, dtype=np.float32))[2] and empty.results() == []
